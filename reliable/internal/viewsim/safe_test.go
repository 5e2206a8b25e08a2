package viewsim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
)

// group founds a view of n processes at level on a lossless segment and
// returns them once every one installed it; the processes send nothing
// of their own (the tests propose).
func group(t *testing.T, n int, level Level) (*simRun, []*process) {
	t.Helper()
	return groupWith(t, n, level, nil)
}

// groupWith is group with the run changed by tweak (if not nil) before
// the processes start.
func groupWith(t *testing.T, n int, level Level, tweak func(*simRun)) (*simRun, []*process) {
	t.Helper()
	net, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, dgView: map[msgID]uint32{}, level: level}
	if tweak != nil {
		tweak(r)
	}
	var ps []*process
	for i := range n {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		p := r.newProcess(ep, uint32(i+1), n, 0)
		p.markerAt = r.start.Add(time.Hour) // no marker either
		ps = append(ps, p)
	}
	net.RunFor(500 * time.Millisecond)
	for _, p := range ps {
		if p.view == 0 || len(p.core.View().Members) != n {
			t.Fatalf("process %x.%d: view %d of %d members after 500 ms, want all %d in one", p.mac, p.inc, p.view, len(p.core.View().Members), n)
		}
	}
	return r, ps
}

// id is p's member id in its view.
func (p *process) id(t *testing.T) frame.MemberID {
	for _, m := range p.core.View().Members {
		if m.MAC == p.mac && m.Incarnation == p.inc {
			return m.ID
		}
	}
	t.Fatalf("process %x.%d is not in its view %v", p.mac, p.inc, p.core.View().Members)
	return frame.NoMember
}

// send proposes p's next message.
func (p *process) send(t *testing.T) msgID {
	t.Helper()
	id := msgID{p.mac, p.inc, p.sent}
	if err := p.st.Propose(p.clk.Core(p.run.net.Now()), encodeMsg(id, 20)); err != nil {
		t.Fatalf("process %x.%d: Propose: %v", p.mac, p.inc, err)
	}
	p.sent++
	return id
}

// sendLevel proposes p's next message at the Safe level (safe) or the
// Agreed, whatever the group's.
func (p *process) sendLevel(t *testing.T, safe bool) msgID {
	t.Helper()
	id := msgID{p.mac, p.inc, p.sent}
	if err := p.st.ProposeLevel(p.clk.Core(p.run.net.Now()), encodeMsg(id, 20), safe); err != nil {
		t.Fatalf("process %x.%d: Propose: %v", p.mac, p.inc, err)
	}
	p.sent++
	return id
}

func (p *process) delivered(id msgID) bool { return slices.Contains(p.inView[p.view], id) }

// TestSafeWaitsForEveryMember: a member that does not receive a sender's
// data frames (dropped at its reception, retransmissions too) holds up
// the Safe delivery of that sender's message at every member, the sender
// and the sequencer included, until it repairs; then every member
// delivers it, at the same place. Safe reads "every member holds it"
// from the acknowledgement vectors on PBP's frames, with no message of
// its own. Under Agreed (the control) the others deliver it at once.
func TestSafeWaitsForEveryMember(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			_, ps := group(t, 3, level)
			// ps sorted by id: the sequencer is the lowest.
			slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
			seqr, sender, deaf := ps[0], ps[1], ps[2]
			from := sender.id(t)
			deaf.drop = func(f []byte) bool {
				v, err := frame.Parse(f[frame.EthernetHeaderLen:])
				return err == nil && v.Type() == frame.Data && v.Sender() == from
			}
			m := sender.send(t)
			net := sender.run.net
			net.RunFor(150 * time.Millisecond) // well inside the failure timeout (400 ms)
			if deaf.delivered(m) {
				t.Fatalf("%v: the member that drops the sender's frames delivered its message", level)
			}
			for _, p := range []*process{seqr, sender} {
				if got, want := p.delivered(m), level == Agreed; got != want {
					t.Fatalf("%v: member %d delivered the message while member %d lacks it: %v, want %v", level, p.id(t), deaf.id(t), got, want)
				}
			}
			deaf.drop = nil
			net.RunFor(150 * time.Millisecond)
			for _, p := range ps {
				if got := p.inView[p.view]; !slices.Equal(got, []msgID{m}) {
					t.Fatalf("%v: member %d delivered %v after the repair, want [%v]", level, p.id(t), idStrings(got), idStrings([]msgID{m}))
				}
			}
		})
	}
}

