package localapi

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A consumer that polls (Waiting) leaves wantData clear: the producer
// then publishes without a doorbell, and the consumer sees the record.
func TestRingWaitingNoDoorbell(t *testing.T) {
	p, c := ringPair(t, MinRing, 100)
	if c.Waiting() {
		t.Fatal("Waiting on an empty ring")
	}
	p.Add(3, []byte("x"))
	if p.Publish() {
		t.Fatal("Publish rang a consumer that polls")
	}
	if !c.Waiting() {
		t.Fatal("Waiting after a publish says nothing waits")
	}
	if from, d, ok, err := c.Next(); err != nil || !ok || from != 3 || string(d) != "x" {
		t.Fatalf("Next: %d %q %v %v", from, d, ok, err)
	}
	if c.Waiting() {
		t.Fatal("Waiting once everything is read")
	}
}

// seqpacketPair is a connected pair of SOCK_SEQPACKET sockets.
func seqpacketPair(t *testing.T) (a *net.UnixConn, b *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa := os.NewFile(uintptr(fds[0]), "a")
	c, err := net.FileConn(fa)
	fa.Close()
	if err != nil {
		t.Fatal(err)
	}
	b = os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { c.Close(); b.Close() })
	return c.(*net.UnixConn), b
}

// A PacketReader's ready function is looked at while it spins (sleep
// false) and once before it sleeps (sleep true); true ends the read with
// ErrReady, and a packet that waits is read first.
func TestPacketReaderReady(t *testing.T) {
	a, b := seqpacketPair(t)
	r, err := NewPacketReader(a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var looks []bool
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		return len(looks) == 3
	})
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) {
		t.Fatalf("Read with ready true on its third look while spinning: %v, want ErrReady", err)
	}
	if len(looks) != 3 || looks[0] || looks[1] || looks[2] {
		t.Fatalf("looks %v, want three while spinning", looks)
	}
	// No spin: one look, before sleeping.
	r.SetSpin(0)
	looks = nil
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		return true
	})
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || len(looks) != 1 || !looks[0] {
		t.Fatalf("Read without a spin: %v, looks %v; want ErrReady after one look before sleeping", err, looks)
	}
	// A packet waiting is read, ready not asked.
	looks = nil
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n, _, err := r.Read(buf); err != nil || string(buf[:n]) != "hello" || len(looks) != 0 {
		t.Fatalf("Read with a packet waiting: %q, %v, looks %v", buf[:n], err, looks)
	}
	// Ready false before sleeping: the read sleeps until a packet comes.
	looks = nil
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		if sleep {
			b.Write([]byte("late"))
		}
		return false
	})
	if n, _, err := r.Read(buf); err != nil || string(buf[:n]) != "late" || len(looks) != 1 {
		t.Fatalf("Read that slept: %q, %v, looks %v", buf[:n], err, looks)
	}
}
