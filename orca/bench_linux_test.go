package orca_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Orca against the total order under it, on the 3-host netns topology of
// reliable's total-order benchmarks, members in this process over the
// ring link. Each pair of runs — the raw total order (reliable.Group with
// Config.Deliver) and Orca writes on the same group configuration — is
// made back to back, RBCAST_BENCH_REPS times (default 3), and the
// medians of the per-repetition ratios are reported, as the load of this
// shared machine moves between repetitions:
//
//	go test -run '^$' -bench 'Orca' -benchtime 1x ./orca/
//
// docs/benchmarks.md ("Orca") has the table and its targets: write
// latency at most 1.2 × self-delivery, write throughput per object at
// least 0.8 × the total order's message rate at the same size.

const orcaBenchHosts = 3

var orcaBenchGroups atomic.Uint32

// benchLinks opens the ring link on every host.
func benchLinks(tb testing.TB, topo *netns.Topology) ([]link.Link, []frame.MemberInfo) {
	links := make([]link.Link, len(topo.Hosts))
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		err := h.Do(func() error {
			var err error
			links[i], err = ring.Open(h.Iface, ring.Config{})
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	return links, members
}

// rawGroups joins a fresh total-order group on every host, deliver
// taking every member's deliveries.
func rawGroups(tb testing.TB, topo *netns.Topology, base reliable.Config, deliver func(i int, from frame.MemberID, data []byte)) ([]*reliable.Group, func()) {
	links, members := benchLinks(tb, topo)
	gid := 3000 + orcaBenchGroups.Add(1)
	groups := make([]*reliable.Group, len(links))
	for i, l := range links {
		cfg := base
		cfg.Order, cfg.Group, cfg.Members, cfg.Self, cfg.Logger = reliable.Total, gid, members, members[i].ID, slog.New(slog.DiscardHandler)
		cfg.Deliver = func(from frame.MemberID, data []byte) { deliver(i, from, data) }
		g, err := reliable.Join(context.Background(), l, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		groups[i] = g
	}
	return groups, func() {
		for _, g := range groups {
			g.Close()
		}
		for _, l := range links {
			l.Close()
		}
	}
}

// orcaNodes joins a fresh Orca group on every host.
func orcaNodes(tb testing.TB, topo *netns.Topology, base reliable.Config) ([]*orca.Node, func()) {
	links, members := benchLinks(tb, topo)
	gid := 3000 + orcaBenchGroups.Add(1)
	nodes := make([]*orca.Node, len(links))
	for i, l := range links {
		cfg := base
		cfg.Group, cfg.Members, cfg.Self, cfg.Logger = gid, members, members[i].ID, slog.New(slog.DiscardHandler)
		n, err := orca.Join(context.Background(), l, orca.Config{Group: cfg})
		if err != nil {
			tb.Fatal(err)
		}
		nodes[i] = n
	}
	return nodes, func() {
		for _, n := range nodes {
			n.Close()
		}
		for _, l := range links {
			l.Close()
		}
	}
}

// rawLatency: with one message in flight, Send to the sender's own
// delivery (Config.Deliver), n times, at member sender.
func rawLatency(tb testing.TB, topo *netns.Topology, base reliable.Config, sender, size, n int) []time.Duration {
	got := make(chan struct{}, 1)
	groups, stop := rawGroups(tb, topo, base, func(i int, from frame.MemberID, _ []byte) {
		if i == sender && from == frame.MemberID(sender+1) {
			got <- struct{}{}
		}
	})
	defer stop()
	msg := make([]byte, size)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := groups[sender].Send(context.Background(), msg); err != nil {
			tb.Fatal(err)
		}
		<-got
		lat = append(lat, time.Since(t0))
	}
	return lat
}

// orcaLatency: a write's Call at member sender, n times. The message is
// the write's header (10 bytes) and size-10 bytes of arguments, so that
// it is as long as the raw run's. Before each write, the same group
// carries a raw message as long (orca.SendRaw, first byte rawMark; a hook
// at every replica takes it before the replica sees it), one in flight,
// Send to the sender's own delivery: the order's self-delivery measured
// in the same run, interleaved with the writes (same), beside rawLatency's
// in a group of its own made just before (whose instance, CPU placement
// and the machine's load then differ from the writes' by more than Orca's
// cost: several µs either way from one group to the next).
func orcaLatency(tb testing.TB, topo *netns.Topology, base reliable.Config, sender, size, n int) (writes, same []time.Duration) {
	nodes, stop := orcaNodes(tb, topo, base)
	defer stop()
	got := make(chan struct{}, 1)
	objs := make([]*orca.Object[int64], len(nodes))
	for i, nd := range nodes {
		self := frame.MemberID(i + 1)
		orca.BreakReplica(nd, func(from frame.MemberID, data []byte, deliver func(frame.MemberID, []byte)) {
			if len(data) == 0 || data[0] != rawMark {
				deliver(from, data)
			} else if i == sender && from == self {
				got <- struct{}{}
			}
		})
		var err error
		if objs[i], err = orca.New(nd, "sink", sink, 0); err != nil {
			tb.Fatal(err)
		}
	}
	args := make([]byte, max(size-10, 0))
	msg := make([]byte, size)
	msg[0] = rawMark
	writes, same = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := orca.SendRaw(context.Background(), nodes[sender], msg); err != nil {
			tb.Fatal(err)
		}
		<-got
		same = append(same, time.Since(t0))
		t0 = time.Now()
		if _, err := sinkPut.Call(context.Background(), objs[sender], args); err != nil {
			tb.Fatal(err)
		}
		writes = append(writes, time.Since(t0))
	}
	return writes, same
}

// rawMark begins orcaLatency's raw messages (no Orca message kind).
const rawMark = 0xff

func benchReps(tb testing.TB) int {
	return envPositive(tb, "RBCAST_BENCH_REPS", 3)
}

func envPositive(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func benchSeconds(tb testing.TB) time.Duration {
	v := os.Getenv("RBCAST_BENCH_SECONDS")
	if v == "" {
		return time.Second
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 {
		tb.Fatalf("RBCAST_BENCH_SECONDS=%q: want a positive number of seconds", v)
	}
	return time.Duration(s * float64(time.Second))
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if len(b) > 14 {
		b = b[:14]
	}
	return string(b)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func quantile(lat []time.Duration, q float64) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[int(float64(len(s)-1)*q)].Nanoseconds()) / 1e3
}

// BenchmarkOrcaLatency: one write in flight, Call to return, against the
// total order's self-delivery of a message as long (Send to the sender's
// own Deliver), at an ordinary member and at the sequencer, 64 and 1000
// bytes, SafeMajority (the default) and SafeSequencer. The self-delivery
// is measured twice: in a group of its own made just before the writes'
// (raw), and on the writes' group, one raw message before each write
// (same; orcaLatency). Reported: the medians of p50 and p99 in µs and of
// the per-repetition ratios of the p50s, orca/raw and orca/same (target:
// ≤ 1.2; orca/same is the steadier: both sides share the group and the
// moment).
func BenchmarkOrcaLatency(b *testing.B) {
	netnstest.RequireRoot(b)
	topo := netnstest.Up(b, netns.Options{Hosts: orcaBenchHosts, Prefix: "rbolat"})
	n := envPositive(b, "RBCAST_ORCA_WRITES", 2000)
	for _, size := range []int{64, 1000} {
		for _, safe := range []reliable.Resilience{reliable.SafeMajority, reliable.SafeSequencer} {
			for _, who := range []struct {
				name   string
				sender int
			}{{"member", 1}, {"sequencer", 0}} {
				b.Run(fmt.Sprintf("%s/%v/size=%d", who.name, safe, size), func(b *testing.B) {
					base := reliable.Config{Resilience: safe}
					var raw50, raw99, same50, orca50, orca99, ratio, ratioSame []float64
					for range benchReps(b) {
						r := rawLatency(b, topo, base, who.sender, size, n)
						o, s := orcaLatency(b, topo, base, who.sender, size, n)
						raw50, raw99 = append(raw50, quantile(r, .5)), append(raw99, quantile(r, .99))
						same50 = append(same50, quantile(s, .5))
						orca50, orca99 = append(orca50, quantile(o, .5)), append(orca99, quantile(o, .99))
						ratio = append(ratio, quantile(o, .5)/quantile(r, .5))
						ratioSame = append(ratioSame, quantile(o, .5)/quantile(s, .5))
						b.Logf("raw p50 %.1f µs, same %.1f µs, orca p50 %.1f µs; load %s",
							raw50[len(raw50)-1], same50[len(same50)-1], orca50[len(orca50)-1], loadavg())
					}
					b.ReportMetric(median(raw50), "raw-p50-µs")
					b.ReportMetric(median(raw99), "raw-p99-µs")
					b.ReportMetric(median(same50), "same-p50-µs")
					b.ReportMetric(median(orca50), "orca-p50-µs")
					b.ReportMetric(median(orca99), "orca-p99-µs")
					b.ReportMetric(median(ratio), "orca/raw")
					b.ReportMetric(median(ratioSame), "orca/same")
				})
			}
		}
	}
}

// rate is what a throughput run measured: the slowest member's rate per
// second (messages delivered, or writes applied) and the process's CPU
// time per message or write (user and system, for every member: on a
// shared machine a steadier measure of the cost than the rate).
type rate struct {
	perSecond, cpuMicros float64
	// perMessage is the writes per message of the order that Orca sent
	// (batches: Stats.Batched); 1 for the raw order.
	perMessage float64
	// depth is the raw run's pipeline: the median, over members and
	// samples taken every millisecond, of the messages a member had sent
	// and not yet delivered back to itself.
	depth int
}

// cpuSeconds is the CPU time this process used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// lineCount is a count that one goroutine updates, on a cache line of its
// own: the members' counters side by side in one line would make every
// member's update move the line between the CPUs (a cost the run adds
// to the order's, not the order's own).
type lineCount struct {
	atomic.Uint64
	_ [56]byte
}

// rawRate: every member sends size-byte messages as fast as Send takes
// them for d; the messages every member delivered per second, until the
// slowest had everything.
func rawRate(tb testing.TB, topo *netns.Topology, size int, d time.Duration) rate {
	counts := make([]lineCount, orcaBenchHosts)
	own := make([]lineCount, orcaBenchHosts)   // a member's own messages delivered back
	sends := make([]lineCount, orcaBenchHosts) // a member's messages sent
	groups, stop := rawGroups(tb, topo, reliable.Config{}, func(i int, from frame.MemberID, _ []byte) {
		counts[i].Add(1)
		if from == frame.MemberID(i+1) {
			own[i].Add(1)
		}
	})
	defer stop()
	msg := make([]byte, size)
	start, cpu := time.Now(), cpuSeconds()
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k uint64
			// Published every 16 messages (the depth's samples
			// read it), not by an atomic operation each.
			defer func() { sends[i].Store(k) }()
			for time.Since(start) < d {
				if err := g.Send(context.Background(), msg); err != nil {
					tb.Error(err)
					return
				}
				if k++; k%16 == 0 {
					sends[i].Store(k)
				}
			}
		}()
	}
	var depths []float64
	for time.Since(start) < d {
		time.Sleep(time.Millisecond)
		for i := range groups {
			depths = append(depths, float64(int64(sends[i].Load()-own[i].Load())))
		}
	}
	wg.Wait()
	var total uint64
	for i := range sends {
		total += sends[i].Load()
	}
	r := settle(counts, total, start)
	return rate{perSecond: r, cpuMicros: (cpuSeconds() - cpu) * 1e6 / float64(max(total, 1)), depth: int(median(depths))}
}