// TestLevelPerMessage: with a member that does not receive a sender's
// data frames, a Safe message in an Agreed group waits at every member
// until that member repairs, and so does the Agreed message the sender
// sent after it; an Agreed message in a Safe group is delivered at once
// by the members that hold it (the sequencer, the sender), as in an
// Agreed group. After the repair every member delivers both, in order.
func TestLevelPerMessage(t *testing.T) {
	for _, tc := range []struct {
		group Level
		first bool // the first message Safe (the second is Agreed)
		wait  bool // the sequencer and the sender hold both back
	}{
		{Agreed, true, true},
		{Safe, false, false},
		{Safe, true, true},
		{Agreed, false, false},
	} {
		t.Run(fmt.Sprintf("%v/safe-first=%v", tc.group, tc.first), func(t *testing.T) {
			_, ps := group(t, 3, tc.group)
			slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
			seqr, sender, deaf := ps[0], ps[1], ps[2]
			from := sender.id(t)
			deaf.drop = func(f []byte) bool {
				v, err := frame.Parse(f[frame.EthernetHeaderLen:])
				return err == nil && v.Type() == frame.Data && v.Sender() == from
			}
			m1 := sender.sendLevel(t, tc.first)
			m2 := sender.sendLevel(t, false)
			net := sender.run.net
			net.RunFor(150 * time.Millisecond)
			for _, p := range []*process{seqr, sender} {
				if got, want := len(p.inView[p.view]) > 0, !tc.wait; got != want {
					t.Fatalf("member %d delivered %v while member %d lacks them; want some: %v", p.id(t), idStrings(p.inView[p.view]), deaf.id(t), want)
				}
			}
			deaf.drop = nil
			net.RunFor(150 * time.Millisecond)
			for _, p := range ps {
				if got := p.inView[p.view]; !slices.Equal(got, []msgID{m1, m2}) {
					t.Fatalf("member %d delivered %v after the repair, want %v", p.id(t), idStrings(got), idStrings([]msgID{m1, m2}))
				}
			}
		})
	}
}

// TestSafeSendsNoHeldReports: Safe's FIFO traffic is the data messages
// and the sequencer's order messages only, as Agreed's (vtotal kinds 1
// or 4, Safe's since revision 4, and 2; the held reports of kind 3, one
// per member and turn, are gone),
// and every member delivers every message in one order.
func TestSafeSendsNoHeldReports(t *testing.T) {
	for _, level := range []Level{Agreed, Safe} {
		t.Run(level.String(), func(t *testing.T) {
			r, ps := group(t, 3, level)
			for _, p := range ps {
				p.kinds = map[byte]int{}
			}
			const rounds = 40
			var want []msgID
			for range rounds {
				for _, p := range ps {
					want = append(want, p.send(t))
				}
				r.net.RunFor(2 * time.Millisecond)
			}
			r.net.RunFor(300 * time.Millisecond)
			kinds := map[byte]int{}
			for _, p := range ps {
				for k, n := range p.kinds {
					kinds[k] += n
				}
			}
			data, order := kinds[1]+kinds[4], kinds[2]
			t.Logf("%v: %d data messages, %d order messages, %v by kind: %.2f FIFO messages per data message", level, data, order, kinds, float64(data+order)/float64(data))
			if data != len(want) || kinds[3] != 0 || len(kinds) > 2 || order == 0 {
				t.Fatalf("%v: FIFO messages by kind %v, want %d data messages (kind 1, or 4 under Safe) and order messages (kind 2) only", level, kinds, len(want))
			}
			if most := 2 * rounds; order > most {
				t.Fatalf("%v: %d order messages for %d data messages of the others, want at most one per data message", level, order, most)
			}
			first := ps[0].inView[ps[0].view]
			if len(first) != len(want) {
				t.Fatalf("%v: member %d delivered %d messages, want %d", level, ps[0].id(t), len(first), len(want))
			}
			for _, p := range ps[1:] {
				if got := p.inView[p.view]; !slices.Equal(got, first) {
					t.Fatalf("%v: members deliver different sequences: first difference %s", level, firstDiff(idStrings(first), idStrings(got)))
				}
			}
		})
	}
}

