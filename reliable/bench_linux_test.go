package reliable

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Benchmarks on the netns bridge. Each measures for a fixed time whatever
// b.N is, so run them once:
//
//	go test -run '^$' -bench . -benchtime 1x ./reliable/
//
// RBCAST_BENCH_SECONDS sets the measuring time (default 1);
// RBCAST_BENCH_PROCS=1 runs BenchmarkGoodput's receivers as processes;
// RBCAST_BENCH_TRACE=1 logs the sender's longest pauses with the frames
// sent and received around them (see traceLink); RBCAST_BENCH_PREFIX
// starts the netns names (default rbeb; see benchPrefix);
// RBCAST_BENCH_WINDOW sets BenchmarkGoodput's Config.Window;
// RBCAST_BENCH_DELIVER=1 has its receivers use Config.Deliver instead of
// RecvAppend;
// RBCAST_BENCH_NOSTAGE=1 has groups send with Link.Send under their lock
// instead of staging frames under it for the kicker goroutine;
// RBCAST_BENCH_SETTLE (a duration) replaces the 1 ms a receiver's loop
// waits for its reader to take the messages queued as views;
// RBCAST_BENCH_SPIN (a duration) has every ring link, PBP's and the raw
// ceiling's receivers alike, poll its receive ring that long before
// sleeping (ring.Config.RxSpin; 0: never; unset: ring.DefaultRxSpin).

func init() {
	if d, ok := envDuration(nil, "RBCAST_BENCH_SETTLE"); ok {
		settleWait = d
	}
}

// benchSpin is RBCAST_BENCH_SPIN as ring.Config.RxSpin: every ring link
// of the PBP and raw runs polls its receive ring this long, yielding,
// before sleeping. Unset it is 0, the ring's default (DefaultRxSpin);
// RBCAST_BENCH_SPIN=0 is -1, never.
func benchSpin(tb testing.TB) time.Duration {
	d, ok := envDuration(tb, "RBCAST_BENCH_SPIN")
	if ok && d == 0 {
		return -1
	}
	return d
}

func TestBenchSpin(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{{"", 0}, {"0", -1}, {"0s", -1}, {"200us", 200 * time.Microsecond}} {
		t.Setenv("RBCAST_BENCH_SPIN", c.v)
		if got := benchSpin(t); got != c.want {
			t.Errorf("RBCAST_BENCH_SPIN=%q gave RxSpin %v, want %v", c.v, got, c.want)
		}
	}
}