// settle waits until every member delivered total messages (at most 5 s)
// and returns the slowest member's rate from start.
func settle(counts []lineCount, total uint64, start time.Time) float64 {
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		done := true
		for i := range counts {
			done = done && counts[i].Load() >= total
		}
		if done {
			break
		}
	}
	elapsed := time.Since(start)
	least := total
	for i := range counts {
		least = min(least, counts[i].Load())
	}
	return float64(least) / elapsed.Seconds()
}

// orcaRate: at every member, callers goroutines write to one object as
// fast as their Calls return, or (callers 0) one goroutine keeps inFlight
// writes started with GoReuse (each in the Pending of the write waited
// for in its place), for d; the writes every member applied per
// second, until the slowest had them all.
func orcaRate(tb testing.TB, topo *netns.Topology, size, callers, inFlight int, d time.Duration) rate {
	nodes, stop := orcaNodes(tb, topo, reliable.Config{})
	defer stop()
	objs := make([]*orca.Object[int64], len(nodes))
	for i, nd := range nodes {
		var err error
		if objs[i], err = orca.New(nd, "sink", sink, 0); err != nil {
			tb.Fatal(err)
		}
	}
	args := make([]byte, max(size-10, 0))
	var sent atomic.Uint64 // added to once by each goroutine, at its end
	start, cpu := time.Now(), cpuSeconds()
	var wg sync.WaitGroup
	for i := range nodes {
		if callers == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var k uint64
				defer func() { sent.Add(k) }()
				ring := make([]*orca.Pending[int64], inFlight)
				for at := 0; time.Since(start) < d; at = (at + 1) % inFlight {
					p := ring[at]
					if p != nil {
						if _, err := p.Wait(context.Background()); err != nil {
							tb.Error(err)
							return
						}
					}
					ring[at] = sinkPut.GoReuse(context.Background(), p, objs[i], args)
					k++
				}
				for _, p := range ring {
					if p != nil {
						p.Wait(context.Background())
					}
				}
			}()
		}
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var k uint64
				defer func() { sent.Add(k) }()
				for time.Since(start) < d {
					if _, err := sinkPut.Call(context.Background(), objs[i], args); err != nil {
						tb.Error(err)
						return
					}
					k++
				}
			}()
		}
	}
	wg.Wait()
	counts := make([]lineCount, len(nodes))
	total := sent.Load()
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		done := true
		for i, nd := range nodes {
			counts[i].Store(nd.Stats().Applied)
			done = done && counts[i].Load() >= total
		}
		if done {
			break
		}
	}
	r := settle(counts, total, start)
	var msgs uint64
	for _, nd := range nodes {
		msgs += nd.Stats().Messages
	}
	return rate{perSecond: r, cpuMicros: (cpuSeconds() - cpu) * 1e6 / float64(max(total, 1)), perMessage: float64(total) / float64(max(msgs, 1))}
}