// TestSafeLatency: on an idle group a Safe message of the sequencer is
// delivered everywhere within a round trip of its Agreed delivery: the
// members acknowledge at once what the sender asks for (pbp.Config.PromptAcks), not
// after PBP's 1 ms ack timer.
func TestSafeLatency(t *testing.T) {
	took := map[Level]time.Duration{}
	for _, level := range []Level{Agreed, Safe} {
		r, ps := group(t, 4, level)
		slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
		r.net.RunFor(50 * time.Millisecond)
		m := ps[0].send(t)
		start := r.net.Now()
		ps[0].Step(start) // out now, not at its next timer
		for took[level] == 0 && r.net.Now().Sub(start) < 5*time.Millisecond {
			r.net.RunFor(10 * time.Microsecond)
			all := true
			for _, p := range ps {
				all = all && p.delivered(m)
			}
			if all {
				took[level] = r.net.Now().Sub(start)
			}
		}
		if took[level] == 0 {
			t.Fatalf("%v: not delivered everywhere within 5 ms", level)
		}
	}
	t.Logf("delivered everywhere after: agreed %v, safe %v", took[Agreed], took[Safe])
	if took[Safe] > took[Agreed]+200*time.Microsecond {
		t.Fatalf("safe took %v, agreed %v: more than a round trip more (the ack timer?)", took[Safe], took[Agreed])
	}
}

// TestSafeStreamAcks: a Safe stream costs the members a few Acks, not
// one each per Data frame. Every member waits for every other's acks, so
// the members acknowledge at once, but only what the sender asks for
// (pbp.Config.PromptAcks): a lone frame, every few frames of a stream,
// and, once it stops, its last frames (a probe). Each Ack goes to every
// member: acknowledging every frame at once cost a stream of one sender
// to three receivers three Acks per Data frame, each taken by the other
// three members. The last message of the stream is still delivered
// everywhere within a few round trips of going out.
func TestSafeStreamAcks(t *testing.T) {
	r, ps := group(t, 4, Safe)
	slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
	r.net.RunFor(50 * time.Millisecond)
	var data, acks int
	traceSent(r, func(v frame.View) {
		switch v.Type() {
		case frame.Data:
			data++
		case frame.Ack:
			acks++
		}
	})
	snd := ps[0]
	var last msgID
	for range 100 { // 400 messages, 4 every 10 µs: about the wire's pace
		for range 4 {
			last = snd.send(t)
		}
		snd.Step(r.net.Now())
		r.net.RunFor(10 * time.Microsecond)
	}
	sentAt := r.net.Now()
	var took time.Duration
	for took == 0 && r.net.Now().Sub(sentAt) < 5*time.Millisecond {
		r.net.RunFor(10 * time.Microsecond)
		all := true
		for _, p := range ps {
			all = all && p.delivered(last)
		}
		if all {
			took = r.net.Now().Sub(sentAt)
		}
	}
	r.net.RunFor(100 * time.Millisecond)
	for _, p := range ps {
		if n := len(p.inView[p.view]); n != 400 {
			t.Fatalf("member %d delivered %d messages, want 400", p.id(t), n)
		}
	}
	t.Logf("%d Data frames, %d Acks (%.2f per Data frame); the last message everywhere %v after the stream's end", data, acks, float64(acks)/float64(data), took)
	// The window is 16 here: the sender asks on every 8th frame (half the
	// window), three Acks each (acknowledging every frame: 3 per Data
	// frame; every 4th, 0.79).
	if acks > data {
		t.Errorf("%d Acks for %d Data frames: the members acknowledge more than what the sender asks for", acks, data)
	}
	if took == 0 || took > 500*time.Microsecond {
		t.Errorf("the last message of the stream was delivered everywhere after %v, want within 500 µs (a probe and a round trip)", took)
	}
}

// everywhere runs the segment in steps of 10 µs until every process
// delivered m, for at most 5 ms, and returns how long after start that
// was (0: not within 5 ms).
func everywhere(r *simRun, ps []*process, m msgID, start time.Time) time.Duration {
	for r.net.Now().Sub(start) < 5*time.Millisecond {
		r.net.RunFor(10 * time.Microsecond)
		all := true
		for _, p := range ps {
			all = all && p.delivered(m)
		}
		if all {
			return r.net.Now().Sub(start)
		}
	}
	return 0
}