func benchDuration() time.Duration {
	v := os.Getenv("RBCAST_BENCH_SECONDS")
	if v == "" {
		return time.Second
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 {
		envFail(nil, "RBCAST_BENCH_SECONDS", v, "a positive number of seconds")
	}
	return time.Duration(s * float64(time.Second))
}

var benchPrefixes atomic.Int32

// benchPrefix is a fresh topology prefix of ours: RBCAST_BENCH_PREFIX
// (default "rbeb") and two letters, so that benchmarks run at the same
// time by different people (RBCAST_BENCH_PREFIX=rbb, rbc, ...) do not
// collide; netns.Up checks the result ("rb", lowercase, at most 11).
func benchPrefix() string {
	n := benchPrefixes.Add(1)
	p := os.Getenv("RBCAST_BENCH_PREFIX")
	if p == "" {
		p = "rbeb"
	}
	return fmt.Sprintf("%s%c%c", p, 'a'+n/26%26, 'a'+n%26)
}

type goodputOpts struct {
	receivers   int
	mtu         int
	lossPct     float64
	size        int // 0: the largest message
	bundleDelay time.Duration
	mode        Mode
	window      int  // 0: the mode's default
	allSend     bool // every member sends (all-to-all), not only member 0
	// deliver: receivers take messages through Config.Deliver (views into
	// the ring, no copy) instead of RecvAppend (one copy out of the ring
	// for a message of 1 KB or more taken before the loop's next turn;
	// otherwise a copy into the receive queue and one out of it).
	deliver bool
	// procs: every receiver is a process of its own (one sender only;
	// see benchchild_linux_test.go).
	procs bool
	// open opens each member's link (nil: the ring, openOnHost); members
	// are named by the MAC the link reports.
	open func(tb testing.TB, h *netns.Host) link.Link
	// auth: every member's Config.Auth (nil: unauthenticated).
	auth *auth.Config
}

type goodputResult struct {
	msgs, bytes uint64 // at the slowest receiver, from all senders
	elapsed     time.Duration
	sender      Stats
	held        uint64        // Data frames receivers left unstepped (full receive queue)
	drops       uint64        // receivers' kernel drops
	maxGap      time.Duration // longest time any receiver went without a delivery while senders sent
	// short: bytes some receiver still missed 5 s after sending ended (a
	// stall; 0 when every receiver got everything)
	short uint64
}

// runGoodput has member 0 send as fast as Send accepts for d; every other
// member receives with RecvAppend. Loss is on the receivers' inbound
// frames of our EtherType.
func runGoodput(tb testing.TB, o goodputOpts, d time.Duration) goodputResult {
	topo := netnstest.Up(tb, netns.Options{Hosts: o.receivers + 1, MTU: o.mtu, Prefix: benchPrefix()})
	if o.lossPct > 0 {
		for _, h := range topo.Hosts[1:] {
			if err := h.SetLoss(netns.In, netns.Loss{Percent: o.lossPct, EtherType: frame.EtherType}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return runGoodputOn(tb, topo, o, d)
}

var benchGroups atomic.Uint32

// memberLabel is the profiler label of member i's goroutines.
func memberLabel(i int) pprof.LabelSet { return pprof.Labels("member", strconv.Itoa(i)) }

// runGoodputOn runs a fresh group on every host of topo (whatever loss it
// has): member 0 (or, with o.allSend, every member) sends o.size-byte
// messages as fast as Send accepts for d, every member receives with
// RecvAppend. The result is what the slowest receiver got, counted until
// it had everything (or 5 s after sending ended).
func runGoodputOn(tb testing.TB, topo *netns.Topology, o goodputOpts, d time.Duration) goodputResult {
	if o.procs && !o.allSend {
		return runGoodputProcs(tb, topo, o, d)
	}
	links := make([]link.Link, len(topo.Hosts))
	var members []frame.MemberInfo
	open := openOnHost
	if o.open != nil {
		open = o.open
	}
	for i, h := range topo.Hosts {
		links[i] = open(tb, h)
	}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	var trace *traceLink
	if envBool(tb, "RBCAST_BENCH_TRACE") {
		trace = &traceLink{Link: links[0]}
		links[0] = trace
		defer trace.report(tb)
	}
	for i, l := range links {
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(l.HardwareAddr()), Incarnation: 1})
	}
	gid := 1000 + benchGroups.Add(1)
	groups := make([]*Group, len(links))
	counts := make([]atomic.Uint64, len(groups))
	gaps := make([]atomic.Int64, len(groups))
	var sending atomic.Bool
	sending.Store(true)
	for i, l := range links {
		cfg := Config{Group: gid, Members: members, Self: frame.MemberID(i), Mode: o.mode,
			Window: o.window, BundleDelay: o.bundleDelay, Logger: quiet, Auth: o.auth}
		if o.deliver {
			last := time.Now()
			cfg.Deliver = func(_ frame.MemberID, data []byte) {
				counts[i].Add(uint64(len(data)))
				if sending.Load() {
					now := time.Now()
					if d := now.Sub(last); d > time.Duration(gaps[i].Load()) {
						gaps[i].Store(int64(d))
					}
					last = now
				}
			}
		}
		// The group's goroutines inherit the label: a CPU profile
		// (-cpuprofile; go tool pprof -tagfocus member=0) splits by member.
		var g *Group
		var err error
		pprof.Do(context.Background(), memberLabel(i), func(ctx context.Context) {
			g, err = Join(ctx, l, cfg)
		})
		if err != nil {
			tb.Fatal(err)
		}
		groups[i] = g
	}
	defer func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	}()
	size := o.size
	if size == 0 {
		size = groups[0].MaxMessage()
	}
	nSend := 1
	if o.allSend {
		nSend = len(groups)
	}
	// receiving[i]: member i receives from someone.
	receiving := func(i int) bool { return nSend > 1 || i > 0 }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i, g := range groups {
		if !receiving(i) || o.deliver {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, memberLabel(i)))
			buf := make([]byte, 0, 65536)
			last := time.Now()
			var gap time.Duration
			for {
				_, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					gaps[i].Store(int64(gap))
					return
				}
				counts[i].Add(uint64(len(data)))
				if sending.Load() {
					now := time.Now()
					gap = max(gap, now.Sub(last))
					last = now
				}
			}
		}()
	}
	msg := make([]byte, size)
	sent := make([]uint64, nSend)
	start := time.Now()
	var swg sync.WaitGroup
	for s := range nSend {
		swg.Add(1)
		go func() {
			defer swg.Done()
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, memberLabel(s)))
			var inSend time.Duration
			for time.Since(start) < d {
				t0 := time.Now()
				if err := groups[s].Send(ctx, msg); err != nil {
					tb.Error(err)
					return
				}
				inSend += time.Since(t0)
				sent[s]++
			}
			if s == 0 && trace != nil {
				tb.Logf("trace: member 0 spent %v of %v inside Send", inSend, d)
			}
		}()
	}
	swg.Wait()
	sending.Store(false)
	var total uint64
	for _, n := range sent {
		total += n
	}
	// want[i]: what member i must receive (everything but its own).
	want := func(i int) uint64 {
		if i < nSend {
			return (total - sent[i]) * uint64(size)
		}
		return total * uint64(size)
	}
	// Wait until the slowest receiver has everything (or 5 s).
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		done := true
		for i := range groups {
			if receiving(i) && counts[i].Load() < want(i) {
				done = false
				break
			}
		}
		if done {
			break
		}
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	res := goodputResult{elapsed: elapsed, sender: groups[0].Stats()}
	first := true
	for i, g := range groups {
		if !receiving(i) {
			continue
		}
		c := counts[i].Load()
		if first || c < res.bytes {
			res.bytes, first = c, false
		}
		if w := want(i); c < w {
			res.short = max(res.short, w-c)
		}
		res.maxGap = max(res.maxGap, time.Duration(gaps[i].Load()))
		st := g.Stats()
		res.held += st.HeldData
		res.drops += st.Link.KernelDrops
	}
	res.msgs = res.bytes / uint64(max(size, 1))
	return res
}

