package reliable

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkReport produces the PBP tables of docs/benchmarks.md: the
// thesis's three experiments (chapter 4: one-to-all, all-to-all, latency)
// on the netns bridge, for PBP2, PBP1, TCP fan-out (one connection per
// receiver, the same bytes; internal/linkbench.RunTCPFanout) and the raw
// ring ceiling (internal/linkbench, ring-v2, the link PBP runs on): one-to-all
// and all-to-all at MTU 1500 and 9000 with 0, 1 and 5% loss, 64-byte
// messages likewise, the window table at MTU 1500 with 0, 1 and 5%, and
// latency on the idle bridge (MTU 1500, no loss). Every cell runs all its systems back
// to back on the same topology, RBCAST_REPORT_REPS times (default 3), and
// reports medians, so ratios compare numbers taken under the same load.
// Run it once, as root (make bench-net):
//
//	go test -run '^$' -bench '^BenchmarkReport$' -benchtime 1x -timeout 120m ./reliable   # about 30 min
//
// RBCAST_BENCH_SECONDS: sending time per run (default 1).
// RBCAST_REPORT_PARTS: comma-separated subset of one,small,window,all,latency.
// RBCAST_REPORT_RX: receivers of the one-to-all parts (default 1,3,7).
// RBCAST_REPORT_WINDOWS: windows of the window part (default 16,48,128,256).
// RBCAST_REPORT_PROCS=1: one-to-all receivers (raw ring, PBP) as processes
// of their own in their namespaces instead of goroutines of this process.
// RBCAST_REPORT_OUT: also write the tables to this file. cmd/benchplot
// (make plots) draws docs/benchmarks.md's figures from such files: it
// finds the tables by their headings and columns, so a change to those is
// a change to internal/benchplot too.
// RBCAST_BENCH_SPIN: every ring link polls its receive ring this long
// before sleeping (ring.Config.RxSpin), the raw receivers' too; 0: never;
// unset: ring.DefaultRxSpin.
//
// Everything runs in this one process (but for RBCAST_REPORT_PROCS=1's
// receivers): every member of a group, every raw receiver and every TCP
// endpoint is a goroutine with its socket in
// its host's namespace, so all systems share the machine's cores the same
// way.
func BenchmarkReport(b *testing.B) {
	netnstest.RequireRoot(b)
	d := benchDuration()
	reps := 3
	if n := envInt(b, "RBCAST_REPORT_REPS"); n > 0 {
		reps = n
	}
	parts := "one,small,window,all,latency"
	if p := os.Getenv("RBCAST_REPORT_PARTS"); p != "" {
		parts = p
	}
	rxs := []int{1, 3, 7}
	if s := os.Getenv("RBCAST_REPORT_RX"); s != "" {
		var err error
		if rxs, err = linkbench.Ints(s); err != nil {
			b.Fatalf("RBCAST_REPORT_RX=%q: %v; want receiver counts like 1,3,7", s, err)
		}
	}
	var out io.Writer = os.Stdout
	if p := os.Getenv("RBCAST_REPORT_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		out = io.MultiWriter(os.Stdout, f)
	}
	r := &reporter{b: b, d: d, reps: reps, out: out, procs: envBool(b, "RBCAST_REPORT_PROCS")}
	arr := "every receiver of one-to-all runs (raw ring, PBP) is a process of its own in its namespace; all-to-all members, TCP endpoints and the senders are goroutines of the benchmark process"
	if !r.procs {
		arr = "every endpoint is a goroutine of the benchmark process"
	}
	switch spin := benchSpin(b); {
	case spin < 0:
		arr += "; no ring link polls its receive ring before sleeping (RBCAST_BENCH_SPIN=0)"
	case spin > 0:
		arr += fmt.Sprintf("; every ring link (PBP's and the raw receivers') polls its receive ring %v before sleeping (RBCAST_BENCH_SPIN)", spin)
	default:
		arr += fmt.Sprintf("; every ring link (PBP's and the raw receivers') polls its receive ring %v before sleeping (ring.DefaultRxSpin)", ring.DefaultRxSpin)
	}
	r.printf("BenchmarkReport: %v per run, %d repetitions, medians (range in brackets); %s; load average at start %s\n\n", d, reps, arr, loadavg())
	r.printf("Machine: %s\n\n", machine())
	for _, p := range strings.Split(parts, ",") {
		switch p {
		case "one":
			r.oneToAll(rxs)
		case "small":
			r.small(rxs)
		case "window":
			r.windows(rxs)
		case "all":
			r.allToAll()
		case "latency":
			r.latency()
		default:
			b.Fatalf("RBCAST_REPORT_PARTS: unknown part %q (have one,small,window,all,latency)", p)
		}
	}
	r.printf("load average at end %s; PBP runs with a receiver still missing data 5 s after sending ended: %d\n", loadavg(), r.stalls)
}

