package reliable

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// logBuffer holds a log the tests read while the event loop writes it.
type logBuffer struct{ syncbuf.Buffer }

// line returns the first line of the log that holds every one of parts,
// or "".
func (l *logBuffer) line(parts ...string) string {
next:
	for _, ln := range strings.Split(l.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(ln, p) {
				continue next
			}
		}
		return ln
	}
	return ""
}

// staticGroup is n links of r and their static member list (members 1 to
// n, in link order), for members that join one by one.
type staticGroup struct {
	t       *testing.T
	links   []*rtnet.Link
	members []frame.MemberInfo
	cfg     Config
}

func newStaticGroup(t *testing.T, r *rtnet.Net, n int, cfg Config) *staticGroup {
	s := &staticGroup{t: t, cfg: cfg}
	for range n {
		s.links = append(s.links, r.Attach(t, testnet.EndpointConfig{}))
	}
	s.members = staticMembers(s.links)
	return s
}

// join starts the member of link i with a logger of its own; the test's
// end stops it.
func (s *staticGroup) join(i int) (*Group, *logBuffer) {
	s.t.Helper()
	log := &logBuffer{}
	cfg := s.cfg
	cfg.Group, cfg.Members, cfg.Self = 44, s.members, frame.MemberID(i+1)
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	g, err := Join(context.Background(), s.links[i], cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		g.abort()
		<-g.Done()
	})
	return g, log
}

// fullMessage returns message idx of sender, n bytes, appended to b.
// Messages of MaxMessage bytes travel one per frame, so k of them are k
// frames of the window.
func fullMessage(b []byte, sender frame.MemberID, idx, n int) []byte {
	x := mix(uint64(sender)<<32 | uint64(idx))
	for i := range n {
		if i%8 == 0 {
			x = mix(x)
		}
		b = append(b, byte(x>>(8*(i%8))))
	}
	return b
}

// sendFull sends fullMessage(g.Self(), i, n) for i < k from g on a
// goroutine of its own; the channel gets the first error, or nil once all
// were accepted.
func sendFull(ctx context.Context, g *Group, k, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		var b []byte
		for i := range k {
			b = fullMessage(b[:0], g.Self(), i, n)
			if err := g.Send(ctx, b); err != nil {
				done <- fmt.Errorf("member %d: Send %d: %w", g.Self(), i, err)
				return
			}
		}
		done <- nil
	}()
	return done
}

// recvFull receives, on a goroutine of its own, k messages of n bytes
// from each member in from, and checks each byte for byte, in its
// sender's order from the first. The channel gets the first error, or nil.
func recvFull(ctx context.Context, g *Group, from []frame.MemberID, k, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		next := map[frame.MemberID]int{}
		for _, id := range from {
			next[id] = 0
		}
		var want, buf []byte
		for got := 0; got < k*len(from); got++ {
			id, data, err := g.RecvAppend(ctx, buf[:0])
			if err != nil {
				done <- fmt.Errorf("member %d: Recv after %d messages (%v so far): %w", g.Self(), got, next, err)
				return
			}
			buf = data
			i, ok := next[id]
			if !ok || i >= k {
				done <- fmt.Errorf("member %d: message from %d, which it expects %d of and had %d", g.Self(), id, k, i)
				return
			}
			if want = fullMessage(want[:0], id, i, n); !bytes.Equal(data, want) {
				done <- fmt.Errorf("member %d: message %d from %d differs (%d bytes, want %d)", g.Self(), i, id, len(data), len(want))
				return
			}
			next[id]++
		}
		done <- nil
	}()
	return done
}

// waitErr waits for a sendFull or recvFull channel, bounded by ctx.
func waitErr(ctx context.Context, t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("%s: not done before %v", what, ctx.Err())
	}
}

// nextEvent returns g's next event, waiting for it, bounded by ctx.
func nextEvent(ctx context.Context, t *testing.T, g *Group) Event {
	t.Helper()
	select {
	case ev, ok := <-g.Events():
		if !ok {
			t.Fatalf("member %d: Events closed: the group stopped (%v)", g.Self(), g.Err())
		}
		return ev
	case <-ctx.Done():
		t.Fatalf("member %d: no event before %v; members %+v", g.Self(), ctx.Err(), g.Members())
	}
	return Event{}
}

// waitFor polls cond until it holds, bounded by ctx.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not before %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func memberStats(st Stats, id frame.MemberID) (MemberStats, bool) {
	for _, m := range st.Members {
		if m.ID == id {
			return m, true
		}
	}
	return MemberStats{}, false
}

