package reliable

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// loopMember is one process of the Loop tests: a mux over its link, a
// Loop reading the mux, and its groups on the Loop, each delivering into
// got[group][sender].
type loopMember struct {
	m      *mux.Mux
	lp     *Loop
	groups map[uint32]*Group

	mu  sync.Mutex
	got map[uint32]map[frame.MemberID][][]byte
	// onDeliver, if set, runs on the Loop for every delivery.
	onDeliver func(group uint32, from frame.MemberID, data []byte)
}

// loopMembers joins groups ids on a Loop at each of links (static
// members 1..n).
func loopMembers(t *testing.T, links []link.Link, members []frame.MemberInfo, ids []uint32) []*loopMember {
	t.Helper()
	ms := make([]*loopMember, len(links))
	for i, l := range links {
		m, err := mux.New(l, mux.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var w Waker
		if m.CanWake() {
			w = m
		}
		lm := &loopMember{m: m, lp: NewLoop(LoopSourceFunc(m.RecvAll), w), groups: map[uint32]*Group{},
			got: map[uint32]map[frame.MemberID][][]byte{}}
		ms[i] = lm
		for _, id := range ids {
			v, err := m.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			lm.got[id] = map[frame.MemberID][][]byte{}
			cfg := Config{Group: id, Members: members, Self: frame.MemberID(i + 1), Logger: quiet,
				Deliver: func(from frame.MemberID, data []byte) {
					if lm.onDeliver != nil {
						lm.onDeliver(id, from, data)
					}
					lm.mu.Lock()
					lm.got[id][from] = append(lm.got[id][from], bytes.Clone(data))
					lm.mu.Unlock()
				}}
			g, err := JoinLoop(context.Background(), lm.lp, v, cfg)
			if err != nil {
				t.Fatal(err)
			}
			lm.groups[id] = g
		}
	}
	t.Cleanup(func() {
		for _, lm := range ms {
			for _, g := range lm.groups {
				g.abort()
				<-g.Done()
			}
			lm.lp.Close()
			lm.m.Close()
		}
	})
	return ms
}

// received is how many messages lm has from every sender of group id.
func (lm *loopMember) received(id uint32) int {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	n := 0
	for _, ms := range lm.got[id] {
		n += len(ms)
	}
	return n
}

// Three members, two groups each on one Loop over a lossy, reordering
// segment: every member receives every other's messages of each group,
// in its order, byte-exact, only on that group; the mux counts each
// group's frames; Close of every group, then of the Loop, ends the
// Loop's goroutine.
func TestLoopHostsGroups(t *testing.T) {
	r := rtnet.New(t, 21)
	var links []link.Link
	var rl []*rtnet.Link
	for range 3 {
		l := r.Attach(t, testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.05, Reorder: 0.05, ReorderDelay: 200 * time.Microsecond}})
		links, rl = append(links, l), append(rl, l)
	}
	members := staticMembers(rl)
	ids := []uint32{7, 8}
	ms := loopMembers(t, links, members, ids)
	const k = 300
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for _, lm := range ms {
		for _, id := range ids {
			g := lm.groups[id]
			wg.Add(1)
			go func() {
				defer wg.Done()
				var b []byte
				for i := range k {
					b = message(b[:0], g.Self()+frame.MemberID(id)*16, i, g.MaxMessage())
					if err := g.Send(ctx, b); err != nil {
						errs <- fmt.Errorf("member %d group %d: Send %d: %w", g.Self(), id, i, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, lm := range ms {
		for _, id := range ids {
			for lm.received(id) < 2*k {
				if ctx.Err() != nil {
					t.Fatalf("group %d at member %d: %d of %d messages", id, lm.groups[id].Self(), lm.received(id), 2*k)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	for _, lm := range ms {
		for _, id := range ids {
			for from, msgs := range lm.got[id] {
				for i, got := range msgs {
					if want := message(nil, from+frame.MemberID(id)*16, i, lm.groups[id].MaxMessage()); !bytes.Equal(got, want) {
						t.Fatalf("member %d group %d: message %d from %d: %d bytes, want %d (wrong content or order)", lm.groups[id].Self(), id, i, from, len(got), len(want))
					}
				}
			}
		}
		st := lm.m.Stats()
		for _, id := range ids {
			if st.Groups[id].FramesReceived == 0 {
				t.Errorf("member %d: mux counted no frame of group %d", lm.groups[id].Self(), id)
			}
		}
	}
	for _, lm := range ms {
		for _, id := range ids {
			if err := lm.groups[id].Close(); err != nil {
				t.Errorf("group %d: Close: %v", id, err)
			}
		}
		lm.lp.Close()
		select {
		case <-lm.lp.done:
		default:
			t.Error("the Loop's goroutine still runs after Close")
		}
		if err := lm.lp.Err(); err != nil {
			t.Errorf("Loop.Err after Close = %v, want nil", err)
		}
	}
}

// JoinLoop refuses what a Loop cannot host, naming the group and why.
func TestJoinLoopRefuses(t *testing.T) {
	r := rtnet.New(t, 22)
	l := r.Attach(t, testnet.EndpointConfig{})
	members := staticMembers([]*rtnet.Link{l})
	lp := NewLoop(LoopSourceFunc(l.Recv), l)
	defer lp.Close()
	_, err := JoinLoop(context.Background(), lp, l, Config{Group: 5, Members: members, Self: 1, Logger: quiet})
	if err == nil || err.Error() != "reliable: a group a Loop cannot host: group 5 has no Config.Deliver" {
		t.Fatalf("JoinLoop without Deliver: %v", err)
	}
}

// kickCounter is a link that stages (link.Stager): Stage keeps copies,
// Kick sends them in one Send and records, per Kick, the group ids of
// the Data frames it sent.
type kickCounter struct {
	link.Link
	mu      sync.Mutex
	pending [][]byte
	kicks   [][]uint32 // per Kick, the groups of the Data frames it sent
}

func (s *kickCounter) Stage(frames [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		s.pending = append(s.pending, bytes.Clone(f))
	}
	return len(frames), nil
}

func (s *kickCounter) Kick() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	var data []uint32
	for _, f := range s.pending {
		if _, body, err := frame.SplitEthernet(f, frame.EtherType); err == nil && frame.View(body).Type() == frame.Data {
			g, _ := link.FrameGroup(f)
			data = append(data, g)
		}
	}
	s.kicks = append(s.kicks, data)
	_, err := s.Link.Send(s.pending)
	s.pending = s.pending[:0]
	return err
}

func (s *kickCounter) Wake() { s.Link.(link.Waker).Wake() }

// What a Loop's round staged for several groups goes out in one Kick:
// member 1's Loop is held in a delivery of group 7 while its groups 8
// and 9 each Send; once let go, the round takes both groups' turns and
// their two Data frames leave in the same Kick (a Group's own loop
// kicks per group).
func TestLoopOneKickPerRound(t *testing.T) {
	ms, st, ctx, release := heldLoop(t, 23)
	for _, id := range []uint32{8, 9} {
		if err := ms[0].groups[id].Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for ms[1].received(8) < 1 || ms[1].received(9) < 1 {
		if ctx.Err() != nil {
			t.Fatal("member 2 did not receive groups 8 and 9's messages")
		}
		time.Sleep(time.Millisecond)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, k := range st.kicks {
		if slices.Contains(k, 8) && slices.Contains(k, 9) {
			return
		}
	}
	t.Fatalf("groups 8 and 9's Data frames went out in different Kicks: Data frames per Kick by group %v", st.kicks)
}

// heldLoop starts two members hosting groups 7, 8 and 9 on Loops (member
// 1's link counting its Kicks) and holds member 1's Loop inside the
// delivery of a message of group 7 until release is closed.
func heldLoop(t *testing.T, seed uint64) (ms []*loopMember, st *kickCounter, ctx context.Context, release chan struct{}) {
	t.Helper()
	r := rtnet.New(t, seed)
	l1, l2 := r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})
	members := staticMembers([]*rtnet.Link{l1, l2})
	st = &kickCounter{Link: l1}
	ms = loopMembers(t, []link.Link{st, l2}, members, []uint32{7, 8, 9})
	entered := make(chan struct{})
	release = make(chan struct{})
	var once sync.Once
	ms[0].onDeliver = func(group uint32, from frame.MemberID, data []byte) {
		if group == 7 && string(data) == "hold" {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	// Every group of member 1 has had its first turn before its Loop is
	// held: SendNow sends only for groups that have (their cores' clocks
	// run). A "hold" delivered in the Loop's first pass, before groups 8
	// and 9 had theirs, left SendNow nothing to send (about one run in
	// 300 failed so).
	for _, id := range []uint32{7, 8, 9} {
		g := ms[0].groups[id]
		for {
			g.mu.Lock()
			turned := g.turned
			g.mu.Unlock()
			if turned {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("member 1's group %d never had its first turn", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := ms[1].groups[7].Send(ctx, []byte("hold")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("member 1 never delivered group 7's message")
	}
	return ms, st, ctx, release
}

// gateWaker counts Wakes and holds them back until open.
type gateWaker struct {
	mu    sync.Mutex
	w     Waker
	n     int
	shut  bool
	owing int
}

func (g *gateWaker) Wake() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	if g.shut {
		g.owing++
		return
	}
	g.w.Wake()
}

func (g *gateWaker) set(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
	if !shut && g.owing > 0 {
		g.owing = 0
		g.w.Wake()
	}
}

// Two hosted groups that post while the Loop waits wake its source
// once (the barrier's two Sends in dsm's channel mode): the first wake
// ends the wait, the second finds it ended.
//
// The Sends come once the Loop waits in its source's Recv, towards a
// heartbeat 5 s away: a fixed 50 ms sleep found the Loop still in its
// first turns on a loaded machine now and then, where a post wakes
// nobody (the next plan sees it), and the test counted 0 wakes.
func TestLoopWakesOnce(t *testing.T) {
	defer func(d time.Duration) { quietMaxWait = d }(quietMaxWait)
	quietMaxWait = 10 * time.Second
	r := rtnet.New(t, 24)
	l := r.Attach(t, testnet.EndpointConfig{})
	members := staticMembers([]*rtnet.Link{l})
	gate := &gateWaker{w: l}
	var inRecv atomic.Int32 // how many of the source's Recvs have begun and not returned
	lp := NewLoop(LoopSourceFunc(func(deadline time.Time, fs []link.Frame) (int, error) {
		inRecv.Add(1)
		defer inRecv.Add(-1)
		return l.Recv(deadline, fs)
	}), gate)
	var gs []*Group
	for _, id := range []uint32{7, 8} {
		g, err := JoinLoop(context.Background(), lp, l, Config{Group: id, Members: members, Self: 1, Logger: quiet,
			HeartbeatInterval: 5 * time.Second, FailureTimeout: 11 * time.Second,
			Deliver: func(frame.MemberID, []byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	defer func() {
		gate.set(false)
		for _, g := range gs {
			g.abort()
			<-g.Done()
		}
		lp.Close()
	}()
	// The Loop's first turns are taken and it waits in Recv: its plan,
	// which would see a post as due, is behind it.
	for deadline := time.Now().Add(10 * time.Second); inRecv.Load() == 0 || !lp.waiting.Load(); time.Sleep(time.Millisecond) { // polls; asserts nothing by time
		if time.Now().After(deadline) {
			t.Fatal("the Loop did not wait in its source's Recv within 10 s")
		}
	}
	gate.set(true)
	gate.mu.Lock()
	before := gate.n
	gate.mu.Unlock()
	for _, g := range gs {
		if err := g.Send(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	gate.mu.Lock()
	n := gate.n - before
	gate.mu.Unlock()
	if n != 1 {
		t.Fatalf("two Sends on two hosted groups woke the Loop's source %d times, want 1", n)
	}
}

// SendNow sends what the hosted groups' Sends proposed on the calling
// goroutine, in one Kick for all of them, while the Loop's goroutine is
// busy (dsm's barrier at one P: the program crosses at once and would
// compute before the Loop ran): member 1's Loop is held in a delivery of
// group 7 while its groups 8 and 9 each Send; SendNow kicks both Data
// frames at once, and member 2 delivers both before member 1's Loop is
// let go. Group 7's delivery, held on the Loop, is not carried out off
// it.
func TestLoopSendNow(t *testing.T) {
	ms, st, ctx, release := heldLoop(t, 25)
	defer close(release)
	st.mu.Lock()
	before := len(st.kicks)
	st.mu.Unlock()
	for _, id := range []uint32{8, 9} {
		if err := ms[0].groups[id].Send(ctx, []byte(fmt.Sprint("to ", id))); err != nil {
			t.Fatal(err)
		}
	}
	ms[0].lp.SendNow()
	st.mu.Lock()
	kicks := slices.Clone(st.kicks[before:])
	st.mu.Unlock()
	if len(kicks) != 1 || !slices.Equal(kicks[0], []uint32{8, 9}) {
		t.Fatalf("SendNow with the Loop busy: Data frames per Kick by group %v, want one Kick of groups 8 and 9", kicks)
	}
	for ms[1].received(8) < 1 || ms[1].received(9) < 1 {
		if ctx.Err() != nil {
			t.Fatal("member 2 did not receive groups 8 and 9's messages while member 1's Loop was held")
		}
		time.Sleep(time.Millisecond)
	}
	ms[1].mu.Lock()
	got8, got9 := ms[1].got[8][1], ms[1].got[9][1]
	ms[1].mu.Unlock()
	if len(got8) != 1 || string(got8[0]) != "to 8" || len(got9) != 1 || string(got9[0]) != "to 9" {
		t.Fatalf("member 2 got %q on group 8 and %q on group 9, want [\"to 8\"] and [\"to 9\"]", got8, got9)
	}
}

// SendBatch's Sends leave the Loop asleep where its SendNow sends their
// frames (dsm's barrier flush on channels): member 1's Loop waits, its
// groups 7 and 8 each Send inside a batch, and the batch kicks both Data
// frames at once; member 2 delivers both. With a MaxWait of a second the
// resend timer the frames start falls within MaxWait of the Loop's wait,
// and the batch does not wake the Loop's source; with the default (1 ms)
// on a quiet link (a wait of a second) it wakes it once, as a Send
// outside a batch does.
func TestLoopSendBatchWakesNot(t *testing.T) {
	for _, c := range []struct {
		maxWait time.Duration
		wakes   int
	}{{time.Second, 0}, {0, 1}} {
		if got := sendBatchWakes(t, c.maxWait); got != c.wakes {
			t.Errorf("MaxWait %v: a SendBatch of two Sends with the Loop waiting woke its source %d times, want %d", c.maxWait, got, c.wakes)
		}
	}
}

// sendBatchWakes is TestLoopSendBatchWakesNot's run at member 1's
// Config.MaxWait maxWait: the Wakes of the Loop's source the batch made.
func sendBatchWakes(t *testing.T, maxWait time.Duration) int {
	r := rtnet.New(t, 26)
	l1, l2 := r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})
	members := staticMembers([]*rtnet.Link{l1, l2})
	st := &kickCounter{Link: l1}
	gate := &gateWaker{w: l1}
	lp := NewLoop(LoopSourceFunc(l1.Recv), gate)
	ids := []uint32{7, 8}
	var gs []*Group
	for _, id := range ids {
		g, err := JoinLoop(context.Background(), lp, st, Config{Group: id, Members: members, Self: 1, Logger: quiet,
			MaxWait: maxWait, Deliver: func(frame.MemberID, []byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	var peers []*Group
	for _, id := range ids {
		g, err := Join(context.Background(), l2, Config{Group: id, Members: members, Self: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, g)
	}
	defer func() {
		gate.set(false)
		for _, g := range append(gs, peers...) {
			g.abort()
			<-g.Done()
		}
		lp.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The Loop has taken every group's first turn and waits on the link.
	for _, g := range gs {
		for {
			g.mu.Lock()
			waits := g.turned && !g.sleepUntil.IsZero()
			g.mu.Unlock()
			if waits {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("member 1's Loop never waited after its groups' first turns")
			}
			time.Sleep(time.Millisecond)
		}
	}
	gate.set(true)
	gate.mu.Lock()
	wakes := gate.n
	gate.mu.Unlock()
	st.mu.Lock()
	kicks := len(st.kicks)
	st.mu.Unlock()
	lp.SendBatch(func() {
		for _, g := range gs {
			if err := g.Send(ctx, []byte(fmt.Sprint("to ", g.cfg.Group))); err != nil {
				t.Error(err)
			}
		}
	})
	gate.mu.Lock()
	wakes = gate.n - wakes
	gate.mu.Unlock()
	st.mu.Lock()
	sent := slices.Clone(st.kicks[kicks:])
	st.mu.Unlock()
	if len(sent) != 1 || !slices.Equal(sent[0], ids) {
		t.Fatalf("SendBatch with the Loop waiting: Data frames per Kick by group %v, want one Kick of groups 7 and 8", sent)
	}
	for i, g := range peers {
		m, err := g.Recv(ctx)
		if err != nil {
			t.Fatalf("member 2, group %d: %v", ids[i], err)
		}
		if want := fmt.Sprint("to ", ids[i]); string(m.Data) != want {
			t.Fatalf("member 2, group %d: got %q, want %q", ids[i], m.Data, want)
		}
	}
	return wakes
}
