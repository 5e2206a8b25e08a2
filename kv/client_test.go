package kv

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// answerer is a stand-in replica on loopback that answers every request
// with value "v".
func answerer(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			q, err := ParseRequest(buf[:n])
			if err != nil {
				continue
			}
			c.WriteTo(AppendReply(nil, Reply{Client: q.Client, Seq: q.Seq, Result: Result{Status: StatusOK, Value: []byte("v")}}), from)
		}
	}()
	return c.LocalAddr().String()
}

// silent is a replica that was killed: its port is bound, nothing answers.
func silent(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.LocalAddr().String()
}

func TestClientFailsOver(t *testing.T) {
	dead, live := silent(t), answerer(t)
	c := &Client{Servers: []string{dead, live}, Timeout: 20 * time.Millisecond}
	defer c.Close()
	res, err := c.Do(context.Background(), Op{Kind: OpGet, Key: "k"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Value) != "v" || c.Tries != 2 || c.Served != live {
		t.Fatalf("got %v after %d tries from %s, want v after 2 from %s", res, c.Tries, c.Served, live)
	}
	if c.LastTry <= 0 || c.LastTry >= c.Timeout {
		t.Fatalf("LastTry %v: want the retry's own time, under the timeout %v", c.LastTry, c.Timeout)
	}
}

// The last stretch before a deadline is polled, not slept: a datagram
// waiting then is returned, and nothing waiting ends in a timeout.
func TestClientReadNearDeadline(t *testing.T) {
	c := &Client{Servers: []string{answerer(t)}}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.read(time.Now().Add(timerSlack / 2)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("nothing sent: read returned %v, want a deadline error", err)
	}
	if _, err := c.read(time.Now().Add(-time.Second)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a deadline passed: read returned %v, want a deadline error", err)
	}
	self, err := net.Dial("udp", c.conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if _, err := self.Write([]byte("late answer")); err != nil {
		t.Fatal(err)
	}
	n, err := c.read(time.Now().Add(timerSlack / 2))
	for i := 0; i < 1000 && errors.Is(err, os.ErrDeadlineExceeded); i++ { // not yet through loopback
		n, err = c.read(time.Now().Add(timerSlack / 2))
	}
	if err != nil || string(c.buf[:n]) != "late answer" {
		t.Fatalf("read %q, %v; want the datagram", c.buf[:n], err)
	}
}