// A member of a FIFO (PBP2) group crashes: no Leave, it just stops sending
// and receiving. Each survivor removes it after FailureTimeout and says so
// everywhere DESIGN.md (decision 6) promises: a MemberFailed event naming
// it (or MemberStalled, see below), with everything it sent delivered; a
// log line naming it; Stats with it not live and counted in MembersFailed. The removal frees the window
// (it counts as having acknowledged everything): Sends that waited for it
// go on, and more than a window of messages reaches the other survivor.
func TestMemberFailureReported(t *testing.T) {
	const window = 16
	r := rtnet.New(t, 21)
	s := newStaticGroup(t, r, 3, Config{Window: window, FailureTimeout: 500 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	groups := make([]*Group, 3)
	logs := make([]*logBuffer, 3)
	for i := range groups {
		groups[i], logs[i] = s.join(i)
	}
	exchange(t, groups, 200)
	if t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Everything acknowledged everywhere before the crash: a survivor's
	// stall clock for the dead member (MemberStalled) then starts only
	// when it sends again, after its silence clock (MemberFailed).
	waitFor(ctx, t, "everything acknowledged", func() bool {
		for _, g := range groups {
			if g.Stats().Protocol.InFlight != 0 {
				return false
			}
		}
		return true
	})
	dead := groups[2]
	deadSent := fifo(dead.Stats()).DataFramesSent
	s.links[2].Crash()

	// Each survivor sends three windows of one-frame messages. At most
	// two windows are accepted (one in flight, one waiting) while the
	// dead member holds the window, so the last Sends return only once
	// it was removed.
	const k = 3 * window
	survivors := groups[:2]
	n := survivors[0].MaxMessage()
	var sent, recvd []<-chan error
	for i, g := range survivors {
		sent = append(sent, sendFull(ctx, g, k, n))
		recvd = append(recvd, recvFull(ctx, g, []frame.MemberID{survivors[1-i].Self()}, k, n))
	}
	for i, g := range survivors {
		waitErr(ctx, t, fmt.Sprintf("member %d sending", g.Self()), sent[i])
		if f := fifo(g.Stats()).MembersFailed; f != 1 {
			t.Errorf("member %d: all %d Sends returned with %d members failed: the window did not wait for the dead member", g.Self(), k, f)
		}
	}
	for i, g := range survivors {
		waitErr(ctx, t, fmt.Sprintf("member %d receiving", g.Self()), recvd[i])
	}

	for i, g := range survivors {
		ev := nextEvent(ctx, t, g)
		// Usually the silence clock runs out first (MemberFailed). But a
		// frame the dead member sent just before the crash can reach a
		// survivor, or be stepped by its loop, after that survivor's first
		// new Send started its acknowledgement clock for the dead member;
		// the no-acks clock then runs out first (MemberStalled,
		// StalledNoAcks), a moment earlier. Both remove a member that
		// stopped, and both must be reported the same way (a CI run
		// under load saw the second).
		want := Event{Kind: MemberFailed, Member: 3, At: ev.At, Delivered: uint32(deadSent)} // InitialSeq 0
		reason := "reason=failed"
		if ev.Kind == MemberStalled {
			want.Kind, want.Reason, reason = MemberStalled, StalledNoAcks, "reason=stalled"
		}
		if ev != want {
			t.Errorf("member %d: event %v, want %v", g.Self(), ev, want)
		}
		select {
		case ev := <-g.Events():
			t.Errorf("member %d: another event: %v", g.Self(), ev)
		default:
		}
		if ln := logs[i].line(`msg="rbcast: member removed"`, "member=3", reason); ln == "" {
			t.Errorf("member %d: no log line of member 3's removal; log:\n%s", g.Self(), logs[i])
		} else {
			t.Logf("member %d logged: %s", g.Self(), ln)
		}
		st := g.Stats()
		if m, ok := memberStats(st, 3); !ok || m.Live {
			t.Errorf("member %d: Stats.Members has member 3 %+v (listed %v), want it not live", g.Self(), m, ok)
		}
		if fifo(st).MembersFailed != 1 || len(st.Events) != 1 || st.Events[0] != ev {
			t.Errorf("member %d: Stats: %d members failed, events %v; want 1 and [%v]", g.Self(), fifo(st).MembersFailed, st.Events, ev)
		}
		for _, m := range g.Members() {
			if m.Live != (m.ID != 3) {
				t.Errorf("member %d: Members lists %+v", g.Self(), m)
			}
		}
	}
}

// With a static member list Join returns at once and waits for nobody. A
// member that starts late, but within FailureTimeout of the others, loses
// nothing: their windows wait for its acknowledgement (every member counts
// as having acknowledged nothing before InitialSeq), it hears their later
// frames, asks for what it missed with Nacks, and receives every message
// from the first, in order.
func TestStaticLateStartWithinFailureTimeout(t *testing.T) {
	const window, ft = 16, 5 * time.Second
	r := rtnet.New(t, 22)
	s := newStaticGroup(t, r, 3, Config{Window: window, FailureTimeout: ft})
	s.links[2].Crash() // not started yet: hears nothing
	started := time.Now()
	early := make([]*Group, 2)
	for i := range early {
		early[i], _ = s.join(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const k = 3 * window
	n := early[0].MaxMessage()
	all := []frame.MemberID{1, 2, 3}
	others := func(self frame.MemberID) []frame.MemberID {
		var ids []frame.MemberID
		for _, id := range all {
			if id != self {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var sent, recvd []<-chan error
	for _, g := range early {
		sent = append(sent, sendFull(ctx, g, k, n))
		recvd = append(recvd, recvFull(ctx, g, others(g.Self()), k, n))
	}
	// A window each went out while member 3 heard nothing, and it holds.
	waitFor(ctx, t, "full windows", func() bool {
		for _, g := range early {
			if g.Stats().Protocol.InFlight < window {
				return false
			}
		}
		return true
	})
	if d := time.Since(started); d > ft/2 {
		t.Fatalf("the windows took %v to fill: too close to FailureTimeout (%v) to start member 3 within it", d, ft)
	}
	s.links[2].Restart()
	late, _ := s.join(2)
	sent = append(sent, sendFull(ctx, late, k, n))
	recvd = append(recvd, recvFull(ctx, late, others(3), k, n))
	for i := range sent {
		waitErr(ctx, t, fmt.Sprintf("member %d sending", i+1), sent[i])
		waitErr(ctx, t, fmt.Sprintf("member %d receiving", i+1), recvd[i])
	}
	if st := late.Stats(); fifo(st).NacksSent == 0 {
		t.Errorf("member 3 sent no Nack: it missed nothing, and the test proved nothing: %+v", st.Protocol)
	}
	for _, g := range append(early, late) {
		if evs := g.Stats().Events; len(evs) != 0 {
			t.Errorf("member %d: events %v, want none", g.Self(), evs)
		}
	}
	for _, g := range append(early, late) {
		if err := g.Close(); err != nil {
			t.Errorf("member %d: Close: %v", g.Self(), err)
		}
	}
}

// A member that starts more than FailureTimeout after the others was
// removed by them (MemberFailed: never heard from); they no longer wait
// for it, and drop what it sends. It learns so from their first frame
// more than a window past its acknowledgement, which a member that counts
// it never sends: it removes each of them at once, as MemberStalled with
// Reason StalledRemovedUs, logged and counted, instead of asking them
// forever for what it missed (before, it Nacked them, unanswered, and
// reported nothing). It is alone from then on: its Send does not block.
func TestStaticLateStartAfterFailureTimeout(t *testing.T) {
	const window = 16
	r := rtnet.New(t, 23)
	s := newStaticGroup(t, r, 3, Config{Window: window, FailureTimeout: 300 * time.Millisecond, HeartbeatInterval: 30 * time.Millisecond})
	s.links[2].Crash() // not started yet: hears nothing
	early := make([]*Group, 2)
	for i := range early {
		early[i], _ = s.join(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Three windows each: the last window's Sends return once member 3
	// was removed, and every member's sequence numbers run past a window.
	const k = 3 * window
	n := early[0].MaxMessage()
	var sent, recvd []<-chan error
	for i, g := range early {
		sent = append(sent, sendFull(ctx, g, k, n))
		recvd = append(recvd, recvFull(ctx, g, []frame.MemberID{early[1-i].Self()}, k, n))
	}
	for i, g := range early {
		waitErr(ctx, t, fmt.Sprintf("member %d sending", g.Self()), sent[i])
		waitErr(ctx, t, fmt.Sprintf("member %d receiving", g.Self()), recvd[i])
		if ev := nextEvent(ctx, t, g); ev.Kind != MemberFailed || ev.Member != 3 {
			t.Fatalf("member %d: event %v, want member 3 failed", g.Self(), ev)
		}
	}

	s.links[2].Restart()
	late, log := s.join(2)
	seen := map[frame.MemberID]bool{}
	for range early {
		ev := nextEvent(ctx, t, late)
		if ev.Kind != MemberStalled || ev.Reason != StalledRemovedUs || ev.Member < 1 || ev.Member > 2 || seen[ev.Member] ||
			ev.Delivered != 0 || ev.Discarded != 0 {
			t.Errorf("member 3: event %v, want member 1 and member 2 stalled: %s", ev, StalledRemovedUs)
		}
		seen[ev.Member] = true
		if ln := log.line(`msg="rbcast: member removed"`, fmt.Sprintf("member=%d ", ev.Member), "reason=stalled", "it removed this member"); ln == "" {
			t.Errorf("member 3: no log line of member %d's removal; log:\n%s", ev.Member, log)
		} else {
			t.Logf("member 3 logged: %s", ln)
		}
	}
	st := late.Stats()
	if p := fifo(st); p.MembersFailed != 2 || p.Delivered != 0 || p.NacksSent != 0 || p.BeyondWindow != 2 {
		t.Errorf("member 3: %d members failed, %d delivered, %d Nacks sent, %d beyond the window; want 2, 0, 0, 2", p.MembersFailed, p.Delivered, p.NacksSent, p.BeyondWindow)
	}
	for _, m := range st.Members {
		if m.Live {
			t.Errorf("member 3: Stats.Members lists %+v live", m)
		}
	}
	// Alone: a Send never blocks, and the others drop what it sends.
	waitErr(ctx, t, "member 3 sending", sendFull(ctx, late, k, n))
	for _, g := range early {
		waitFor(ctx, t, fmt.Sprintf("member %d dropping member 3's frames", g.Self()), func() bool {
			return fifo(g.Stats()).FromRemoved > 0
		})
		if m, _ := memberStats(g.Stats(), 3); m.Delivered != 0 {
			t.Errorf("member %d: delivered %d messages from the removed member 3", g.Self(), m.Delivered)
		}
	}
}
