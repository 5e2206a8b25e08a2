package pbp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// relayNet is three members wired together in virtual time: member 0
// sends and crashes, members 1 and 2 survive. lost says which of member
// 0's Data frames (by sequence number) never reach member 2.
type relayNet struct {
	t         *testing.T
	cores     []*Core
	now       Time
	down      []bool
	lost      map[uint32]bool
	delivered [][]string // by member
	events    [][]Event
	relays    int // ViewRelay frames sent
	lastRelay Time
}

func newRelayNet(t *testing.T, relay bool) *relayNet {
	n := &relayNet{t: t, now: t0, down: make([]bool, 3), lost: map[uint32]bool{},
		delivered: make([][]string, 3), events: make([][]Event, 3)}
	for id := range 3 {
		cfg := testConfig(PBP2, frame.MemberID(id), 3)
		cfg.Window = 8
		cfg.Relay = relay
		n.cores = append(n.cores, newCore(t, cfg))
	}
	return n
}

// turn runs each live core once at n.now: its timers when due, its
// Ready's frames into the others.
func (n *relayNet) turn() {
	t := n.t
	t.Helper()
	for id, c := range n.cores {
		if n.down[id] {
			continue
		}
		if d := c.Deadline(); d != 0 && d <= n.now {
			c.Tick(n.now)
		}
		rd := c.Ready()
		for _, d := range rd.Deliveries {
			n.delivered[id] = append(n.delivered[id], string(d.Data))
		}
		n.events[id] = append(n.events[id], rd.Events...)
		for _, raw := range rd.Frames {
			eth, rest, err := frame.SplitEthernet(raw, frame.EtherType)
			if err != nil {
				t.Fatal(err)
			}
			v, err := frame.ParseGroup(rest, testGroup)
			if err != nil {
				t.Fatal(err)
			}
			if v.Type() == frame.ViewRelay {
				n.relays++
				n.lastRelay = n.now
			}
			for to, o := range n.cores {
				if to == id || n.down[to] || eth.Dst() != frame.Broadcast && eth.Dst() != testMAC(frame.MemberID(to)) {
					continue
				}
				if id == 0 && to == 2 && v.Type() == frame.Data && n.lost[v.Seq()] {
					continue
				}
				if err := o.Step(n.now, eth.Src(), eth.Dst(), v); err != nil {
					t.Fatalf("member %d steps a %v of member %d: %v", to, v.Type(), id, err)
				}
			}
		}
		c.Advance()
	}
}

// run turns the members every millisecond until until.
func (n *relayNet) run(until Time) {
	for ; n.now < until; n.now = n.now.Add(Millisecond) {
		n.turn()
	}
}

// crashAfterSending has member 0 send six messages, one frame each,
// frames 103..105 lost at member 2, and crash at once: member 1 holds
// all six, member 2 the first three and a gap only member 0 could fill.
func (n *relayNet) crashAfterSending() {
	n.t.Helper()
	n.lost[103], n.lost[104], n.lost[105] = true, true, true
	for i := range 6 {
		if err := n.cores[0].Propose(n.now, []byte{'m', byte('0' + i)}); err != nil {
			n.t.Fatal(err)
		}
		n.turn()
	}
	n.down[0] = true
	n.run(t0.Add(3 * Second)) // past the failure timeout (2 s)
}

func failedEvent(evs []Event) (Event, bool) {
	i := slices.IndexFunc(evs, func(e Event) bool { return e.Kind == MemberFailed && e.Member == 0 })
	if i < 0 {
		return Event{}, false
	}
	return evs[i], true
}

// A member dies with frames on the wire: member 2 lost its last three
// frames, which member 1 delivered. With Relay, member 1 relays them to
// member 2 once member 0 was silent for half the failure timeout, and
// both remove member 0 having delivered all six messages, discarding
// none. Without it, member 2 delivers three and the survivors disagree.
func TestRelayDeadMembersFramesToSurvivor(t *testing.T) {
	n := newRelayNet(t, true)
	n.crashAfterSending()
	want := "m0,m1,m2,m3,m4,m5"
	for id := 1; id < 3; id++ {
		if got := strings.Join(n.delivered[id], ","); got != want {
			t.Errorf("member %d delivered %s of member 0's, want %s", id, got, want)
		}
		ev, ok := failedEvent(n.events[id])
		if !ok {
			t.Fatalf("member %d never removed member 0: events %v", id, n.events[id])
		}
		if ev.Delivered != 106 || ev.Discarded != 0 {
			t.Errorf("member %d removed member 0 having delivered up to %d, discarding %d: want 106, 0", id, ev.Delivered, ev.Discarded)
		}
	}
	s1, s2 := n.cores[1].Counters(), n.cores[2].Counters()
	if s1.Relayed < 3 || s2.RelaysReceived < 3 || s2.Relayed != 0 {
		t.Errorf("member 1 relayed %d frames, member 2 took %d and relayed %d: want 3 or more, 3 or more, 0",
			s1.Relayed, s2.RelaysReceived, s2.Relayed)
	}
	// The relay starts half a failure timeout after member 0 was last
	// heard and stops once member 2 acknowledged what it lacked.
	if n.relays == 0 || n.lastRelay < t0.Add(Second) || n.lastRelay > t0.Add(Second+200*Millisecond) {
		t.Errorf("%d relays, the last %d ms after the start: want some, at 1 s (half of FailureTimeout)", n.relays, n.lastRelay.Sub(t0)/Millisecond)
	}

	t.Logf("%d relays, the last %d ms after the start", n.relays, n.lastRelay.Sub(t0)/Millisecond)
	off := newRelayNet(t, false)
	off.crashAfterSending()
	if got := strings.Join(off.delivered[2], ","); got != "m0,m1,m2" {
		t.Errorf("without Relay member 2 delivered %s, want m0,m1,m2 (the gap only member 0 could fill)", got)
	}
	if off.relays != 0 {
		t.Errorf("without Relay %d relays were sent", off.relays)
	}
}

