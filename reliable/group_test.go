package reliable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// mix is SplitMix64's finalizer: message sizes and bytes are a function of
// (seed, sender, index), so receivers regenerate and compare them.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// message returns message idx of sender, appended to b: mostly small
// (bundled), some up to maxLen.
func message(b []byte, sender frame.MemberID, idx, maxLen int) []byte {
	h := mix(uint64(sender)<<32 | uint64(idx))
	n := int(h>>8) % 200
	if h%4 == 0 {
		n = int(h>>8) % (maxLen + 1)
	}
	x := h
	for i := range n {
		if i%8 == 0 {
			x = mix(x)
		}
		b = append(b, byte(x>>(8*(i%8))))
	}
	return b
}

// staticMembers lists links as members 1..n, incarnation 7.
func staticMembers(links []*rtnet.Link) []frame.MemberInfo {
	var ms []frame.MemberInfo
	for i, l := range links {
		ms = append(ms, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(l.HardwareAddr()), Incarnation: 7})
	}
	return ms
}

// newGroups attaches n endpoints with the given impairment and joins a
// group on each with static members.
func newGroups(t *testing.T, r *rtnet.Net, n int, ep testnet.EndpointConfig, base Config) []*Group {
	t.Helper()
	links := make([]*rtnet.Link, n)
	for i := range links {
		links[i] = r.Attach(t, ep)
	}
	members := staticMembers(links)
	groups := make([]*Group, n)
	for i := range groups {
		cfg := base
		cfg.Group, cfg.Members, cfg.Self = 42, members, frame.MemberID(i+1)
		if cfg.Logger == nil {
			cfg.Logger = quiet
		}
		g, err := Join(context.Background(), links[i], cfg)
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = g
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	})
	return groups
}