type reporter struct {
	b      *testing.B
	d      time.Duration
	reps   int
	out    io.Writer
	topo   int
	stalls int  // PBP runs in which a receiver missed data 5 s after the end
	procs  bool // one-to-all receivers (PBP and raw) as processes
}

func (r *reporter) printf(format string, args ...any) {
	fmt.Fprintf(r.out, format, args...)
}

// up builds a topology with IPv4 addresses (for TCP) named rbe…
func (r *reporter) up(hosts, mtu int) *netns.Topology {
	r.topo++
	topo, err := netns.New(netns.Options{Hosts: hosts, MTU: mtu, Addresses: true, Prefix: fmt.Sprintf("rbe%04d%d", os.Getpid()%10000, r.topo)})
	if err != nil {
		r.b.Fatal(err)
	}
	r.b.Cleanup(func() { topo.Close() })
	return topo
}

// setLoss puts loss on every host's inbound frames (all EtherTypes, so
// TCP and PBP see the same segment), skipping host 0 unless all.
func (r *reporter) setLoss(topo *netns.Topology, pct float64, all bool) {
	for _, h := range topo.Hosts {
		if h.Index == 0 && !all {
			continue
		}
		if err := h.SetLoss(netns.In, netns.Loss{Percent: pct}); err != nil {
			r.b.Fatal(err)
		}
	}
}

// samples collects one number per repetition.
type samples []float64

func (s samples) median() float64 { return median(s) }

// fmtMB formats a median with its range.
func (s samples) fmt(scale float64, unit string) string {
	if len(s) == 0 {
		return "–"
	}
	m := s.median() / scale
	if len(s) == 1 {
		return fmt.Sprintf("%s%s", num(m), unit)
	}
	return fmt.Sprintf("%s%s (%s–%s)", num(m), unit, num(slices.Min(s)/scale), num(slices.Max(s)/scale))
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func ratio(a, b samples) string {
	if b.median() == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.median()/b.median())
}

