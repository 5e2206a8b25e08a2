package viewsim

import (
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// TestRelaysOnlyToCompleters counts the frames a view change relays.
// Of four members, m loses departing sender d's two frames, which the
// coordinator c and h deliver; d crashes, and m gets no Commit for 200
// ms (every copy lost), so it repeats its Flush for the Prepare it
// answered every Retry. A member takes relays only while it completes
// a commit, so a Flush that answers a Prepare asks for none: c relays
// d's frames once with its commit and once more for m's Flush once m
// completes — 4 frames. Before, every repeated Flush of m's had c relay
// both frames again to nobody who could take them (18 here).
func TestRelaysOnlyToCompleters(t *testing.T) {
	r, ps := group(t, 4, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	c, h, m, d := ps[0], ps[1], ps[2], ps[3]
	m.drop = func(f []byte) bool { return sentBy(f, frame.Data, d) }
	msgs := []msgID{d.send(t)}
	r.net.RunFor(2 * time.Millisecond)
	msgs = append(msgs, d.send(t))
	r.net.RunFor(20 * time.Millisecond)
	for _, msg := range msgs {
		if !c.delivered(msg) || !h.delivered(msg) || m.delivered(msg) {
			t.Fatalf("before the crash: c delivered %v, h %v, m %v; want true, true, false", c.delivered(msg), h.delivered(msg), m.delivered(msg))
		}
	}
	base := c.view
	before := c.core.Counters().Relayed + h.core.Counters().Relayed
	lose := true
	m.drop = func(f []byte) bool {
		if sentBy(f, frame.Data, d) {
			return true
		}
		v, err := frame.Parse(f[frame.EthernetHeaderLen:])
		return err == nil && lose && v.Type() == frame.ViewCommit
	}
	d.dead = true
	d.ep.Crash()
	for i := 0; c.view == base; i++ {
		if i == 3000 {
			t.Fatalf("c installed no view after %#x in 3 s", base)
		}
		r.net.RunFor(time.Millisecond)
	}
	r.net.RunFor(200 * time.Millisecond)
	if m.view != base {
		t.Fatalf("m installed view %#x without a commit", m.view)
	}
	lose = false
	r.net.RunFor(time.Second)
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	for _, p := range []*process{c, h, m} {
		if p.view == base || p.err != nil {
			t.Fatalf("%x.%d: view %#x (base %#x), err %v", p.mac, p.inc, p.view, base, p.err)
		}
		for _, msg := range msgs {
			if !slices.ContainsFunc(p.views, func(v uint32) bool { return v == base && slices.Contains(p.inView[v], msg) }) {
				t.Fatalf("%x.%d did not deliver d's message %v in view %#x", p.mac, p.inc, msg, base)
			}
		}
	}
	relayed := c.core.Counters().Relayed + h.core.Counters().Relayed - before
	t.Logf("frames relayed: %d (c %d, h %d); received unneeded at m: %d", relayed, c.core.Counters().Relayed, h.core.Counters().Relayed, m.core.Counters().RelaysUnused)
	if relayed > 4 {
		t.Errorf("%d frames relayed for d's 2, want at most 4: once with the commit, once for m's Flush as it completes", relayed)
	}
}

// TestRelaysNotRepeatedAtOnce: of four members, a and b lose departing
// sender d's two frames and then the relays the coordinator c sends with
// its commit; they answered one Prepare together, so each asks again with
// its Flush a Retry later, a few microseconds apart. The first Flush has
// c relay both frames to all; the second, crossing that relay, has it
// relay nothing again — 4 frames in all, where each Flush cost 2 (6).
func TestRelaysNotRepeatedAtOnce(t *testing.T) {
	r, ps := group(t, 4, FIFO)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	c, a, b, d := ps[0], ps[1], ps[2], ps[3]
	for _, p := range []*process{a, b} {
		lost := 0 // relays lost: the two sent with the commit
		p.drop = func(f []byte) bool {
			if sentBy(f, frame.Data, d) {
				return true
			}
			v, err := frame.Parse(f[frame.EthernetHeaderLen:])
			if err == nil && v.Type() == frame.ViewRelay && lost < 2 {
				lost++
				return true
			}
			return false
		}
	}
	msgs := []msgID{d.send(t)}
	r.net.RunFor(2 * time.Millisecond)
	msgs = append(msgs, d.send(t))
	r.net.RunFor(20 * time.Millisecond)
	base := c.view
	d.dead = true
	d.ep.Crash()
	r.net.RunFor(3 * time.Second)
	if r.failed != nil {
		t.Fatal(r.failed)
	}
	for _, p := range []*process{c, a, b} {
		if p.view == base || p.err != nil {
			t.Fatalf("%x.%d: view %#x (base %#x), err %v", p.mac, p.inc, p.view, base, p.err)
		}
		for _, msg := range msgs {
			if !slices.ContainsFunc(p.views, func(v uint32) bool { return v == base && slices.Contains(p.inView[v], msg) }) {
				t.Fatalf("%x.%d did not deliver d's message %v in view %#x", p.mac, p.inc, msg, base)
			}
		}
	}
	st := c.core.Counters()
	t.Logf("frames relayed by c: %d, not relayed again so soon: %d", st.Relayed, st.RelaysSkipped)
	if st.Relayed != 4 || st.RelaysSkipped != 2 {
		t.Errorf("c relayed %d frames and skipped %d, want 4 and 2: with the commit, then once for the two Flushes that crossed", st.Relayed, st.RelaysSkipped)
	}
}