func openOnHost(tb testing.TB, h *netns.Host) link.Link {
	var l link.Link
	err := h.Do(func() error {
		var err error
		l, err = linkbench.OpenRing("ring-v2", h.Iface, benchSpin(tb))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	if envBool(tb, "RBCAST_BENCH_NOSTAGE") {
		return noStage{l}
	}
	return l
}

// noStage hides the ring's Stage and Kick (RBCAST_BENCH_NOSTAGE=1), so
// the group transmits with Send under its lock, as before the kicker.
type noStage struct{ link.Link }

// traceLink records when the sender's link sent and received what
// (RBCAST_BENCH_TRACE=1): report logs the longest pauses of the sender
// with the frames around them, to tell a protocol stall (the window
// waits for an acknowledgement or a timer) from a starved receiver.
type traceLink struct {
	link.Link
	mu       sync.Mutex
	evs      []traceEvent
	sendTime time.Duration // in l.Send, all calls
}

type traceEvent struct {
	t    time.Time
	send bool
	desc string
}

func describeFrames(frames [][]byte) string {
	var b strings.Builder
	for _, f := range frames {
		_, body, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			continue
		}
		v, err := frame.Parse(body)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, " %d:%v/%d", v.Sender(), v.Type(), v.Seq())
		if a, ok := v.AckFor(0); ok && v.Sender() != 0 {
			fmt.Fprintf(&b, "(ack %d)", a)
		}
		if b.Len() > 300 {
			b.WriteString(" …")
			break
		}
	}
	return b.String()
}

func (l *traceLink) Send(frames [][]byte) (int, error) {
	d := describeFrames(frames)
	t0 := time.Now()
	n, err := l.Link.Send(frames)
	took := time.Since(t0)
	if took > 100*time.Microsecond {
		d = fmt.Sprintf("(l.Send blocked %v)%s", took, d)
	}
	l.mu.Lock()
	l.evs = append(l.evs, traceEvent{t0, true, d})
	l.sendTime += took
	l.mu.Unlock()
	return n, err
}

func (l *traceLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := l.Link.Recv(deadline, frames)
	fs := make([][]byte, n)
	for i := range n {
		fs[i] = frames[i].Data
	}
	d := fmt.Sprintf("recv %d%s", n, describeFrames(fs))
	l.mu.Lock()
	l.evs = append(l.evs, traceEvent{time.Now(), false, d})
	l.mu.Unlock()
	return n, err
}

