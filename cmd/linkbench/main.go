//go:build linux

// Command linkbench measures rbcast's link backends on a network-namespace
// topology it builds and removes itself (namespaces named rbk…): frames/s
// and MB/s from one sender to N−1 receivers through a bridge, next to a
// plain send()/recv() loop, and one-frame latency. It needs root. The
// tables it prints are the ones in docs/benchmarks.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link/ring"
)

func main() {
	linkbench.MaybeChild()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("linkbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: linkbench [flags]\n\nMeasures link backends (%s) on a netns bridge topology; needs root.\nPrints markdown tables; progress goes to stderr.\n\nflags:\n", strings.Join(linkbench.BackendNames, ", "))
		fs.PrintDefaults()
	}
	backends := fs.String("backends", strings.Join(linkbench.BackendNames, ","), "backends to measure")
	sw := linkbench.SweepFlags(fs)
	rtts := fs.Int("latency", 2000, "round trips per latency run (0: skip latency)")
	noTput := fs.Bool("no-throughput", false, "skip the throughput runs")
	batch := fs.Int("batch", 64, "frames per Send on the sender")
	procs := fs.Bool("procs", true, "run each receiver as a process of its own in its namespace (false: goroutines of this process)")
	senderFlag := fs.String("sender", "", "backend of the sending host only (default: the same as the receivers)")
	overlap := fs.Bool("overlap", false, "stage frames on one goroutine and have another kick the kernel (ring backends; as the reliable runtime sends)")
	spin := fs.Duration("spin", ring.DefaultRxSpin, "ring backends: the receivers' rings (both ends' in the latency runs) poll this long, yielding the CPU, before sleeping (ring.Config.RxSpin; 0: never, as in the tables measured before the spin became the default in 2630362)")
	work := fs.Bool("work", false, "touch every frame as little as a reliable checksummed protocol must: the sender copies the payload into a history slot and computes a CRC32C, each receiver checks the CRC32C and copies the payload out")
	if code, ok := cliflag.Parse(fs, args, os.Stdout); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "linkbench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (see -h)", fs.Arg(0))
	}
	hosts, mtus, err := sw.Lists()
	if err != nil {
		return usage("%v", err)
	}
	names := strings.Split(*backends, ",")
	for _, b := range names {
		if _, ok := linkbench.Backends[b]; !ok {
			return usage("-backends: unknown backend %q (have %s)", b, strings.Join(linkbench.BackendNames, ", "))
		}
	}
	if _, ok := linkbench.Backends[*senderFlag]; !ok && *senderFlag != "" {
		return usage("-sender: unknown backend %q (have %s)", *senderFlag, strings.Join(linkbench.BackendNames, ", "))
	}
	switch {
	case *spin < 0 || *spin > time.Second:
		return usage("-spin %v: want 0 (never) up to 1s", *spin)
	case sw.Duration <= 0:
		return usage("-duration %v: want > 0", sw.Duration)
	case sw.Reps < 1:
		return usage("-reps %d: want at least 1", sw.Reps)
	case *batch < 1 || *batch > linkbench.MaxBatch:
		return usage("-batch %d: want 1..%d", *batch, linkbench.MaxBatch)
	case *rtts < 0:
		return usage("-latency %d: want 0 (skip latency) or more round trips", *rtts)
	case *noTput && *rtts == 0:
		return usage("-no-throughput and -latency 0 leave nothing to measure")
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "linkbench: needs root (network namespaces, CAP_NET_ADMIN and CAP_NET_RAW)")
		return 2
	}
	// rxSpin is Options.RxSpin for backend b: -spin for a ring (its 0 is
	// never, where RxSpin's 0 is the ring's default), nothing otherwise.
	rxSpin := func(b string) time.Duration {
		switch {
		case !linkbench.IsRing(b):
			return 0
		case *spin == 0:
			return -1
		}
		return *spin
	}
	prefix := fmt.Sprintf("rbk%d", os.Getpid()%1000)
	if !*noTput {
		fmt.Printf("| backend | MTU | N | sender frames/s | per-receiver MB/s (mean) | receiver loss | sender retries |\n|---|---|---|---|---|---|---|\n")
		for _, mtu := range mtus {
			for _, n := range hosts {
				for _, b := range names {
					var lo, hi, fps, loss float64
					var retries uint64
					for r := range sw.Reps {
						fmt.Fprintf(os.Stderr, "linkbench: %s MTU %d N=%d run %d/%d...\n", b, mtu, n, r+1, sw.Reps)
						t, err := linkbench.RunThroughput(linkbench.Options{Backend: b, Hosts: n, MTU: mtu, Duration: sw.Duration, Prefix: prefix, Sender: *senderFlag, Processes: *procs, Batch: *batch, Overlap: *overlap, Work: *work, RxSpin: rxSpin(b)})
						if err != nil {
							fmt.Fprintf(os.Stderr, "linkbench: %s MTU %d N=%d: %v\n", b, mtu, n, err)
							return 1
						}
						for i, rc := range t.Receivers {
							if rc.Corrupt > 0 {
								fmt.Fprintf(os.Stderr, "linkbench: %s MTU %d N=%d: receiver %d: %d frames failed their CRC32C\n", b, mtu, n, i+1, rc.Corrupt)
								return 1
							}
						}
						m := t.MeanMBps()
						if r == 0 || m < lo {
							lo = m
						}
						if m > hi {
							hi = m
						}
						fps += t.FramesPerSec() / float64(sw.Reps)
						loss += t.LossPct() / float64(sw.Reps)
						retries += t.SendRetries
					}
					rng := fmt.Sprintf("%.0f", lo)
					if sw.Reps > 1 {
						rng = fmt.Sprintf("%.0f–%.0f", lo, hi)
					}
					label := b
					if *senderFlag != "" {
						label = *senderFlag + " → " + b
					}
					if *overlap {
						label += " staged"
					}
					if *work {
						label += " +work"
					}
					fmt.Printf("| %s | %d | %d | %.0f | %s | %.2f%% | %d |\n", label, mtu, n, fps, rng, loss, retries)
				}
			}
		}
		fmt.Println()
	}
	if *rtts > 0 {
		fmt.Printf("| backend | one-way latency p50 | p99 | mean | round trips |\n|---|---|---|---|---|\n")
		for _, b := range names {
			fmt.Fprintf(os.Stderr, "linkbench: latency %s...\n", b)
			l, err := linkbench.RunLatency(b, *rtts, prefix, rxSpin(b))
			if err != nil {
				fmt.Fprintf(os.Stderr, "linkbench: latency %s: %v\n", b, err)
				return 1
			}
			fmt.Printf("| %s | %v | %v | %v | %d |\n", b, l.P50.Round(time.Microsecond), l.P99.Round(time.Microsecond), l.Mean.Round(time.Microsecond), l.RoundTrips)
		}
	}
	return 0
}
