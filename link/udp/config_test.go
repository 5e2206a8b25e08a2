package udp

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMACOf(t *testing.T) {
	a := MACOf(netip.MustParseAddrPort("10.77.0.1:7001"))
	if a[0] != 0x02 {
		t.Errorf("MACOf = %s: want a locally administered unicast address (02:...)", a)
	}
	// The golden value: every member computes the same, on every build.
	if got, want := a.String(), "02:52:17:1a:db:5a"; got != want {
		t.Errorf("MACOf(10.77.0.1:7001) = %s, want %s", got, want)
	}
	same := []string{"10.77.0.1:7001", "[::ffff:10.77.0.1]:7001"}
	for _, s := range same {
		if got := MACOf(netip.MustParseAddrPort(s)); got.String() != a.String() {
			t.Errorf("MACOf(%s) = %s, want %s (the same member)", s, got, a)
		}
	}
	if MACOf(netip.MustParseAddrPort("10.77.0.1:7002")).String() == a.String() {
		t.Error("another port gives the same MAC")
	}
	z := MACOf(netip.MustParseAddrPort("[fe80::1%eth0]:7001"))
	if got := MACOf(netip.MustParseAddrPort("[fe80::1%eth1]:7001")); got.String() != z.String() {
		t.Errorf("the zone changed the MAC: %s, %s", z, got)
	}
}

func TestLinkMTU(t *testing.T) {
	for _, c := range []struct {
		ip   int
		v6   bool
		want int
	}{{1500, false, 1458}, {1500, true, 1438}, {9000, false, 8958}, {65536, false, 65493}} {
		if got := LinkMTU(c.ip, c.v6); got != c.want {
			t.Errorf("LinkMTU(%d, v6 %v) = %d, want %d", c.ip, c.v6, got, c.want)
		}
	}
}

