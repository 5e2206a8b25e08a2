package reliable

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/udp"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkUDPReport produces the tables of docs/udp.md (issue 26): PBP2
// one-to-all goodput over link/udp next to the raw ring, PBP2 on the ring
// and TCP fan-out, on one netns segment and across the routed topology's
// smcroute router. Every cell runs all its systems back to back on one
// topology, RBCAST_REPORT_REPS times (default 3), medians and ranges, as
// BenchmarkReport does. Run it once, as root, on an idle machine
// (make bench-udp):
//
//	go test -run '^$' -bench '^BenchmarkUDPReport$' -benchtime 1x -timeout 120m ./reliable
//
// RBCAST_BENCH_SECONDS: sending time per run (default 1).
// RBCAST_REPORT_REPS, RBCAST_REPORT_RX (default 1,3,7), RBCAST_REPORT_OUT
// as BenchmarkReport.
// RBCAST_UDP_PARTS: comma-separated subset of segment,routed.
// RBCAST_UDP_MTUS: MTUs (default 1500,9000).
// RBCAST_UDP_LOSSES: loss percentages (default 0,1): on every receiver's
// inbound frames on the segment, on what the router forwards when routed.
// RBCAST_BENCH_NOSTAGE=1: groups send with Link.Send under their lock
// instead of staging (link/udp's Stage and Kick), as for the ring.
//
// Systems: raw ring = ring-v2 frames of MTU size, whole frames counted
// (linkbench, the ceiling of BenchmarkReport); raw udp = link/udp
// multicast frames of its MTU (linkbench backend udp: GSO and GRO);
// PBP2 ring; PBP2 over link/udp multicast with GSO/GRO and without, and
// over unicast fan-out (the static member list); TCP fan-out
// (linkbench.RunTCPFanout). Every endpoint is a goroutine of this process.
func BenchmarkUDPReport(b *testing.B) {
	netnstest.RequireRoot(b)
	d := benchDuration()
	reps := 3
	if n := envInt(b, "RBCAST_REPORT_REPS"); n > 0 {
		reps = n
	}
	list := func(name, def string) []int {
		s := os.Getenv(name)
		if s == "" {
			s = def
		}
		v, err := linkbench.Ints(s)
		if err != nil {
			b.Fatalf("%s=%q: %v", name, s, err)
		}
		return v
	}
	rxs, mtus := list("RBCAST_REPORT_RX", "1,3,7"), list("RBCAST_UDP_MTUS", "1500,9000")
	var losses []int
	ls := os.Getenv("RBCAST_UDP_LOSSES")
	if ls == "" {
		ls = "0,1"
	}
	for _, f := range strings.Split(ls, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v >= 100 {
			b.Fatalf("RBCAST_UDP_LOSSES=%q: %q is not a percentage 0..99", ls, f)
		}
		losses = append(losses, v)
	}
	parts := "segment,routed"
	if p := os.Getenv("RBCAST_UDP_PARTS"); p != "" {
		parts = p
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
	r := &reporter{b: b, d: d, reps: reps, out: out}
	r.printf("BenchmarkUDPReport: %v per run, %d repetitions, medians (range in brackets); every endpoint is a goroutine of the benchmark process; load average at start %s\n\n", d, reps, loadavg())
	r.printf("Machine: %s\n\n", machine())
	for _, p := range strings.Split(parts, ",") {
		switch p {
		case "segment":
			r.udpSegment(rxs, mtus, losses)
		case "routed":
			r.udpRouted(rxs, mtus, losses)
		default:
			b.Fatalf("RBCAST_UDP_PARTS: unknown part %q (have segment,routed)", p)
		}
	}
	r.printf("load average at end %s; PBP runs with a receiver still missing data 5 s after sending ended: %d\n", loadavg(), r.stalls)
}

// udpGroup is the multicast group of the PBP runs (linkbench's raw runs
// use another).
var udpGroup = netip.MustParseAddrPort("239.77.87.1:7087")

// udpOpen opens members' links over link/udp: multicast (with or without
// the offloads) or fan-out to every host of topo.
func udpOpen(topo *netns.Topology, fanout, noOffload bool) func(testing.TB, *netns.Host) link.Link {
	return func(tb testing.TB, h *netns.Host) link.Link {
		cfg := udp.Config{Group: udpGroup, Interface: h.Iface, TTL: 8, NoLoopback: true, NoGSO: noOffload, NoGRO: noOffload}
		if fanout {
			cfg = udp.Config{NoGSO: noOffload, NoGRO: noOffload}
			for _, o := range topo.Hosts {
				ip, _ := netip.AddrFromSlice(o.IP)
				a := netip.AddrPortFrom(ip.Unmap(), 7087)
				cfg.Peers = append(cfg.Peers, a)
				if o == h {
					cfg.Local = a
				}
			}
		}
		var l *udp.Link
		if err := h.Do(func() (err error) {
			l, err = udp.Open(cfg)
			return err
		}); err != nil {
			tb.Fatal(err)
		}
		if envBool(tb, "RBCAST_BENCH_NOSTAGE") {
			return noStage{l}
		}
		return l
	}
}

// rawUDP is the slowest receiver's MB/s of whole link/udp frames.
func (r *reporter) rawUDP(topo *netns.Topology, backend string) float64 {
	res, err := linkbench.RunThroughputOn(topo, linkbench.Options{Backend: backend, Duration: r.d})
	if err != nil {
		r.b.Fatal(err)
	}
	lo := res.Receivers[0].MBps(res.Elapsed)
	for _, x := range res.Receivers {
		lo = min(lo, x.MBps(res.Elapsed))
	}
	return lo
}

// pbpOver runs PBP2 goodput over the links open makes (goroutines).
func (r *reporter) pbpOver(topo *netns.Topology, open func(testing.TB, *netns.Host) link.Link) float64 {
	g := runGoodputOn(r.b, topo, goodputOpts{mode: PBP2, open: open}, r.d)
	if g.short > 0 {
		r.stalls++
		r.printf("<!-- STALL: a receiver still missed %d bytes 5 s after sending ended; the sender's membership events: %v -->\n", g.short, g.sender.Events)
	}
	return mbps(g)
}

// udpSegment: one segment, every system.
func (r *reporter) udpSegment(rxs, mtus, losses []int) {
	r.printf("### One-to-all over UDP on one segment (MB/s at the slowest receiver)\n\n")
	r.printf("Largest messages. raw ring and raw udp count whole frames (ring-v2; link/udp multicast with GSO/GRO, whose frames are 42 bytes shorter at the same MTU); PBP2 and TCP count payload bytes. mcast = link/udp multicast, GSO and GRO on unless \"no GSO\"; fan-out = link/udp unicast fan-out to the static member list. Loss is on every receiver's inbound frames, all kinds. The issue's target: PBP2 mcast ≥ 0.8 × raw ring.\n\n")
	r.printf("| rx | MTU | loss | raw ring | raw udp | PBP2 ring | PBP2 mcast | PBP2 mcast no GSO | PBP2 fan-out | TCP fan-out | mcast/raw ring | mcast/PBP2 ring | mcast/TCP |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, mtu := range mtus {
		for _, rx := range rxs {
			topo := r.up(rx+1, mtu)
			for _, loss := range losses {
				r.setLoss(topo, float64(loss), false)
				var raw, rawu, ring, mc, mcn, fo, tcp samples
				for rep := range r.reps {
					fmt.Fprintf(os.Stderr, "udp report: segment rx=%d mtu=%d loss=%d rep %d/%d (load %s)\n", rx, mtu, loss, rep+1, r.reps, loadavg())
					m, _ := r.raw(topo, false, false)
					raw = append(raw, m)
					rawu = append(rawu, r.rawUDP(topo, "udp"))
					ring = append(ring, mbps(r.pbp(topo, goodputOpts{mode: PBP2})))
					mc = append(mc, r.pbpOver(topo, udpOpen(topo, false, false)))
					mcn = append(mcn, r.pbpOver(topo, udpOpen(topo, false, true)))
					fo = append(fo, r.pbpOver(topo, udpOpen(topo, true, false)))
					tcp = append(tcp, r.tcp(topo, 1))
				}
				r.printf("| %d | %d | %d%% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rx, mtu, loss,
					raw.fmt(1, ""), rawu.fmt(1, ""), ring.fmt(1, ""), mc.fmt(1, ""), mcn.fmt(1, ""), fo.fmt(1, ""), tcp.fmt(1, ""),
					ratio(mc, raw), ratio(mc, ring), ratio(mc, tcp))
			}
			topo.Close()
		}
	}
	r.printf("\n")
}

// udpRouted: the sender alone on segment 0, the receivers behind the
// router on segment 1.
func (r *reporter) udpRouted(rxs, mtus, losses []int) {
	r.printf("### One-to-all over UDP across a router (MB/s at the slowest receiver)\n\n")
	r.printf("The routed topology (scripts/netns/up -r smcroute -s 1): the sender alone on segment 0, every receiver behind the router on segment 1; multicast is forwarded by smcrouted, fan-out and TCP are routed unicast. Loss is on what the router forwards from the sender's segment (all kinds, TCP's too). Columns as in the one-segment table.\n\n")
	r.printf("| rx | MTU | loss | raw udp | PBP2 mcast | PBP2 mcast no GSO | PBP2 fan-out | TCP fan-out | mcast/TCP |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, mtu := range mtus {
		for _, rx := range rxs {
			r.topo++
			topo, err := netns.New(netns.Options{Hosts: rx + 1, MTU: mtu, Routed: "smcroute", Split: 1, Prefix: fmt.Sprintf("rbeu%04d%d", os.Getpid()%10000, r.topo)})
			if err != nil {
				r.b.Fatal(err)
			}
			for _, loss := range losses {
				if err := topo.SetRouterLoss(netns.From0, netns.Loss{Percent: float64(loss)}); err != nil {
					r.b.Fatal(err)
				}
				var rawu, mc, mcn, fo, tcp samples
				for rep := range r.reps {
					fmt.Fprintf(os.Stderr, "udp report: routed rx=%d mtu=%d loss=%d rep %d/%d (load %s)\n", rx, mtu, loss, rep+1, r.reps, loadavg())
					// First, so that the router has its (S,G) routes
					// before the PBP runs.
					rawu = append(rawu, r.rawUDP(topo, "udp"))
					mc = append(mc, r.pbpOver(topo, udpOpen(topo, false, false)))
					mcn = append(mcn, r.pbpOver(topo, udpOpen(topo, false, true)))
					fo = append(fo, r.pbpOver(topo, udpOpen(topo, true, false)))
					tcp = append(tcp, r.tcp(topo, 1))
				}
				r.printf("| %d | %d | %d%% | %s | %s | %s | %s | %s | %s |\n", rx, mtu, loss,
					rawu.fmt(1, ""), mc.fmt(1, ""), mcn.fmt(1, ""), fo.fmt(1, ""), tcp.fmt(1, ""), ratio(mc, tcp))
			}
			topo.Close()
		}
	}
	r.printf("\n")
}