func (l *traceLink) report(tb testing.TB) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type gap struct {
		i int
		d time.Duration
	}
	var gaps []gap
	last := -1
	for i, e := range l.evs {
		if !e.send {
			continue
		}
		if last >= 0 {
			gaps = append(gaps, gap{i, e.t.Sub(l.evs[last].t)})
		}
		last = i
	}
	slices.SortFunc(gaps, func(a, b gap) int { return int(b.d - a.d) })
	var total time.Duration
	for _, g := range gaps {
		if g.d > time.Millisecond {
			total += g.d
		}
	}
	tb.Logf("trace: %d events; pauses over 1 ms between sends add up to %v; %v spent in l.Send", len(l.evs), total, l.sendTime)
	for _, g := range gaps[:min(5, len(gaps))] {
		t0 := l.evs[g.i].t.Add(-g.d)
		tb.Logf("pause of %v:", g.d)
		for j := max(0, g.i-4); j < min(len(l.evs), g.i+2); j++ {
			tb.Logf("  %+9.3fms send=%v %s", float64(l.evs[j].t.Sub(t0).Microseconds())/1000, l.evs[j].send, l.evs[j].desc)
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if len(b) > 14 {
		b = b[:14]
	}
	return string(b)
}

// BenchmarkGoodput: PBP2 one-to-all goodput at the slowest receiver, for
// 1, 3 and 7 receivers, MTU 1500 and 9000, 0/1/5% loss, 64-byte and
// largest messages; beside it the raw ring ceiling of the same topology
// (linkbench, backend ring-v2).
func BenchmarkGoodput(b *testing.B) {
	netnstest.RequireRoot(b)
	d := benchDuration()
	for _, rx := range []int{1, 3, 7} {
		for _, mtu := range []int{1500, 9000} {
			b.Run(fmt.Sprintf("rx=%d/mtu=%d/raw-ring", rx, mtu), func(b *testing.B) {
				topo := netnstest.Up(b, netns.Options{Hosts: rx + 1, MTU: mtu, Prefix: benchPrefix()})
				var res *linkbench.Throughput
				min, cpu := cpuPerGB(rx, func() (float64, time.Duration) {
					var err error
					res, err = linkbench.RunThroughputOn(topo, linkbench.Options{Backend: "ring-v2", Duration: d, RxSpin: benchSpin(b)})
					if err != nil {
						b.Fatal(err)
					}
					min := res.Receivers[0].MBps(res.Elapsed)
					for _, r := range res.Receivers {
						min = minf(min, r.MBps(res.Elapsed))
					}
					return min, res.Elapsed
				})
				b.ReportMetric(res.MeanMBps(), "MB/s")
				b.ReportMetric(min, "minMB/s")
				b.ReportMetric(cpu, "cpu-s/GB")
				b.ReportMetric(res.LossPct(), "loss%")
				b.Logf("load %s", loadavg())
			})
			for _, loss := range []float64{0, 1, 5} {
				for _, size := range []int{0, 64} {
					name := "max"
					if size > 0 {
						name = strconv.Itoa(size)
					}
					b.Run(fmt.Sprintf("rx=%d/mtu=%d/loss=%g/size=%s", rx, mtu, loss, name), func(b *testing.B) {
						o := goodputOpts{receivers: rx, mtu: mtu, lossPct: loss, size: size, mode: PBP2, window: envInt(b, "RBCAST_BENCH_WINDOW"),
							procs: envBool(b, "RBCAST_BENCH_PROCS"), deliver: envBool(b, "RBCAST_BENCH_DELIVER")}
						topo := netnstest.Up(b, netns.Options{Hosts: rx + 1, MTU: mtu, Prefix: benchPrefix()})
						if loss > 0 {
							for _, h := range topo.Hosts[1:] {
								if err := h.SetLoss(netns.In, netns.Loss{Percent: loss, EtherType: frame.EtherType}); err != nil {
									b.Fatal(err)
								}
							}
						}
						var r goodputResult
						_, cpu := cpuPerGB(rx, func() (float64, time.Duration) {
							r = runGoodputOn(b, topo, o, d)
							return float64(r.bytes) / r.elapsed.Seconds() / 1e6, r.elapsed
						})
						reportGoodput(b, r)
						b.ReportMetric(cpu, "cpu-s/GB")
					})
				}
			}
		}
	}
	b.Run("rx=3/mtu=1500/loss=0/size=64/bundle=100us", func(b *testing.B) {
		r := runGoodput(b, goodputOpts{receivers: 3, mtu: 1500, size: 64, bundleDelay: 100 * time.Microsecond, mode: PBP2}, d)
		reportGoodput(b, r)
	})
}

func minf(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}

func reportGoodput(b *testing.B, r goodputResult) {
	if r.short > 0 {
		b.Logf("STALL: a receiver still missed %d bytes 5 s after sending ended; the sender's membership events: %v", r.short, r.sender.Events)
	}
	b.ReportMetric(float64(r.bytes)/r.elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(r.msgs)/r.elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(r.sender.Protocol.Retransmitted), "retx")
	b.ReportMetric(float64(r.maxGap.Microseconds())/1000, "gap-ms")
	b.Logf("load %s; longest delivery gap %v; sender: %d frames, %d retransmitted, %d nacks received, %d resend probes, %d kernel drops; receivers: %d Data frames held (queue full), %d kernel drops",
		loadavg(), r.maxGap.Round(time.Microsecond), fifo(r.sender).DataFramesSent, r.sender.Protocol.Retransmitted, fifo(r.sender).NacksReceived,
		fifo(r.sender).AcksSent, r.sender.Link.KernelDrops, r.held, r.drops)
}

// BenchmarkLatency: one message in flight between two hosts (ping-pong);
// one-way latency is half the round trip.
func BenchmarkLatency(b *testing.B) {
	netnstest.RequireRoot(b)
	topo := netnstest.Up(b, netns.Options{Hosts: 2, Prefix: benchPrefix()})
	const n = 20000
	p50, p99 := runLatencyOn(b, topo, PBP2, n)
	b.ReportMetric(float64(p50.Nanoseconds())/1000, "p50-one-way-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1000, "p99-one-way-µs")
	b.Logf("load %s; %d round trips of 64 bytes", loadavg(), n)
}

// runLatencyOn: hosts 0 and 1 of topo form a group; 0 sends a 64-byte
// message, 1 sends it back, n times after 100 warm-up round trips. It
// returns half the round trip's p50 and p99.
func runLatencyOn(tb testing.TB, topo *netns.Topology, mode Mode, n int) (p50, p99 time.Duration) {
	return runLatencyAuthOn(tb, topo, mode, n, nil)
}

// runLatencyAuthOn is runLatencyOn with Config.Auth a (nil: none).
func runLatencyAuthOn(tb testing.TB, topo *netns.Topology, mode Mode, n int, a *auth.Config) (p50, p99 time.Duration) {
	links := []link.Link{openOnHost(tb, topo.Hosts[0]), openOnHost(tb, topo.Hosts[1])}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	members := []frame.MemberInfo{{ID: 0, MAC: [6]byte(topo.Hosts[0].MAC), Incarnation: 1}, {ID: 1, MAC: [6]byte(topo.Hosts[1].MAC), Incarnation: 1}}
	gid := 1000 + benchGroups.Add(1)
	var groups []*Group
	for i, l := range links {
		g, err := Join(context.Background(), l, Config{Group: gid, Members: members, Self: frame.MemberID(i), Mode: mode, Logger: quiet, Auth: a})
		if err != nil {
			tb.Fatal(err)
		}
		groups = append(groups, g)
	}
	defer func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // echo
		buf := make([]byte, 0, 2048)
		for {
			_, data, err := groups[1].RecvAppend(ctx, buf[:0])
			if err != nil || groups[1].Send(ctx, data) != nil {
				return
			}
		}
	}()
	msg := make([]byte, 64)
	buf := make([]byte, 0, 2048)
	rtts := make([]time.Duration, 0, n)
	for i := range n + 100 {
		t0 := time.Now()
		if err := groups[0].Send(ctx, msg); err != nil {
			tb.Fatal(err)
		}
		if _, _, err := groups[0].RecvAppend(ctx, buf[:0]); err != nil {
			tb.Fatal(err)
		}
		if i >= 100 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2] / 2, rtts[len(rtts)*99/100] / 2
}