func pct(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

func (r *reporter) raw(topo *netns.Topology, overlap, work bool) (float64, time.Duration) {
	res, err := linkbench.RunThroughputOn(topo, linkbench.Options{Backend: "ring-v2", Duration: r.d, Processes: r.procs, Overlap: overlap, Work: work, RxSpin: benchSpin(r.b)})
	if err != nil {
		r.b.Fatal(err)
	}
	lo := res.Receivers[0].MBps(res.Elapsed)
	for i, x := range res.Receivers {
		if x.Corrupt > 0 {
			// Work counts them in Frames and Bytes too: the cell would
			// include frames no protocol could have delivered.
			r.b.Fatalf("raw staged +work: receiver %d: %d frames failed their CRC32C", i+1, x.Corrupt)
		}
		lo = min(lo, x.MBps(res.Elapsed))
	}
	return lo, res.Elapsed
}

// rawAllToAll is the raw all-to-all ceiling: the members' mean rate of
// whole frames received from all the others (linkbench.AllToAll.MeanMBps
// says why not the slowest's).
func (r *reporter) rawAllToAll(topo *netns.Topology) float64 {
	res, err := linkbench.RunAllToAllOn(topo, linkbench.Options{Backend: "ring-v2", Duration: r.d, RxSpin: benchSpin(r.b)})
	if err != nil {
		r.b.Fatal(err)
	}
	return res.MeanMBps()
}

func (r *reporter) tcp(topo *netns.Topology, senders int) float64 {
	m, _ := r.tcpTimed(topo, senders)
	return m
}

func (r *reporter) tcpTimed(topo *netns.Topology, senders int) (float64, time.Duration) {
	res, err := linkbench.RunTCPFanout(topo, linkbench.TCPOptions{Senders: senders, Duration: r.d})
	if err != nil {
		r.b.Fatal(err)
	}
	return res.MinMBps(), res.Elapsed
}

// pbp runs PBP; a receiver that still misses data 5 s after the sender
// stopped is reported (it never happens unless something stalls).
func (r *reporter) pbp(topo *netns.Topology, o goodputOpts) goodputResult {
	o.procs = r.procs
	g := runGoodputOn(r.b, topo, o, r.d)
	if g.short > 0 {
		r.stalls++
		r.printf("<!-- STALL: %+v: a receiver still missed %d bytes 5 s after sending ended; the sender's membership events: %v -->\n", o, g.short, g.sender.Events)
	}
	return g
}

func mbps(g goodputResult) float64 { return float64(g.bytes) / g.elapsed.Seconds() / 1e6 }
func msgps(g goodputResult) float64 {
	return float64(g.msgs) / g.elapsed.Seconds()
}

// oneToAll: fig 4.1–4.2, largest messages.
func (r *reporter) oneToAll(rxs []int) {
	var cpuRows []string
	r.printf("### One-to-all, largest messages (MB/s at the slowest receiver)\n\n")
	r.printf("raw = ring-v2 frames of MTU size, whole frames counted, sent by one goroutine that fills the TX ring and has the kernel transmit it in turn; raw staged = the same with a second goroutine kicking the kernel while the first fills (ring Stage/Kick, as the reliable runtime sends since 2026-11-22); raw staged +work = raw staged touching every frame as little as a reliable checksummed protocol must (linkbench Options.Work: the sender copies the payload into a history slot and writes a CRC32C, each receiver checks it and copies the payload out; not part of the ceiling); the ceiling is the higher of the raw and raw staged medians, and PBP%%/raw ratios are against it. PBP and TCP count payload bytes. Loss is on every receiver's inbound frames. gap = longest time any receiver went without a delivery while the sender sent (max over repetitions).\n\n")
	r.printf("PBP2, PBP1: receivers use RecvAppend (a message of 1 KB or more is copied once, from the ring, when taken before the loop's next turn; smaller ones are copied into the receive queue and out); PBP2 Deliver: receivers use Config.Deliver (views into the ring, no copy).\n\n")
	r.printf("| rx | MTU | loss | raw ring | raw staged | raw staged +work | PBP2 | PBP2/raw | PBP2 vs its lossless | PBP2 gap | PBP2 Deliver | Deliver/raw | PBP1 | PBP1/raw | TCP fan-out | PBP2/TCP | PBP2 Deliver/TCP | PBP1/TCP |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, mtu := range []int{1500, 9000} {
		for _, rx := range rxs {
			topo := r.up(rx+1, mtu)
			var lossless float64
			for _, loss := range []float64{0, 1, 5} {
				r.setLoss(topo, loss, false)
				var raw, raws, raww, p2, p2d, p1, tcp samples
				var craw, craws, craww, cp2, cp2d, cp1, ctcp samples
				var gap time.Duration
				for rep := range r.reps {
					fmt.Fprintf(os.Stderr, "report: one-to-all rx=%d mtu=%d loss=%g rep %d/%d (load %s)\n", rx, mtu, loss, rep+1, r.reps, loadavg())
					m, c := cpuPerGB(rx, func() (float64, time.Duration) { return r.raw(topo, false, false) })
					raw, craw = append(raw, m), append(craw, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) { return r.raw(topo, true, false) })
					raws, craws = append(raws, m), append(craws, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) { return r.raw(topo, true, true) })
					raww, craww = append(raww, m), append(craww, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) {
						g := r.pbp(topo, goodputOpts{mode: PBP2})
						gap = max(gap, g.maxGap)
						return mbps(g), g.elapsed
					})
					p2, cp2 = append(p2, m), append(cp2, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) {
						g := r.pbp(topo, goodputOpts{mode: PBP2, deliver: true})
						return mbps(g), g.elapsed
					})
					p2d, cp2d = append(p2d, m), append(cp2d, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) {
						g := r.pbp(topo, goodputOpts{mode: PBP1})
						return mbps(g), g.elapsed
					})
					p1, cp1 = append(p1, m), append(cp1, c)
					m, c = cpuPerGB(rx, func() (float64, time.Duration) { return r.tcpTimed(topo, 1) })
					tcp, ctcp = append(tcp, m), append(ctcp, c)
				}
				if loss == 0 {
					lossless = p2.median()
				}
				ceil := max(raw.median(), raws.median())
				r.printf("| %d | %d | %g%% | %s | %s | %s | %s | %s | %s | %v | %s | %s | %s | %s | %s | %s | %s | %s |\n", rx, mtu, loss,
					raw.fmt(1, ""), raws.fmt(1, ""), raww.fmt(1, ""), p2.fmt(1, ""), pct(p2.median(), ceil), pct(p2.median(), lossless), gap.Round(100*time.Microsecond),
					p2d.fmt(1, ""), pct(p2d.median(), ceil),
					p1.fmt(1, ""), pct(p1.median(), ceil), tcp.fmt(1, ""),
					ratio(p2, tcp), ratio(p2d, tcp), ratio(p1, tcp))
				cpuRows = append(cpuRows, fmt.Sprintf("| %d | %d | %g%% | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", rx, mtu, loss, craw.median(), craws.median(), craww.median(), cp2.median(), cp2d.median(), cp1.median(), ctcp.median()))
			}
			topo.Close()
		}
	}
	r.printf("\nCPU-seconds the benchmark process and its receiver processes spent per GB delivered (all receivers together; medians), from the same runs. Kernel work done in softirq threads (ksoftirqd) is not counted.\n\n")
	r.printf("| rx | MTU | loss | raw ring | raw staged | raw staged +work | PBP2 | PBP2 Deliver | PBP1 | TCP fan-out |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range cpuRows {
		r.printf("%s", row)
	}
	r.printf("\n")
}