// TestSafeInAgreedLatency: in an idle Agreed group a lone Safe message,
// the sequencer's or another member's, is delivered everywhere within a
// round trip of an Agreed message's delivery (the segment's one-way
// latency is 50 µs), as in a Safe group: its frame, and the sequencer's
// order message that places it, ask the members to acknowledge at once
// (pbp.Core.ProposePrompt), and an Agreed group's members answer at once
// (pbp.Config.AnswerAckRequests), not after PBP's 1 ms ack timer.
func TestSafeInAgreedLatency(t *testing.T) {
	for _, who := range []string{"sequencer", "member"} {
		t.Run(who, func(t *testing.T) {
			took := map[string]time.Duration{}
			for _, run := range []struct {
				name  string
				group Level
				safe  bool
			}{{"agreed", Agreed, false}, {"safe-in-agreed", Agreed, true}, {"safe-group", Safe, true}} {
				r, ps := group(t, 4, run.group)
				slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
				snd := ps[0]
				if who == "member" {
					snd = ps[2]
				}
				r.net.RunFor(50 * time.Millisecond)
				m := snd.sendLevel(t, run.safe)
				start := r.net.Now()
				snd.Step(start) // out now, not at its next timer
				if took[run.name] = everywhere(r, ps, m, start); took[run.name] == 0 {
					t.Fatalf("%s: not delivered everywhere within 5 ms", run.name)
				}
			}
			t.Logf("delivered everywhere after: agreed %v, safe in an agreed group %v, safe in a safe group %v",
				took["agreed"], took["safe-in-agreed"], took["safe-group"])
			if got := took["safe-in-agreed"]; got > took["agreed"]+200*time.Microsecond {
				t.Fatalf("a Safe message in an Agreed group took %v, an Agreed one %v: more than a round trip more (the ack timer?)", got, took["agreed"])
			}
		})
	}
}

// TestAgreedStreamAcks: an Agreed group's members answer at once the
// frames that ask (pbp.Config.AnswerAckRequests), for the Safe messages
// among its own; a stream of Agreed messages asks for nothing, so it
// costs the same frames, Acks included, as with the answering off (as
// before Safe messages in an Agreed group asked). Turning PBP's
// PromptAcks on in every ordered group instead would have the sender ask
// on its lone and every half window's frames, and the members answer
// each. Lossless, and with 5 % loss at every member, where PBP2's resend
// probes ask too.
func TestAgreedStreamAcks(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			type count struct{ data, acks, asking, delivered int }
			got := map[bool]count{}
			for _, off := range []bool{true, false} {
				r, ps := groupWith(t, 4, Agreed, func(r *simRun) { r.noPromptAnswer = off })
				slices.SortFunc(ps, func(a, b *process) int { return int(a.id(t)) - int(b.id(t)) })
				r.net.RunFor(50 * time.Millisecond)
				for _, p := range ps {
					if err := p.ep.SetImpairment(testnet.In, testnet.Impairment{Loss: loss}); err != nil {
						t.Fatal(err)
					}
				}
				var c count
				traceSent(r, func(v frame.View) {
					if v.Flags()&frame.FlagAckRequest != 0 {
						c.asking++
					}
					switch v.Type() {
					case frame.Data:
						c.data++
					case frame.Ack:
						c.acks++
					}
				})
				snd := ps[1]         // not the sequencer: its messages need order messages
				for snd.sent < 400 { // 4 every 10 µs, while the window has room
					for i := 0; i < 4 && snd.sent < 400 && !snd.st.Blocked(); i++ {
						snd.sendLevel(t, false)
					}
					snd.Step(r.net.Now())
					r.net.RunFor(10 * time.Microsecond)
				}
				r.net.RunFor(200 * time.Millisecond)
				for _, p := range ps {
					c.delivered += len(p.inView[p.view])
				}
				got[off] = c
				t.Logf("answering %s: %d Data frames, %d Acks (%.3f per Data frame), %d frames asking, %d deliveries",
					map[bool]string{true: "off", false: "on"}[off], c.data, c.acks, float64(c.acks)/float64(c.data), c.asking, c.delivered)
			}
			before, after := got[true], got[false]
			if after.delivered != 4*400 || before.delivered != 4*400 {
				t.Fatalf("deliveries %d with the answering off, %d on; want %d", before.delivered, after.delivered, 4*400)
			}
			if loss == 0 && (after != before || after.asking != 0) {
				t.Fatalf("an Agreed stream sent %+v with the members answering frames that ask, %+v without: want the same, none asking", after, before)
			}
			if after.acks > before.acks+before.acks/20 {
				t.Fatalf("an Agreed stream under %v loss cost %d Acks with the members answering frames that ask, %d without", loss, after.acks, before.acks)
			}
		})
	}
}

// traceSent calls sent with every rbcast frame a member of r sends.
func traceSent(r *simRun, sent func(v frame.View)) {
	r.net.Trace(func(ev testnet.Event) {
		if ev.Kind != testnet.EventSend {
			return
		}
		if v, err := frame.Parse(ev.Frame[frame.EthernetHeaderLen:]); err == nil {
			sent(v)
		}
	})
}