// BenchmarkOrcaThroughput: writes per second applied by every member,
// three members writing to one object, against the total order's message
// rate with every member sending messages as long (Send as fast as it
// takes them). A write's Call waits for its own application, so one
// caller has one write in flight: each member either starts its writes
// with GoReuse from one goroutine ("go"), or calls them from
// RBCAST_ORCA_CALLERS goroutines (default 64, "callers"). With GoReuse
// it keeps as many writes in flight as the raw run just before had
// messages in flight at a member ("go=raw": the raw sender's pipeline,
// its send window of 64 requests to the sequencer, each of as many
// 64-byte messages as a frame holds, and one request being filled: about
// 1365 at 64 bytes, 65 at 1000), or RBCAST_ORCA_INFLIGHT ("go=N").
// Reported: medians of both rates and of the per-repetition ratio
// (target: ≥ 0.8), of the process's CPU time per message and per write
// and their ratio (raw/orca: the rate ratio the CPU alone would allow,
// steadier than the rates on a shared machine), and of the raw run's
// depth (raw-inflight).
func BenchmarkOrcaThroughput(b *testing.B) {
	netnstest.RequireRoot(b)
	topo := netnstest.Up(b, netns.Options{Hosts: orcaBenchHosts, Prefix: "rborate"})
	d := benchSeconds(b)
	callers := envPositive(b, "RBCAST_ORCA_CALLERS", 64)
	inFlight, goName := 0, "go=raw" // 0: the raw run's depth
	if os.Getenv("RBCAST_ORCA_INFLIGHT") != "" {
		inFlight = envPositive(b, "RBCAST_ORCA_INFLIGHT", 0)
		goName = fmt.Sprintf("go=%d", inFlight)
	}
	type way struct {
		name              string
		callers, inFlight int
	}
	for _, size := range []int{64, 1000} {
		for _, w := range []way{{goName, 0, inFlight}, {fmt.Sprintf("callers=%d", callers), callers, 0}} {
			b.Run(fmt.Sprintf("size=%d/%s", size, w.name), func(b *testing.B) {
				var raw, orc, ratio, rawCPU, orcaCPU, cpuRatio, depth []float64
				for range benchReps(b) {
					var r, o rate
					// Labelled for a CPU profile (-cpuprofile, then
					// pprof -tagfocus run=orca): the groups' event
					// loops start inside and inherit the label.
					pprof.Do(context.Background(), pprof.Labels("run", "raw"), func(context.Context) { r = rawRate(b, topo, size, d) })
					deep := w.inFlight
					if w.callers == 0 && deep == 0 {
						deep = max(r.depth, 1)
					}
					pprof.Do(context.Background(), pprof.Labels("run", "orca"), func(context.Context) {
						o = orcaRate(b, topo, size, w.callers, deep, d)
					})
					raw, orc, ratio = append(raw, r.perSecond), append(orc, o.perSecond), append(ratio, o.perSecond/r.perSecond)
					rawCPU, orcaCPU, cpuRatio = append(rawCPU, r.cpuMicros), append(orcaCPU, o.cpuMicros), append(cpuRatio, r.cpuMicros/o.cpuMicros)
					depth = append(depth, float64(r.depth))
					how := fmt.Sprintf("%d callers a member", w.callers)
					if w.callers == 0 {
						how = fmt.Sprintf("%d in flight a member", deep)
					}
					b.Logf("raw %.0f msgs/s (%.2f µs CPU each, %d in flight a member), orca %.0f writes/s (%.2f µs CPU each, %.1f a message, %s); load %s",
						r.perSecond, r.cpuMicros, r.depth, o.perSecond, o.cpuMicros, o.perMessage, how, loadavg())
				}
				b.ReportMetric(median(raw), "raw-msgs/s")
				b.ReportMetric(median(orc), "orca-writes/s")
				b.ReportMetric(median(ratio), "orca/raw")
				b.ReportMetric(median(rawCPU), "raw-cpu-µs/msg")
				b.ReportMetric(median(orcaCPU), "orca-cpu-µs/write")
				b.ReportMetric(median(cpuRatio), "raw/orca-cpu")
				b.ReportMetric(median(depth), "raw-inflight")
			})
		}
	}
}