// small: 64-byte messages (fig 4.1's small-message curve), MTU 1500 and
// 9000 (a jumbo frame bundles about 140 of them).
func (r *reporter) small(rxs []int) {
	r.printf("### One-to-all, 64-byte messages (messages/s at the slowest receiver)\n\n")
	r.printf("TCP is a byte stream: 64-byte messages written through a buffer leave in 64 KiB writes, so its rate is its MB/s ÷ 64 (the largest-message table's TCP column, measured here again).\n\n")
	r.printf("| rx | MTU | loss | PBP2 | PBP2 BundleDelay 100µs | PBP1 | TCP fan-out (bytes ÷ 64) |\n|---|---|---|---|---|---|---|\n")
	for _, mtu := range []int{1500, 9000} {
		for _, rx := range rxs {
			r.smallCells(rx, mtu)
		}
	}
	r.printf("\n")
}

func (r *reporter) smallCells(rx, mtu int) {
	topo := r.up(rx+1, mtu)
	defer topo.Close()
	for _, loss := range []float64{0, 1, 5} {
		r.setLoss(topo, loss, false)
		var p2, p2b, p1, tcp samples
		for rep := range r.reps {
			fmt.Fprintf(os.Stderr, "report: small rx=%d mtu=%d loss=%g rep %d/%d (load %s)\n", rx, mtu, loss, rep+1, r.reps, loadavg())
			p2 = append(p2, msgps(r.pbp(topo, goodputOpts{mode: PBP2, size: 64})))
			p2b = append(p2b, msgps(r.pbp(topo, goodputOpts{mode: PBP2, size: 64, bundleDelay: 100 * time.Microsecond})))
			p1 = append(p1, msgps(r.pbp(topo, goodputOpts{mode: PBP1, size: 64})))
			tcp = append(tcp, r.tcp(topo, 1)*1e6/64)
		}
		r.printf("| %d | %d | %g%% | %s | %s | %s | %s |\n", rx, mtu, loss, p2.fmt(1e6, " M"), p2b.fmt(1e6, " M"), p1.fmt(1e6, " M"), tcp.fmt(1e6, " M"))
	}
}

