package reliable

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Order Total against PBP2 FIFO on the 3-host netns topology the peers
// (corosync CPG, JGroups) are measured on. Like the other netns
// benchmarks each sub-benchmark measures for a fixed time, so run once
// per repetition:
//
//	RBCAST_BENCH_REPS=5 go test -run '^$' -bench 'Total' -benchtime 1x ./reliable/
//
// docs/benchmarks.md ("Total order against corosync and JGroups") has the
// table; its earlier runs are in docs/benchmarks-history.md ("Sequencer
// (total order)").

const totalBenchHosts = 3

// orderedOpts is one throughput run.
type orderedOpts struct {
	order   Order
	method  Method
	senders int // members 1.. send (member 0 is the sequencer); 3 = all
	size    int
	// deliver: members take messages through Config.Deliver (views, no
	// copy) instead of RecvAppend (a copy into the receive queue and one
	// out of it).
	deliver bool
	safe    Resilience // Order Total: SafeMajority (default) or SafeSequencer
}

func (o orderedOpts) name() string {
	d := ""
	if o.deliver {
		d = "/deliver"
	}
	if o.order == FIFO {
		return fmt.Sprintf("fifo-pbp2/senders=%d/size=%d%s", o.senders, o.size, d)
	}
	if o.safe == SafeSequencer {
		d += "/seqonly"
	}
	return fmt.Sprintf("total-%v/senders=%d/size=%d%s", o.method, o.senders, o.size, d)
}

// senderIndexes: one sender is member 1, not the sequencer (its messages
// take the request's extra hop); all senders are every member.
func (o orderedOpts) senderIndexes() []int {
	if o.senders == 1 {
		return []int{1}
	}
	s := make([]int, o.senders)
	for i := range s {
		s[i] = i
	}
	return s
}

// benchGroupsOn joins a fresh group with static members on every host;
// each, if set, adjusts member i's Config.
func benchGroupsOn(tb testing.TB, topo *netns.Topology, base Config, each ...func(i int, c *Config)) ([]*Group, func()) {
	links := make([]link.Link, len(topo.Hosts))
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		links[i] = openOnHost(tb, h)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	gid := 2000 + benchGroups.Add(1)
	groups := make([]*Group, len(links))
	for i, l := range links {
		cfg := base
		cfg.Group, cfg.Members, cfg.Self, cfg.Logger = gid, members, frame.MemberID(i), quiet
		for _, f := range each {
			f(i, &cfg)
		}
		g, err := Join(context.Background(), l, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		groups[i] = g
	}
	return groups, func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
		for _, l := range links {
			l.Close()
		}
	}
}