func TestParseAddrPorts(t *testing.T) {
	got, err := ParseAddrPorts("10.0.0.1:5000, [fd00::2]:5001,[::ffff:10.0.0.3]:5002")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].String() != "10.0.0.1:5000" || got[1].String() != "[fd00::2]:5001" || got[2].String() != "10.0.0.3:5002" {
		t.Errorf("got %v", got)
	}
	for _, c := range []struct{ in, want string }{
		{"10.0.0.1:5000,,10.0.0.2:5000", "address 2 of"},
		{"host.example:5000", `address 1 "host.example:5000": want IP:PORT`},
		{"fd00::1:5000", `address 1 "fd00::1:5000"`},
	} {
		if _, err := ParseAddrPorts(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseAddrPorts(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestConfigDoesNotChangeCallersPeers(t *testing.T) {
	peers := []netip.AddrPort{netip.MustParseAddrPort("[::ffff:10.0.0.1]:5000")}
	if _, err := (Config{Peers: peers}).withDefaults(); err != nil {
		t.Fatal(err)
	}
	if !peers[0].Addr().Is4In6() {
		t.Error("withDefaults rewrote the caller's Peers")
	}
}

func TestHelloRoundTrip(t *testing.T) {
	in := []helloEntry{
		{netip.MustParseAddrPort("10.0.0.1:5000"), 1500 * time.Millisecond},
		{netip.MustParseAddrPort("[fd77::2]:5001"), 0},
		{netip.MustParseAddrPort("10.0.0.3:5002"), 100 * 24 * time.Hour}, // saturates
	}
	src := [6]byte{2, 1, 2, 3, 4, 5}
	b := appendHello(nil, src, helloAsk, in)
	if len(b) != 14+helloHeader+2*entryLen(4)+entryLen(6) {
		t.Fatalf("hello is %d bytes", len(b))
	}
	var out []helloEntry
	kind, err := parseHello(b, func(e helloEntry) { out = append(out, e) })
	if err != nil || kind != helloAsk || len(out) != 3 {
		t.Fatalf("parseHello: kind %d, %d entries, %v", kind, len(out), err)
	}
	if out[0] != in[0] || out[1] != in[1] || out[2].Addr != in[2].Addr || out[2].Age != (1<<32-1)*time.Millisecond {
		t.Errorf("round trip: %v, want %v (the last age saturated)", out, in)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", b[:16], "byte 14: 2 bytes after the Ethernet header"},
		{"version", patch(b, 14, 9), "byte 14: version 9"},
		{"kind", patch(b, 15, 7), "byte 15: kind 7"},
		{"family", patch(b, 18, 5), "byte 18: entry 0: family 5"},
		{"truncated", b[:len(b)-1], "entry 2: 10 bytes left, an IPv4 entry is 11"},
		{"trailing", append(append([]byte(nil), b...), 0), "1 bytes after the last of 3 entries"},
		{"missing", patch(b, 17, 4), "entry 3 of 4 is missing"},
	} {
		calls := 0
		_, err := parseHello(c.b, func(helloEntry) { calls++ })
		if !errors.Is(err, errHello) || !strings.Contains(err.Error(), c.want) || calls != 0 {
			t.Errorf("%s: %v (%d entries handed out); want %q and none", c.name, err, calls, c.want)
		}
	}
}

func patch(b []byte, off int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[off] = v
	return c
}

func FuzzParseHello(f *testing.F) {
	f.Add(appendHello(nil, [6]byte{2}, helloAnswer, []helloEntry{{netip.MustParseAddrPort("10.0.0.1:1"), time.Second}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out []helloEntry
		kind, err := parseHello(b, func(e helloEntry) { out = append(out, e) })
		if err != nil {
			return
		}
		again := appendHello(nil, [6]byte(b[6:12]), kind, out)
		if string(again[14:]) != string(b[14:]) {
			t.Fatalf("re-encoding differs: %x, was %x", again, b)
		}
	})
}

// A hello naming a member heard from longer ago than the timeout does not
// bring it back; a fresher one updates a member's time; a member heard
// from by nobody is forgotten, static ones never.
func TestPeersGossip(t *testing.T) {
	self := netip.MustParseAddrPort("10.0.0.1:1")
	static := netip.MustParseAddrPort("10.0.0.2:1")
	p := newPeers(self, [6]byte(MACOf(self)), []netip.AddrPort{self, static}, 0, true, time.Hour)
	if len(p.list()) != 1 {
		t.Fatalf("static list of self and one: %d peers, want 1", len(p.list()))
	}
	old := netip.MustParseAddrPort("10.0.0.3:1")
	fresh := netip.MustParseAddrPort("10.0.0.4:1")
	if n := p.gossip([]helloEntry{{old, 2 * time.Hour}, {fresh, time.Minute}, {self, 0}}, 0); n != 1 {
		t.Fatalf("learned %d, want 1 (the fresh one)", n)
	}
	if p.set.Load().byAddr[old] != nil || p.set.Load().byAddr[fresh] == nil {
		t.Fatal("learned the stale member or not the fresh one")
	}
	q := p.set.Load().byAddr[fresh]
	before := q.heard.Load()
	p.gossip([]helloEntry{{fresh, time.Second}}, 0)
	if q.heard.Load() <= before {
		t.Error("a fresher hello did not move the member's time")
	}
	p.gossip([]helloEntry{{fresh, 50 * time.Minute}}, 0)
	if q.heard.Load() <= before {
		t.Error("an older hello moved the member's time back")
	}
	p.timeout = time.Nanosecond
	time.Sleep(time.Millisecond)
	if n := p.expire(); n != 1 || len(p.list()) != 1 || p.list()[0].addr != static {
		t.Errorf("expire forgot %d and kept %d; want the learned one gone, the static one kept", n, len(p.list()))
	}
}

// FuzzParseAddrPorts: a -udp-peers list either fails or parses to
// addresses (IPv4-mapped ones unmapped) whose printed list parses to
// them again.
func FuzzParseAddrPorts(f *testing.F) {
	f.Add("10.0.0.1:5000,[fd00::1]:5001")
	f.Add("[::ffff:10.0.0.2]:7, 192.168.1.1:65535")
	f.Fuzz(func(t *testing.T, s string) {
		as, err := ParseAddrPorts(s)
		if err != nil {
			return
		}
		var printed []string
		for _, a := range as {
			if a.Addr().Is4In6() {
				t.Fatalf("%q: %v is IPv4-mapped", s, a)
			}
			printed = append(printed, a.String())
		}
		again, err := ParseAddrPorts(strings.Join(printed, ","))
		if err != nil || !slices.Equal(again, as) {
			t.Fatalf("%q parses to %v, which print as %q and parse to %v (%v)", s, as, printed, again, err)
		}
	})
}