// windows: fig 4.3, throughput against the window, MTU 1500: the
// thesis's 16, 48 and 128, and PBP2's default, 256.
// RBCAST_REPORT_WINDOWS overrides the windows (default 16,48,128,256).
func (r *reporter) windows(rxs []int) {
	ws := []int{16, 48, 128, 256}
	if s := os.Getenv("RBCAST_REPORT_WINDOWS"); s != "" {
		var err error
		if ws, err = linkbench.Ints(s); err != nil {
			r.b.Fatalf("RBCAST_REPORT_WINDOWS=%q: %v; want windows like 16,48,128", s, err)
		}
	}
	r.printf("### Window size (fig. 4.3), largest messages, MTU 1500 (MB/s at the slowest receiver)\n\n")
	r.printf("| rx | loss |")
	for _, mode := range []string{"PBP2", "PBP1"} {
		for _, w := range ws {
			r.printf(" %s w=%d |", mode, w)
		}
	}
	r.printf("\n|---|---|%s\n", strings.Repeat("---|", 2*len(ws)))
	for _, rx := range rxs {
		topo := r.up(rx+1, 1500)
		for _, loss := range []float64{0, 1, 5} {
			r.setLoss(topo, loss, false)
			res := make([]samples, 2*len(ws))
			for rep := range r.reps {
				fmt.Fprintf(os.Stderr, "report: windows rx=%d loss=%g rep %d/%d (load %s)\n", rx, loss, rep+1, r.reps, loadavg())
				for mi, mode := range []Mode{PBP2, PBP1} {
					for wi, w := range ws {
						res[mi*len(ws)+wi] = append(res[mi*len(ws)+wi], mbps(r.pbp(topo, goodputOpts{mode: mode, window: w})))
					}
				}
			}
			r.printf("| %d | %g%% |", rx, loss)
			for _, s := range res {
				r.printf(" %s |", s.fmt(1, ""))
			}
			r.printf("\n")
		}
		topo.Close()
	}
	r.printf("\n")
}

// allToAll: every member sends; the thesis's second experiment.
func (r *reporter) allToAll() {
	r.printf("### All-to-all, largest messages (MB/s received by the slowest member, from all others together)\n\n")
	r.printf("Every member sends as fast as it can; TCP is a full mesh (one connection per ordered pair). raw ring = every member blasts MTU-sized ring-v2 frames with no flow control and counts whole frames from all others (linkbench.RunAllToAllOn), the members' mean (unlike a protocol's, raw senders do not keep in step, so the slowest receiver is the host whose own sender got the most CPU): what the kernel and the rings could take while everyone sent; PBP2/raw is against it. Loss is on every member's inbound frames.\n\n")
	r.printf("| N | MTU | loss | raw ring | PBP2 | PBP2/raw | PBP1 | TCP mesh | PBP2/TCP |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, mtu := range []int{1500, 9000} {
		for _, n := range []int{2, 4, 8} {
			topo := r.up(n, mtu)
			for _, loss := range []float64{0, 1, 5} {
				r.setLoss(topo, loss, true)
				var raw, p2, p1, tcp samples
				for rep := range r.reps {
					fmt.Fprintf(os.Stderr, "report: all-to-all N=%d mtu=%d loss=%g rep %d/%d (load %s)\n", n, mtu, loss, rep+1, r.reps, loadavg())
					raw = append(raw, r.rawAllToAll(topo))
					p2 = append(p2, mbps(r.pbp(topo, goodputOpts{mode: PBP2, allSend: true})))
					p1 = append(p1, mbps(r.pbp(topo, goodputOpts{mode: PBP1, allSend: true})))
					tcp = append(tcp, r.tcp(topo, n))
				}
				r.printf("| %d | %d | %g%% | %s | %s | %s | %s | %s | %.2f× |\n", n, mtu, loss, raw.fmt(1, ""), p2.fmt(1, ""), pct(p2.median(), raw.median()), p1.fmt(1, ""), tcp.fmt(1, ""), p2.median()/tcp.median())
			}
			topo.Close()
		}
	}
	r.printf("\n")
}