// runOrdered has the senders send o.size-byte messages as fast as Send
// accepts for d while every member receives with RecvAppend; it returns
// the messages every member delivered (under FIFO a member's own count as
// delivered: FIFO does not hand them back) per second, from the start
// until the slowest member had everything.
func runOrdered(tb testing.TB, topo *netns.Topology, o orderedOpts, d time.Duration) (msgsPerSec float64, sender Stats) {
	base := Config{Order: o.order}
	if o.order == Total {
		base.Method, base.Resilience = o.method, o.safe
	}
	counts := make([]atomic.Uint64, totalBenchHosts)
	groups, stop := benchGroupsOn(tb, topo, base, func(i int, c *Config) {
		if o.deliver {
			c.Deliver = func(frame.MemberID, []byte) { counts[i].Add(1) }
		}
	})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i, g := range groups {
		if o.deliver {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 65536)
			for {
				_, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				buf = data
				counts[i].Add(1)
			}
		}()
	}
	senders := o.senderIndexes()
	sent := make([]uint64, len(groups))
	msg := make([]byte, o.size)
	start := time.Now()
	var swg sync.WaitGroup
	for _, s := range senders {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for time.Since(start) < d {
				if err := groups[s].Send(ctx, msg); err != nil {
					tb.Error(err)
					return
				}
				sent[s]++
			}
		}()
	}
	swg.Wait()
	var total uint64
	for _, n := range sent {
		total += n
	}
	delivered := func(i int) uint64 {
		if o.order == FIFO {
			return counts[i].Load() + sent[i]
		}
		return counts[i].Load()
	}
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		done := true
		for i := range groups {
			done = done && delivered(i) >= total
		}
		if done {
			break
		}
	}
	elapsed := time.Since(start)
	least := total
	for i := range groups {
		least = min(least, delivered(i))
	}
	sender = groups[senders[0]].Stats()
	if o.order == Total && envBool(tb, "RBCAST_BENCH_TRACE") {
		for i, g := range groups {
			st := g.Stats()
			t := totalStats(st)
			tb.Logf("member %d: proposed %d requests %d resent %d sequenced %d data %d accepts %d/%d frames dupreq %d histfull %d statusreq %d replies %d retx asked %d answered %d matched %d dups %d kernel drops %d held %d",
				i, t.MessagesProposed, t.RequestsSent, t.RequestsResent, t.Sequenced, t.DataSent, t.AcceptsSent, t.AcceptFrames, t.DuplicateRequests, t.HistoryFull,
				t.StatusRequests, t.StatusReplies, t.RetransmitsAsked, t.RetransmitsAnswered, t.PayloadsMatched, t.Duplicates, st.Link.KernelDrops, st.HeldData)
		}
	}
	cancel()
	wg.Wait()
	return float64(least) / elapsed.Seconds(), sender
}

// benchReps is RBCAST_BENCH_REPS, the repetitions of each group of
// runs (default 3).
func benchReps() int {
	if n := envInt(nil, "RBCAST_BENCH_REPS"); n > 0 {
		return n
	}
	return 3
}

// BenchmarkTotalThroughput: messages/s every member delivers, Order Total
// with each method, and PBP2 FIFO, on 3 hosts; 1 sender (not the
// sequencer) or all 3; 64 to 1000 bytes. The machine is shared, so each
// sub-benchmark runs FIFO and the three methods in turn, RBCAST_BENCH_REPS
// times (default 3), and reports the medians and the median of each
// repetition's total/FIFO ratio: runs a few seconds apart see about the
// same load.
func BenchmarkTotalThroughput(b *testing.B) {
	netnstest.RequireRoot(b)
	d := benchDuration()
	topo := netnstest.Up(b, netns.Options{Hosts: totalBenchHosts})
	type point struct {
		senders, size int
		deliver       bool
	}
	var points []point
	for _, senders := range []int{1, 3} {
		for _, size := range []int{64, 256, 512, 1000} {
			if senders == 1 && (size == 256 || size == 512) {
				continue
			}
			points = append(points, point{senders, size, false})
		}
	}
	// Without the receive queue's two copies per message, which Total
	// pays for the sender's own messages too.
	points = append(points, point{3, 64, true}, point{3, 1000, true})
	for _, pt := range points {
		name := fmt.Sprintf("senders=%d/size=%d", pt.senders, pt.size)
		if pt.deliver {
			name += "/deliver"
		}
		b.Run(name, func(b *testing.B) {
			runs := []orderedOpts{{order: FIFO, senders: pt.senders, size: pt.size, deliver: pt.deliver}}
			for _, m := range []Method{Method1, Method2, Hybrid} {
				runs = append(runs, orderedOpts{order: Total, method: m, senders: pt.senders, size: pt.size, deliver: pt.deliver})
			}
			// The sequencer-only resilience (no acknowledgement round).
			runs = append(runs, orderedOpts{order: Total, method: Hybrid, senders: pt.senders, size: pt.size, deliver: pt.deliver, safe: SafeSequencer})
			rates := make([][]float64, len(runs))
			ratios := make([][]float64, len(runs))
			for range benchReps() {
				var fifo float64
				for k, o := range runs {
					rate, _ := runOrdered(b, topo, o, d)
					rates[k] = append(rates[k], rate)
					if k == 0 {
						fifo = rate
					} else {
						ratios[k] = append(ratios[k], rate/fifo)
					}
				}
				b.Logf("load %s", loadavg())
			}
			for k, o := range runs {
				unit := "fifo"
				if o.order == Total {
					unit = o.method.String()
					if o.safe == SafeSequencer {
						unit += "-seqonly"
					}
				}
				b.ReportMetric(median(rates[k]), unit+"-msgs/s")
				if k > 0 {
					b.ReportMetric(median(ratios[k]), unit+"/fifo")
				}
				b.Logf("%s: msgs/s %.0f (runs %.0f), /fifo %.2f", o.name(), median(rates[k]), rates[k], ratios[k])
			}
		})
	}
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

// runSelfLatency: with one message in flight, the time from Send to the
// sender's own delivery of it (Order Total), or (FIFO, which does not
// hand a member its own messages) to its delivery at member 0, told to
// the sender through a channel.
func runSelfLatency(tb testing.TB, topo *netns.Topology, o orderedOpts, sender int, n int) []time.Duration {
	base := Config{Order: o.order}
	if o.order == Total {
		base.Method, base.Resilience = o.method, o.safe
	}
	groups, stop := benchGroupsOn(tb, topo, base)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i, g := range groups {
		if i == sender && o.order == Total {
			continue // the sender reads its own
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 65536)
			for {
				_, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				buf = data
				if i == 0 && o.order == FIFO {
					got <- struct{}{}
				}
			}
		}()
	}
	g := groups[sender]
	msg := make([]byte, o.size)
	buf := make([]byte, 0, 65536)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := g.Send(ctx, msg); err != nil {
			tb.Fatal(err)
		}
		if o.order == FIFO {
			<-got
		} else {
			for {
				from, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					tb.Fatal(err)
				}
				buf = data
				if from == g.Self() {
					break
				}
			}
		}
		lat = append(lat, time.Since(t0))
	}
	cancel()
	wg.Wait()
	return lat
}

