//go:build linux

// Command tcpfanout measures the TCP baseline of docs/benchmarks.md on a
// network-namespace topology it builds and removes itself (namespaces
// named rbet…): one sender writes the same byte stream into one TCP
// connection per receiver (-all: every host does, a full mesh), for
// 1 sender + N−1 receivers through a bridge. It prints per-receiver MB/s
// (mean and slowest) as a markdown table. It needs root.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/testnet/netns"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("tcpfanout", flag.ContinueOnError)
	sw := linkbench.SweepFlags(fs)
	all := fs.Bool("all", false, "all-to-all: every host sends to every other")
	lag := fs.Int("lag", 4<<20, "bytes one connection may run ahead of the sender's slowest")
	loss := fs.Float64("loss", 0, "random loss in percent on every receiver's inbound frames (-all: every host's)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tcpfanout [flags]\n\nMeasures TCP fan-out (one connection per receiver) on a netns bridge topology; needs root.\nPrints a markdown table; progress goes to stderr.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args, os.Stdout); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "tcpfanout: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (see -h)", fs.Arg(0))
	}
	hosts, mtus, err := sw.Lists()
	if err != nil {
		return usage("%v", err)
	}
	switch {
	case sw.Duration <= 0:
		return usage("-duration %v: want > 0", sw.Duration)
	case sw.Reps < 1:
		return usage("-reps %d: want at least 1", sw.Reps)
	case *lag < 1:
		return usage("-lag %d: want at least 1 byte", *lag)
	case !(*loss >= 0 && *loss < 100):
		return usage("-loss %v: want a percentage in [0, 100)", *loss)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "tcpfanout: needs root (network namespaces)")
		return 2
	}
	fmt.Printf("| MTU | N | senders | loss | per-receiver MB/s, mean | slowest receiver MB/s |\n|---|---|---|---|---|---|\n")
	for _, mtu := range mtus {
		for _, n := range hosts {
			topo, err := netns.New(netns.Options{Hosts: n, MTU: mtu, Addresses: true, Prefix: fmt.Sprintf("rbet%d", os.Getpid()%1000)})
			if err != nil {
				fmt.Fprintf(os.Stderr, "tcpfanout: %v\n", err)
				return 1
			}
			senders := 1
			if *all {
				senders = n
			}
			if *loss > 0 {
				for _, h := range topo.Hosts {
					if h.Index > 0 || *all {
						if err := h.SetLoss(netns.In, netns.Loss{Percent: *loss}); err != nil {
							topo.Close()
							fmt.Fprintf(os.Stderr, "tcpfanout: %v\n", err)
							return 1
						}
					}
				}
			}
			var means, mins []string
			for r := range sw.Reps {
				fmt.Fprintf(os.Stderr, "tcpfanout: MTU %d N=%d run %d/%d...\n", mtu, n, r+1, sw.Reps)
				res, err := linkbench.RunTCPFanout(topo, linkbench.TCPOptions{Senders: senders, Duration: sw.Duration, Lag: *lag})
				if err != nil {
					topo.Close()
					fmt.Fprintf(os.Stderr, "tcpfanout: %v\n", err)
					return 1
				}
				means = append(means, fmt.Sprintf("%.0f", res.MeanMBps()))
				mins = append(mins, fmt.Sprintf("%.0f", res.MinMBps()))
			}
			topo.Close()
			fmt.Printf("| %d | %d | %d | %g%% | %s | %s |\n", mtu, n, senders, *loss, strings.Join(means, ", "), strings.Join(mins, ", "))
		}
	}
	return 0
}