// A relay whose frames are lost is repeated every FailureTimeout/16 while
// a member still lacks them; it stops two failure timeouts after the
// sender was last heard, whatever the others say.
func TestRelayRepeatsUntilAcknowledged(t *testing.T) {
	n := newRelayNet(t, true)
	n.lost[103], n.lost[104], n.lost[105] = true, true, true
	for i := range 6 {
		if err := n.cores[0].Propose(n.now, []byte{'m', byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
		n.turn()
	}
	n.down[0], n.down[2] = true, true // member 2 hears nothing for a while
	n.run(t0.Add(1300 * Millisecond))
	first := n.relays
	if first < 6 {
		t.Fatalf("%d relays by 1.3 s, with member 2 silent: want the three frames relayed at least twice", first)
	}
	n.down[2] = false
	n.run(t0.Add(3 * Second))
	if got := strings.Join(n.delivered[2], ","); got != "m0,m1,m2,m3,m4,m5" {
		t.Errorf("member 2 delivered %s", got)
	}
	t.Logf("%d relays by 1.3 s, %d in all, the last %d ms after the start", first, n.relays, n.lastRelay.Sub(t0)/Millisecond)
	if n.lastRelay > t0.Add(1400*Millisecond) {
		t.Errorf("relays went on until %d ms after the start, after member 2 acknowledged at 1.3 s", n.lastRelay.Sub(t0)/Millisecond)
	}
}

// Relays that are not a Data frame of a member of this group, or come to
// a core without Relay, are refused with an error that says which.
func TestRelayRefused(t *testing.T) {
	relay := func(inner frame.Header) in {
		inner.Group = testGroup
		f, err := frame.Append(nil, &inner, &frame.Payload{T: frame.Data, Data: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return in{sender: 1, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.ViewRelayBody{Frame: f}}
	}
	off := newCore(t, testConfig(PBP2, 2, 3))
	if err := step(t, off, t0, relay(frame.Header{Sender: 0, Incarnation: 7, Seq: 100})); !errors.Is(err, ErrFrameType) || !strings.Contains(err.Error(), "Relay is not set") {
		t.Errorf("a relay to a core without Relay: %v", err)
	}
	cfg := testConfig(PBP2, 2, 3)
	cfg.Relay = true
	c := newCore(t, cfg)
	for _, tc := range []struct {
		h    frame.Header
		want error
		text string
	}{
		{frame.Header{Sender: 9, Incarnation: 7, Seq: 100}, ErrNotMember, "relayed a frame of 9.7"},
		{frame.Header{Sender: 0, Incarnation: 8, Seq: 100}, ErrNotMember, "relayed a frame of 0.8"},
		{frame.Header{Sender: 0, Incarnation: 7, Seq: 100 + 1<<15}, ErrFrameType, "a window or more past 100"},
		{frame.Header{Sender: 0, Incarnation: 7, Seq: 100, ViewID: 3}, ErrFrameType, "not a Data frame of group"},
	} {
		if err := step(t, c, t0, relay(tc.h)); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("relay of %+v: %v, want %v with %q", tc.h, err, tc.want, tc.text)
		}
	}
	if got := c.Counters().RelaysRefused; got != 4 {
		t.Errorf("RelaysRefused %d, want 4", got)
	}
	// A good one is delivered, once.
	for range 2 {
		if err := step(t, c, t0, relay(frame.Header{Sender: 0, Incarnation: 7, Seq: 100})); err != nil {
			t.Fatal(err)
		}
	}
	if _, ds, _ := ready(t, c); msgs(ds) != "x" {
		t.Errorf("delivered %q, want x", msgs(ds))
	}
}

func TestRelayConfig(t *testing.T) {
	cfg := testConfig(PBP2, 0, 3)
	cfg.Relay, cfg.ViewID = true, 4
	if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "not view 4") {
		t.Errorf("Relay with a view: %v", err)
	}
	cfg.ViewID = 0
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := newCore(t, testConfig(PBP2, 0, 3))
	if got, want := c.Info().MaxMessage, plain.Info().MaxMessage-RelayOverhead; got != want {
		t.Errorf("MaxMessage with Relay %d, want %d", got, want)
	}
	cfg.MaxPayload = plain.Info().MaxMessage
	if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "with Relay") {
		t.Errorf("MaxPayload too large for a relay: %v", err)
	}
}