// BenchmarkTotalLatency: self-delivery latency with one message in flight
// (p50 and p99 over 5000 messages), at an ordinary member (request to the
// sequencer and back) and at the sequencer itself; FIFO: one-way latency
// to another member.
func BenchmarkTotalLatency(b *testing.B) {
	netnstest.RequireRoot(b)
	topo := netnstest.Up(b, netns.Options{Hosts: totalBenchHosts})
	const n = 5000
	for _, size := range []int{64, 1000} {
		type run struct {
			name   string
			o      orderedOpts
			sender int
		}
		runs := []run{{fmt.Sprintf("fifo-pbp2/one-way/size=%d", size), orderedOpts{order: FIFO, size: size}, 1}}
		for _, m := range []Method{Method1, Method2, Hybrid} {
			runs = append(runs, run{fmt.Sprintf("total-%v/member/size=%d", m, size), orderedOpts{order: Total, method: m, size: size}, 1})
		}
		runs = append(runs, run{fmt.Sprintf("total-hybrid-seqonly/member/size=%d", size), orderedOpts{order: Total, method: Hybrid, size: size, safe: SafeSequencer}, 1})
		runs = append(runs, run{fmt.Sprintf("total-hybrid/sequencer/size=%d", size), orderedOpts{order: Total, method: Hybrid, size: size}, 0})
		runs = append(runs, run{fmt.Sprintf("total-hybrid-seqonly/sequencer/size=%d", size), orderedOpts{order: Total, method: Hybrid, size: size, safe: SafeSequencer}, 0})
		for _, r := range runs {
			b.Run(r.name, func(b *testing.B) {
				lat := runSelfLatency(b, topo, r.o, r.sender, n)
				slices.Sort(lat)
				p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
				b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
				b.Logf("load %s", loadavg())
			})
		}
	}
}