// latency: one 64-byte message in flight between two hosts.
func (r *reporter) latency() {
	r.printf("### Latency, one 64-byte message in flight between two hosts (one way = half the round trip, µs)\n\n")
	r.printf("| system | p50 | p99 |\n|---|---|---|\n")
	topo := r.up(2, 1500)
	defer topo.Close()
	const n = 20000
	var p50s, p99s [4]samples
	for rep := range r.reps {
		fmt.Fprintf(os.Stderr, "report: latency rep %d/%d (load %s)\n", rep+1, r.reps, loadavg())
		l, err := linkbench.RunLatencyOn(topo, "ring-v2", n, benchSpin(r.b))
		if err != nil {
			r.b.Fatal(err)
		}
		p50s[0], p99s[0] = append(p50s[0], us(l.P50)), append(p99s[0], us(l.P99))
		for i, mode := range []Mode{PBP2, PBP1} {
			p50, p99 := runLatencyOn(r.b, topo, mode, n)
			p50s[1+i], p99s[1+i] = append(p50s[1+i], us(p50)), append(p99s[1+i], us(p99))
		}
		t, err := linkbench.RunTCPLatency(topo, 64, n)
		if err != nil {
			r.b.Fatal(err)
		}
		p50s[3], p99s[3] = append(p50s[3], us(t.P50)), append(p99s[3], us(t.P99))
	}
	for i, name := range []string{"raw ring-v2 (64 B frame)", "PBP2", "PBP1", "TCP"} {
		r.printf("| %s | %s | %s |\n", name, p50s[i].fmt(1, ""), p99s[i].fmt(1, ""))
	}
	r.printf("\n")
}

// machine describes the machine a report was measured on: CPU model,
// CPU count, kernel and Go, with "virtual machine" when the CPU says it
// runs under a hypervisor.
func machine() string {
	model, vm := "unknown CPU", false
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch strings.TrimSpace(k) {
			case "model name":
				if model == "unknown CPU" {
					model = strings.TrimSpace(v)
				}
			case "flags":
				vm = vm || slices.Contains(strings.Fields(v), "hypervisor")
			}
		}
	}
	kernel := "unknown kernel"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	s := fmt.Sprintf("%s, %d CPUs", model, runtime.NumCPU())
	if vm {
		s += " (virtual machine)"
	}
	return fmt.Sprintf("%s, %s, %s", s, kernel, runtime.Version())
}

// cpuTime is the user + system CPU time so far of this process and of
// its children that have ended (the receiver processes of a run).
func cpuTime() time.Duration {
	var t time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			t += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return t
}

// cpuPerGB runs f, which returns MB/s at the slowest receiver and the run's
// length, and returns f's result and the CPU-seconds this process spent per
// GB delivered to all rx receivers together.
func cpuPerGB(rx int, f func() (mbps float64, elapsed time.Duration)) (float64, float64) {
	c0 := cpuTime()
	m, el := f()
	gb := m * el.Seconds() * float64(rx) / 1000
	if gb <= 0 {
		return m, 0
	}
	return m, (cpuTime() - c0).Seconds() / gb
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
