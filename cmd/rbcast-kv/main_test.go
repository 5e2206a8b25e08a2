package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/kv"
)

// fakeReplica answers gets on a loopback UDP socket from values (a
// missing key: not found; the key "gone": the session expired), opens
// session 42, and returns its address.
func fakeReplica(t *testing.T, values map[string]string) string {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, addr, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			q, err := kv.ParseRequest(buf[:n])
			if err != nil {
				continue
			}
			res := kv.Result{Status: kv.StatusNotFound}
			switch v, ok := values[q.Op.Key]; {
			case q.Open:
				res = kv.Result{Status: kv.StatusOK, Value: []byte{0, 0, 0, 0, 0, 0, 0, 42}}
			case q.Op.Key == "gone":
				res = kv.Result{Status: kv.StatusExpired, Value: []byte("session 42 expired or was never opened")}
			case ok:
				res = kv.Result{Status: kv.StatusOK, Value: []byte(v)}
			}
			conn.WriteTo(kv.AppendReply(nil, kv.Reply{Client: q.Client, Seq: q.Seq, Result: res}), addr)
		}
	}()
	return conn.LocalAddr().String()
}

// verify names every key that does not hold load's value, and counts
// the ones that do.
func TestVerify(t *testing.T) {
	addr := fakeReplica(t, map[string]string{"w-0": "0", "w-1": "1", "w-2": "two"})
	var out, errb bytes.Buffer
	code := run([]string{"-servers", addr, "-deadline", "1s", "verify", "-n", "4", "-c", "2", "-prefix", "w"}, &out, &errb)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	all := strings.Join(lines, "|")
	if code != 1 || len(lines) != 3 || !strings.Contains(all, `w-2: ok "two", want ok "2"`) ||
		!strings.Contains(all, `w-3: not found, want ok "3"`) || lines[2] != "verified 2 of 4 keys" {
		t.Fatalf("verify = %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"-servers", addr, "-local", "verify", "-n", "2", "-prefix", "w"}, &out, &errb); code != 0 || out.String() != "verified 2 of 2 keys\n" {
		t.Fatalf("verify -local of good keys = %d, %q", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"-servers", addr, "verify", "-c", "0"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "want -c at least 1") {
		t.Fatalf("verify -c 0 = %d, stderr %q", code, errb.String())
	}
}

// A request whose session expired fails with a message that says so and
// that its outcome is unknown.
func TestSessionExpired(t *testing.T) {
	addr := fakeReplica(t, nil)
	var out, errb bytes.Buffer
	code := run([]string{"-servers", addr, "-deadline", "1s", "put", "gone", "v"}, &out, &errb)
	want := "rbcast-kv: kv: session expired: session 42, request put(\"gone\", \"v\"): not executed now, but an earlier attempt may have been"
	if code != 2 || strings.TrimSpace(errb.String()) != want {
		t.Fatalf("put of an expired session = %d, stdout %q, stderr %q; want 2 and %q", code, out.String(), errb.String(), want)
	}
}

// serve's usage errors name the flag; they come before any socket or
// interface is opened (rbnone0 does not exist).
func TestServeUsage(t *testing.T) {
	base := []string{"serve", "-i", "rbnone0", "-group", "1", "-members", "3", "-listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "paxos"}, `-mode "paxos": want ordered or thesis`},
		{[]string{"-mode", "thesis"}, "-mode thesis needs -node: -node 0 on one replica (the registration server)"},
		{[]string{"-mode", "thesis", "-node", "1", "-tr", "0s"}, "-tr 0s, -eps 5ms, -tc 0s: want -tr > 0"},
		{[]string{"-mode", "thesis", "-node", "1", "-slots", "0"}, "-slots is 0, want at least 1"},
	} {
		var out, errb bytes.Buffer
		if code := run(append(append([]string(nil), base...), tc.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("serve %v = %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// load -pause waits before each put (cold puts); a negative pause is
// refused.
func TestLoadPause(t *testing.T) {
	addr := fakeReplica(t, map[string]string{"p-0": "0", "p-1": "1"})
	var out, errb bytes.Buffer
	if code := run([]string{"-servers", addr, "-deadline", "1s", "load", "-n", "2", "-prefix", "p", "-pause", "5ms"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "done 2 puts") {
		t.Fatalf("load -pause 5ms = %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run([]string{"-servers", addr, "load", "-pause", "-1s"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-pause -1s: want -c at least 1 and no negative counts or pause") {
		t.Fatalf("load -pause -1s = %d, stderr %q", code, errb.String())
	}
}