// exchange has every member send k messages while receiving everyone
// else's, and checks content and per-sender order.
func exchange(t *testing.T, groups []*Group, k int) {
	t.Helper()
	for _, g := range groups {
		if g.Stats().View == nil {
			if v, ok := g.View(); ok {
				t.Fatalf("member %d: a group without views has View() = %+v", g.Self(), v)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(groups))
	for _, g := range groups {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var b []byte
			for i := range k {
				b = message(b[:0], g.Self(), i, g.MaxMessage())
				if err := g.Send(ctx, b); err != nil {
					errs <- fmt.Errorf("member %d: Send %d: %w", g.Self(), i, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			next := map[frame.MemberID]int{}
			var want, buf []byte
			for got := 0; got < k*(len(groups)-1); got++ {
				from, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					errs <- fmt.Errorf("member %d: Recv after %d messages: %w", g.Self(), got, err)
					return
				}
				buf = data
				want = message(want[:0], from, next[from], g.MaxMessage())
				if !bytes.Equal(data, want) {
					errs <- fmt.Errorf("member %d: message %d from %d: got %d bytes, want %d", g.Self(), next[from], from, len(data), len(want))
					return
				}
				next[from]++
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		t.Error(err)
		failed = true
	}
	if failed { // say where each member's protocol stood
		for _, g := range groups {
			st := g.Stats()
			t.Logf("member %d: events %v; members %+v; protocol %+v", g.Self(), st.Events, g.Members(), st.Protocol)
		}
	}
}

func TestGroupExchangeWithLoss(t *testing.T) {
	for _, mode := range []Mode{PBP2, PBP1} {
		t.Run(mode.String(), func(t *testing.T) {
			r := rtnet.New(t, 1)
			imp := testnet.Impairment{Loss: 0.05, Duplicate: 0.02, Reorder: 0.02, ReorderDelay: 200 * time.Microsecond}
			groups := newGroups(t, r, 3, testnet.EndpointConfig{In: imp}, Config{Mode: mode})
			exchange(t, groups, 2000)
			for _, g := range groups {
				if err := g.Close(); err != nil {
					t.Errorf("member %d: Close: %v", g.Self(), err)
				}
			}
			st := groups[0].Stats()
			if st.Protocol.Retransmitted == 0 {
				t.Errorf("5%% loss but nothing retransmitted: %+v", st.Protocol)
			}
			if len(st.Members) != 2 {
				t.Fatalf("Stats.Members has %d entries, want 2: %+v", len(st.Members), st.Members)
			}
			for _, m := range st.Members {
				if m.Delivered != 2000 {
					t.Errorf("delivered %d messages from member %d, want 2000", m.Delivered, m.ID)
				}
			}
			if mode == PBP2 && st.RepairP50 == 0 {
				t.Errorf("no repair latency measured: %+v", st.Members)
			}
			t.Logf("member 1: %d retransmitted, %d nacks sent, repair p50 %v p99 %v", st.Protocol.Retransmitted, fifo(st).NacksSent, st.RepairP50, st.RepairP99)
		})
	}
}

func TestSendTooLarge(t *testing.T) {
	r := rtnet.New(t, 2)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{})
	g := groups[0]
	err := g.Send(context.Background(), make([]byte, g.MaxMessage()+1))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Size != g.MaxMessage()+1 || tl.Max != g.MaxMessage() {
		t.Fatalf("Send of %d bytes: %v, want a *TooLargeError with both sizes", g.MaxMessage()+1, err)
	}
	want := fmt.Sprintf("message of %d bytes exceeds the %d bytes", g.MaxMessage()+1, g.MaxMessage())
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	// 1500-byte MTU, 2 ack entries: 1500 - 32 - 8.
	if g.MaxMessage() != 1460 {
		t.Errorf("MaxMessage is %d at MTU 1500 with two members, want 1460", g.MaxMessage())
	}
	if err := g.Send(context.Background(), make([]byte, g.MaxMessage())); err != nil {
		t.Errorf("Send of exactly MaxMessage: %v", err)
	}
}

// A member that never answers: the window fills, Send blocks, and returns
// the context's error when it ends; nothing accepted is lost.
func TestSendBlocksOnFullWindow(t *testing.T) {
	r := rtnet.New(t, 3)
	links := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
	g, err := Join(context.Background(), links[0], Config{Group: 1, Members: staticMembers(links), Self: 1, Window: 4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		g.abort()
		<-g.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	msg := make([]byte, 1000) // one frame each: no bundling
	sent := 0
	for ; sent < 100; sent++ {
		if err = g.Send(ctx, msg); err != nil {
			break
		}
	}
	// 4 frames fill the window; 4 more wait for room (pbp accepts up to a
	// window of frames beyond it); the ninth is refused.
	if !errors.Is(err, context.DeadlineExceeded) || sent != 8 {
		t.Fatalf("after %d Sends: %v; want 8 accepted, then context.DeadlineExceeded", sent, err)
	}
	if st := g.Stats(); st.Protocol.InFlight != 4 || st.Protocol.Pending != 4 || fifo(st).MessagesProposed != 8 {
		t.Errorf("in flight %d, pending %d, proposed %d; want 4, 4 and 8", st.Protocol.InFlight, st.Protocol.Pending, fifo(st).MessagesProposed)
	}
}

// The receiving application stops reading: the group slows down, nothing
// is dropped, and everything arrives once it reads again.
func TestRecvBackPressure(t *testing.T) {
	r := rtnet.New(t, 4)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{RecvQueue: 16, Window: 16})
	const k = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sendDone := sendMessages(ctx, groups[0], k, groups[0].MaxMessage())
	// The receiver does not read: wait until its queue is full and it
	// holds Data frames back, and the sender's window is full and stays
	// so.
	waitBackPressure(ctx, t, groups[1], sendDone, func() (uint64, bool) {
		p := fifo(groups[0].Stats())
		return p.MessagesProposed, p.InFlight == 16
	})
	select {
	case err := <-sendDone:
		t.Fatalf("all %d messages accepted while the receiver read nothing (err %v): no back-pressure", k, err)
	default:
	}
	// The queue exceeds RecvQueue by at most what the one batch of frames
	// stepped while it was below its limit delivers (queue.go, pushLocked):
	// 64 frames (the loop's receive batch), one message each (every
	// message here fits one frame and is queued as a view or a copy,
	// one slot each), and the frames held out of order that one of them
	// completes (rtnet drops when its queues overflow, as under load);
	// a CI run under -race saw 97. The bound allows two batches: a queue
	// that grows without bound (3000 messages are sent) fails here.
	st := groups[1].Stats()
	t.Logf("receiver: %d Data frames held, %d queued", st.HeldData, st.Queued)
	if most := 16 + 2*64; st.HeldData == 0 || st.Queued < 16 || st.Queued > most {
		t.Errorf("receiver: %d Data frames held, %d queued; want held > 0 and 16 to %d queued", st.HeldData, st.Queued, most)
	}
	recvMessages(ctx, t, groups[1], k, groups[0].MaxMessage())
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
	if evs := groups[0].Stats().Events; len(evs) != 0 {
		t.Errorf("members removed during back-pressure: %v", evs)
	}
}

// sendMessages sends message(1, i, size) for i < k from g (member 1) on
// a goroutine of its own; the channel gets the first Send error, or nil
// once all were accepted.
func sendMessages(ctx context.Context, g *Group, k, size int) <-chan error {
	done := make(chan error, 1)
	go func() {
		var b []byte
		for i := range k {
			b = message(b[:0], 1, i, size)
			if err := g.Send(ctx, b); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// recvMessages receives k messages at g and checks they are member 1's
// message(1, i, size), in order.
func recvMessages(ctx context.Context, t *testing.T, g *Group, k, size int) {
	t.Helper()
	var want []byte
	for i := range k {
		m, err := g.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		want = message(want[:0], 1, i, size)
		if m.From != 1 || !bytes.Equal(m.Data, want) {
			t.Fatalf("message %d: from %d, %d bytes; want from 1, %d bytes", i, m.From, len(m.Data), len(want))
		}
	}
}

// waitBackPressure waits, bounded by ctx, until recv's receive queue is
// full and it holds Data frames back unstepped, and the sender is stalled:
// sender reports a progress counter and whether its window (or history) is
// full, and all must hold, the counter and the receiver's queue length
// unchanged, for 20 consecutive polls 2 ms apart. It fails the test if ctx ends first or the sender
// finishes (sendDone is then left unread for the caller's own check).
func waitBackPressure(ctx context.Context, t *testing.T, recv *Group, sendDone <-chan error, sender func() (progress uint64, full bool)) {
	t.Helper()
	const polls = 20
	var last uint64
	lastQueued, still := -1, 0
	for still < polls {
		if len(sendDone) > 0 {
			return // the caller reports it
		}
		st := recv.Stats()
		progress, full := sender()
		switch {
		case st.HeldData == 0 || st.Queued < recv.queue.limit || !full || progress != last || st.Queued != lastQueued:
			still = 0
		default:
			still++
		}
		last, lastQueued = progress, st.Queued
		select {
		case <-ctx.Done():
			t.Fatalf("no back-pressure state before %v: receiver held %d, queued %d; sender progress %d, window full %v",
				ctx.Err(), st.HeldData, st.Queued, progress, full)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// A reader that falls behind for a moment (less than FailureTimeout/20)
// costs nothing: the loop leaves frames in the link until the queue has
// room, so no Data frame is dropped unstepped and none is retransmitted.
// (Before, every frame read while the queue was full was dropped and
// repaired, and a sender whose window was all dropped waited for its
// resend probe.)
func TestRecvShortPauseNoRepair(t *testing.T) {
	r := rtnet.New(t, 8)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{RecvQueue: 16, Window: 16})
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	const k = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sendDone := sendMessages(ctx, groups[0], k, groups[0].MaxMessage())
	var want []byte
	for i := range k {
		if i%200 == 0 { // stop reading until the queue is full, and a bit more
			for groups[1].Stats().Queued < 16 && ctx.Err() == nil {
				runtime.Gosched()
			}
			time.Sleep(5 * time.Millisecond)
		}
		m, err := groups[1].Recv(ctx)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		want = message(want[:0], 1, i, groups[0].MaxMessage())
		if m.From != 1 || !bytes.Equal(m.Data, want) {
			t.Fatalf("message %d: from %d, %d bytes; want from 1, %d bytes", i, m.From, len(m.Data), len(want))
		}
	}
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
	if st := groups[1].Stats(); st.HeldData != 0 {
		t.Errorf("receiver dropped %d Data frames unstepped during pauses shorter than %v", st.HeldData, groups[1].pauseFor)
	}
	if st := groups[0].Stats(); st.Protocol.Retransmitted != 0 {
		t.Errorf("sender retransmitted %d frames on a lossless segment", st.Protocol.Retransmitted)
	}
}

// The loop's check whether to stop reading while the receive queue is
// full (pauseReading, at every wait on the link then) allocates nothing
// with the protocol's default FailureTimeout: its bound was worked out
// anew at each call, boxing the protocol's shared configuration, one
// allocation a wait (~400 in a stream of rbcastd's TestSteadyStateAllocs
// whose subscriber lagged). The loop is parked in Recv meanwhile.
func TestPauseReadingAllocs(t *testing.T) {
	g, peer, hl := heldPair(t, rtnet.New(t, 10), false)
	<-hl.entered // the loop parks before its first turn
	g.queue.mu.Lock()
	for range g.queue.limit {
		g.queue.pushLocked(2, []byte("m"))
	}
	g.queue.mu.Unlock()
	now := time.Now()
	if !g.pauseReading(now) {
		t.Fatal("pauseReading with the queue full: false, want true")
	}
	if n := testing.AllocsPerRun(100, func() { g.pauseReading(now) }); n != 0 {
		t.Errorf("pauseReading with the queue full: %v allocations, want 0", n)
	}
	hl.hold.Store(false)
	close(hl.release)
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := peer.Close(); err != nil {
		t.Errorf("peer Close: %v", err)
	}
}

func TestRecvContext(t *testing.T) {
	r := rtnet.New(t, 5)
	groups := newGroups(t, r, 2, testnet.EndpointConfig{}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := groups[0].Recv(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv with nothing sent: %v, want context.DeadlineExceeded", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := groups[0].Send(cctx, []byte("x")); err != nil {
		t.Errorf("Send with room in the window and a cancelled context: %v (accepting needs no wait)", err)
	}
}

// Close delivers everything accepted before leaving; receivers then see
// the leave, and Send and Recv report ErrClosed.
func TestCloseDeliversEverything(t *testing.T) {
	r := rtnet.New(t, 6)
	imp := testnet.Impairment{Loss: 0.1}
	groups := newGroups(t, r, 3, testnet.EndpointConfig{In: imp}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const k = 500
	var b []byte
	for i := range k {
		b = message(b[:0], 1, i, groups[0].MaxMessage())
		if err := groups[0].Send(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := groups[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st0 := groups[0].Stats()
	first := uint64(0) // InitialSeq
	if err := groups[0].Send(ctx, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := groups[0].Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv after Close: %v, want ErrClosed", err)
	}
	for _, g := range groups[1:] {
		var want []byte
		for i := range k {
			m, err := g.Recv(ctx)
			if err != nil {
				t.Fatalf("member %d: Recv %d: %v", g.Self(), i, err)
			}
			want = message(want[:0], 1, i, groups[0].MaxMessage())
			if !bytes.Equal(m.Data, want) {
				t.Fatalf("member %d: message %d differs", g.Self(), i)
			}
		}
		select {
		case ev := <-g.Events():
			switch {
			case ev.Member == 1 && ev.Kind == MemberLeft:
			case ev.Member == 1 && ev.Kind == MemberFailed && uint64(ev.Delivered) == fifo(st0).DataFramesSent+first:
				// Every Leave frame lost: removed after FailureTimeout,
				// with everything delivered, as documented. Not rare
				// here although 0.1³ is: the seed is fixed, and each
				// frame arriving at an endpoint takes the next draw of
				// that endpoint's In stream, one draw per frame. For
				// seed 6 the stream of member 2 (endpoint 1) loses draws
				// 631, 632 and 633 in a row, and its 631st frame is
				// about when the Leaves arrive (nothing else reaches it
				// between them); how many frames came before varies
				// with timing, so a run lands the three Leaves on that
				// triple now and then (1 in 15 to 1 in 150 runs seen).
				// The log then shows lost=62: the 60 losses up to draw
				// 633 and two later heartbeats.
				st := g.Stats()
				t.Logf("member %d: member 1's Leave frames never arrived: %v; in: %+v; bad %+v", g.Self(), ev, g.l.(*rtnet.Link).Counters(testnet.In), st.BadFrames)
			default:
				t.Errorf("member %d: event %v, want member 1 left", g.Self(), ev)
			}
		case <-ctx.Done():
			t.Errorf("member %d: no leave event", g.Self())
		}
	}
}

// Goroutine-leak check after Close (as wireguard-go's device tests do).
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		r := rtnet.New(t, 7)
		links := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
		var groups []*Group
		for i := range links {
			g, err := Join(context.Background(), links[i], Config{Group: 9, Members: staticMembers(links), Self: frame.MemberID(i + 1), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, g)
		}
		exchange(t, groups, 50)
		for _, g := range groups {
			if err := g.Close(); err != nil {
				t.Error(err)
			}
		}
		r.Stop()
	}()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// joinRegistered joins Size members by registration over rtnet links, link 0
// the server, concurrently.
func joinRegistered(t *testing.T, ctx context.Context, links []*rtnet.Link, cfgs []Config) ([]*Group, []error) {
	t.Helper()
	groups := make([]*Group, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[i], errs[i] = Join(ctx, links[i], cfgs[i])
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range groups {
			if g != nil {
				g.abort()
				<-g.Done()
			}
		}
	})
	return groups, errs
}

func TestJoinRegistrationWithLoss(t *testing.T) {
	r := rtnet.New(t, 8)
	imp := testnet.Impairment{Loss: 0.2, Duplicate: 0.1}
	var links []*rtnet.Link
	var cfgs []Config
	for i := range 4 {
		links = append(links, r.Attach(t, testnet.EndpointConfig{In: imp, Out: imp}))
		cfgs = append(cfgs, Config{Group: 11, Size: 4, Server: i == 0, Logger: quiet})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	groups, errs := joinRegistered(t, ctx, links, cfgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("link %d: Join: %v", i, err)
		}
	}
	ids := map[frame.MemberID]bool{}
	for i, g := range groups {
		if (i == 0) != (g.Self() == 0) {
			t.Errorf("link %d is member %d; the server must be member 0", i, g.Self())
		}
		ids[g.Self()] = true
		if ms := g.Members(); len(ms) != 4 {
			t.Errorf("member %d sees %d members, want 4: %+v", g.Self(), len(ms), ms)
		}
	}
	if len(ids) != 4 {
		t.Fatalf("ids %v are not distinct", ids)
	}
	exchange(t, groups, 300)
}

// A joiner configured differently from the server is refused, and the
// error reaches its Join; the server's Join times out saying who is
// missing.
func TestJoinConfigMismatch(t *testing.T) {
	r := rtnet.New(t, 9)
	links := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
	cfgs := []Config{{Group: 12, Size: 2, Server: true, Window: 16, Logger: quiet}, {Group: 12, Size: 2, Window: 32, Logger: quiet}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, errs := joinRegistered(t, ctx, links, cfgs)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "configuration hash") || !strings.Contains(errs[1].Error(), "registration refused") {
		t.Errorf("joiner's Join: %v, want a refusal naming the configuration hashes", errs[1])
	}
	if !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "1 of 2 members joined") {
		t.Errorf("server's Join: %v, want a timeout saying 1 of 2 members joined", errs[0])
	}
}

func TestJoinNoServer(t *testing.T) {
	r := rtnet.New(t, 10)
	l := r.Attach(t, testnet.EndpointConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Join(ctx, l, Config{Group: 13, Size: 3, Logger: quiet})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no Welcome from a server") {
		t.Errorf("Join with no server: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	r := rtnet.New(t, 11)
	l := r.Attach(t, testnet.EndpointConfig{})
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "registration needs Size"},
		{Config{Mode: 7, Size: 2}, "Mode is Mode(7)"},
		{Config{Size: 2, AckDelay: -1}, "AckDelay is -1ns"},
		{Config{Size: 2, RecvQueue: -1}, "RecvQueue is -1"},
		{Config{Members: []frame.MemberInfo{{ID: 1, MAC: [6]byte{2}}}, Size: 3}, "Size is 3 but Members lists 1"},
		{Config{Members: []frame.MemberInfo{{ID: 1, MAC: [6]byte{2}}}, Self: 2}, "Self (2) is not in Members"},
	} {
		_, err := Join(context.Background(), l, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Join(%+v): %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// startBatch is a joiner's link that holds the group's Start frame back
// until a Data frame has arrived after it, then returns them in one
// batch, Start first: what a joiner reads when a member that had the
// Start earlier sends at once.
type startBatch struct {
	*rtnet.Link
	held    []link.Frame // copies, from the Start on
	batched bool         // the Start and a Data frame went out in one batch
}

func (l *startBatch) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	for {
		if l.batched && len(l.held) > 0 {
			n := copy(frames, l.held)
			l.held = l.held[n:]
			return n, nil
		}
		n, err := l.Link.Recv(deadline, frames)
		if err != nil || l.batched {
			return n, err
		}
		out := 0
		for _, f := range frames[:n] {
			typ := frame.Type(0)
			if _, body, err := frame.SplitEthernet(f.Data, frame.EtherType); err == nil {
				typ = frame.View(body).Type()
			}
			if len(l.held) == 0 && typ != frame.Start {
				frames[out] = f
				out++
				continue
			}
			l.held = append(l.held, link.Frame{Data: bytes.Clone(f.Data), Time: f.Time})
			l.batched = l.batched || typ == frame.Data
		}
		if out > 0 {
			return out, nil
		}
	}
}

// The first Data of a member that had the Start before us, in the same
// receive batch as our Start, is stepped by the event loop's first turn:
// registration used to drop every frame after the Start in its batch, and
// the Data was asked for again and retransmitted; pcap-replay simulate
// steps it, so a re-run could deliver in another order than the live run.
func TestJoinStepsFramesAfterStart(t *testing.T) {
	r := rtnet.New(t, 12)
	srv := r.Attach(t, testnet.EndpointConfig{})
	joiner := &startBatch{Link: r.Attach(t, testnet.EndpointConfig{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sg *Group
	serr := make(chan error, 1)
	go func() {
		var err error
		if sg, err = Join(ctx, srv, Config{Group: 12, Size: 2, Server: true, Logger: quiet}); err == nil {
			err = sg.Send(ctx, []byte("first"))
		}
		serr <- err
	}()
	jg, err := Join(ctx, joiner, Config{Group: 12, Size: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-serr; err != nil {
		t.Fatal(err)
	}
	m, err := jg.Recv(ctx)
	if err != nil || m.From != 0 || string(m.Data) != "first" {
		t.Fatalf("joiner received %d %q, %v; want 0 \"first\"", m.From, m.Data, err)
	}
	if !joiner.batched {
		t.Fatal("the Start and the first Data never came in one batch: the test proved nothing")
	}
	if n := fifo(jg.Stats()).NacksSent; n != 0 {
		t.Errorf("the joiner sent %d Nacks: it dropped the Data that came with its Start", n)
	}
	if n := sg.Stats().Protocol.Retransmitted; n != 0 {
		t.Errorf("the server retransmitted %d frames", n)
	}
	for _, g := range []*Group{jg, sg} {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}
}
