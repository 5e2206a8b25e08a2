package reliable

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkLevels compares the delivery levels of a group with views on
// one netns segment (issue 19's targets: Safe's goodput >= 0.7 x FIFO's
// for large messages, Safe's one-way latency <= FIFO's + one round trip),
// beside the registered PBP2 group (no views) as the reference: per MTU
// (1500, 9000) and level, the goodput of member 0 sending its largest
// messages for RBCAST_BENCH_SECONDS (default 2) to 3 receivers, at the
// slowest receiver until it has everything, and the one-way latency of a
// 64-byte ping-pong between members 0 and 1 (half the round trip;
// RBCAST_LEVELS_PINGS, default 5000). Every member is a goroutine of the
// benchmark process on its host's ring. RBCAST_REPORT_REPS repeats it
// (default 1), the levels interleaved, and reports medians and ranges.
// RBCAST_REPORT_OUT: a file for the markdown table. For profiling one
// cell, RBCAST_LEVELS_MTU (1500 or 9000) and RBCAST_LEVELS (a comma list
// of registered, fifo, agreed, safe, and mixed: an Agreed group whose
// member 0 sends every other message Safe, SendLevel; its latency row is
// the Agreed pings', the Safe pings' logged) narrow the runs;
// RBCAST_LEVELS_PING_MEMBERS (2 to 4, default 2) is the ping-pong's
// group (the members beyond 1 only receive: a Safe ping waits for their
// acks, where in a group of two the reply carries the one it waits
// for); RBCAST_LEVELS_STATS=1
// logs every member's protocol and link counters after each goodput run
// (frames sent by kind: Acks per Data frame) and the process's CPU time
// per MB delivered. Root.
func BenchmarkLevels(b *testing.B) {
	netnstest.RequireRoot(b)
	d := 2 * time.Second
	if s := envInt(b, "RBCAST_BENCH_SECONDS"); s > 0 {
		d = time.Duration(s) * time.Second
	}
	pings := 5000
	if n := envInt(b, "RBCAST_LEVELS_PINGS"); n > 0 {
		pings = n
	}
	reps := 1
	if n := envInt(b, "RBCAST_REPORT_REPS"); n > 0 {
		reps = n
	}
	levels := []string{"registered", "fifo", "agreed", "safe"}
	if v := os.Getenv("RBCAST_LEVELS"); v != "" {
		levels = strings.Split(v, ",")
		for _, l := range levels {
			if !slices.Contains([]string{"registered", "fifo", "agreed", "safe", "mixed"}, l) {
				b.Fatalf("RBCAST_LEVELS: unknown level %q (registered, fifo, agreed, safe, mixed)", l)
			}
		}
	}
	mtus := []int{1500, 9000}
	if n := envInt(b, "RBCAST_LEVELS_MTU"); n > 0 {
		mtus = []int{n}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "Delivery levels: one sender to 3 receivers, %v per goodput run, %d pings, %d repetitions (levels interleaved; medians, ranges in brackets) (load %s)\n\n", d, pings, reps, loadavg())
	fmt.Fprintf(&out, "| MTU | level | goodput MB/s | x fifo | one-way p50 µs | p99 µs | p50 - fifo µs |\n|---|---|---|---|---|---|---|\n")
	for _, mtu := range mtus {
		topo := netnstest.Up(b, netns.Options{Hosts: 4, MTU: mtu, Prefix: fmt.Sprintf("rblv%d", mtu/1000)})
		type res struct{ mbps, p50, p99 []float64 }
		rs := map[string]*res{}
		for _, lvl := range levels {
			rs[lvl] = &res{}
		}
		for rep := range reps {
			for _, lvl := range levels {
				mbps := levelGoodput(b, topo, lvl, d)
				p50, p99 := levelLatency(b, topo, lvl, pings)
				r := rs[lvl]
				r.mbps = append(r.mbps, mbps)
				r.p50 = append(r.p50, float64(p50.Nanoseconds())/1000)
				r.p99 = append(r.p99, float64(p99.Nanoseconds())/1000)
				b.Logf("MTU %d %s, repetition %d: %.1f MB/s, one-way p50 %v p99 %v", mtu, lvl, rep+1, mbps, p50, p99)
			}
		}
		cell := func(v []float64, f string) string {
			if len(v) < 2 {
				return fmt.Sprintf(f, median(v))
			}
			return fmt.Sprintf(f+" ["+f+"–"+f+"]", median(v), slices.Min(v), slices.Max(v))
		}
		f := rs["fifo"]
		if f == nil {
			f = rs[levels[0]]
		}
		for _, lvl := range levels {
			r := rs[lvl]
			fmt.Fprintf(&out, "| %d | %s | %s | %.2f | %s | %s | %+.1f |\n", mtu, lvl, cell(r.mbps, "%.1f"), median(r.mbps)/median(f.mbps),
				cell(r.p50, "%.1f"), cell(r.p99, "%.1f"), median(r.p50)-median(f.p50))
		}
	}
	b.Log("\n" + out.String())
	if p := os.Getenv("RBCAST_REPORT_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// levelGroups starts a group of level lvl on every host of topo (n
// members: the first n hosts).
func levelGroups(tb testing.TB, topo *netns.Topology, n int, lvl string) ([]*Group, func()) {
	links := make([]link.Link, n)
	members := make([]frame.MemberInfo, n)
	for i := range n {
		links[i] = openOnHost(tb, topo.Hosts[i])
		members[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(links[i].HardwareAddr()), Incarnation: 1}
	}
	gid := 3000 + benchGroups.Add(1)
	groups := make([]*Group, n)
	errs := make(chan error, n)
	for i, l := range links {
		go func() {
			cfg := Config{Group: gid, Logger: quiet}
			switch lvl {
			case "registered":
				cfg.Members, cfg.Self, cfg.Mode = members, frame.MemberID(i), PBP2
			default:
				cfg.Views, cfg.Size, cfg.RequestID = true, n, frame.MemberID(i)
				if lvl != "fifo" {
					cfg.Order, cfg.Safe = Total, lvl == "safe" // mixed: Agreed
				}
			}
			g, err := Join(context.Background(), l, cfg)
			groups[i] = g
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
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

// levelGoodput: member 0 sends its largest messages for d; MB/s at the
// slowest receiver until it has everything (10 s at most).
func levelGoodput(tb testing.TB, topo *netns.Topology, lvl string, d time.Duration) float64 {
	groups, stop := levelGroups(tb, topo, len(topo.Hosts), lvl)
	defer stop()
	size := groups[0].MaxMessage()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make([]atomic.Uint64, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() { // every member reads: under total order member 0 gets its own too
			defer wg.Done()
			buf := make([]byte, 0, 65536)
			for {
				from, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				if from == 0 && i > 0 {
					got[i].Add(uint64(len(data)))
				}
			}
		}()
	}
	msg := make([]byte, size)
	cpu0 := processCPU()
	start := time.Now()
	var sent uint64
	for k := 0; time.Since(start) < d; k++ {
		if err := groups[0].SendLevel(ctx, mixedLevel(lvl, k), msg); err != nil {
			tb.Fatal(err)
		}
		sent += uint64(size)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		slowest := sent
		for i := 1; i < len(groups); i++ {
			slowest = min(slowest, got[i].Load())
		}
		if slowest == sent || time.Now().After(deadline) {
			el := time.Since(start)
			if os.Getenv("RBCAST_LEVELS_STATS") != "" {
				tb.Logf("%s: %.0f µs of the process's CPU per MB delivered (user and system, all members; %.1f MB/s)", lvl,
					float64((processCPU()-cpu0).Microseconds())/(float64(slowest)/1e6), float64(slowest)/el.Seconds()/1e6)
				for i, g := range groups {
					s := g.Stats()
					tb.Logf("%s member %d: %+v link %+v held %d", lvl, i, s.Protocol.Detail, s.Link, s.HeldData)
				}
			}
			cancel()
			wg.Wait()
			return float64(slowest) / el.Seconds() / 1e6
		}
		time.Sleep(200 * time.Microsecond) // polls the receivers' counts; the result is timed by the clock, not this
	}
}

// mixedLevel is message k's level: under mixed every other one Safe,
// else the group's.
func mixedLevel(lvl string, k int) Level {
	if lvl == "mixed" && k%2 == 1 {
		return LevelSafe
	}
	return LevelGroup
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// levelLatency: member 1 sends back every 64-byte message of member 0;
// half the round trip's p50 and p99 (n round trips after 100 warm-up).
func levelLatency(tb testing.TB, topo *netns.Topology, lvl string, n int) (p50, p99 time.Duration) {
	members := 2
	if k := envInt(tb, "RBCAST_LEVELS_PING_MEMBERS"); k > 0 {
		members = min(max(k, 2), len(topo.Hosts))
	}
	groups, stop := levelGroups(tb, topo, members, lvl)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, g := range groups[2:] {
		go func() {
			buf := make([]byte, 0, 2048)
			for {
				if _, _, err := g.RecvAppend(ctx, buf[:0]); err != nil {
					return
				}
			}
		}()
	}
	go func() {
		buf := make([]byte, 0, 2048)
		for {
			from, data, err := groups[1].RecvAppend(ctx, buf[:0])
			if err != nil {
				return
			}
			if from == 0 && groups[1].Send(ctx, data) != nil {
				return
			}
		}
	}()
	msg := make([]byte, 64)
	buf := make([]byte, 0, 2048)
	rtts := make([]time.Duration, 0, n)
	var safe []time.Duration // under mixed: the Safe pings' (rtts: the Agreed ones')
	for i := range n + 100 {
		t0 := time.Now()
		if err := groups[0].SendLevel(ctx, mixedLevel(lvl, i), msg); err != nil {
			tb.Fatal(err)
		}
		for {
			from, _, err := groups[0].RecvAppend(ctx, buf[:0])
			if err != nil {
				tb.Fatal(err)
			}
			if from == 1 {
				break // under total order its own comes back first
			}
		}
		switch {
		case i < 100:
		case mixedLevel(lvl, i) == LevelSafe:
			safe = append(safe, time.Since(t0))
		default:
			rtts = append(rtts, time.Since(t0))
		}
	}
	if len(safe) > 0 {
		slices.Sort(safe)
		tb.Logf("mixed: the Safe pings' one-way p50 %v p99 %v (%d pings, a group of %d; the Agreed ones' in the table)", safe[len(safe)/2]/2, safe[len(safe)*99/100]/2, len(safe), members)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2] / 2, rtts[len(rtts)*99/100] / 2
}
