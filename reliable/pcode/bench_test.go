package pcode

import (
	"fmt"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// alltoall is a program of rounds of all-to-all in the paper's second
// driver (§6.2): every member multicasts size bytes to all others, then
// requests from each.
func alltoall(seed uint64, ids []frame.MemberID, rounds, size int) [][]call {
	calls := make([][]call, len(ids))
	others := func(p frame.MemberID) frame.Targets {
		var ts []frame.MemberID
		for _, q := range ids {
			if q != p {
				ts = append(ts, q)
			}
		}
		return frame.AppendTargets(nil, ts...)
	}
	msg := func(p frame.MemberID, step uint64) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(uint64(p)*31 + step*7 + uint64(i))
		}
		return b
	}
	for step := uint64(1); step <= uint64(rounds); step++ {
		for i, p := range ids {
			calls[i] = append(calls[i], call{op: Op{Kind: OpMulticast, Step: step, Targets: others(p), Data: msg(p, step)}})
			for _, q := range ids {
				if q != p {
					calls[i] = append(calls[i], call{op: Op{Kind: OpRequest, Step: step, Peer: q, Targets: others(q)}, want: msg(q, step)})
				}
			}
		}
	}
	return calls
}

// BenchmarkSimAlltoall is the all-to-all of the paper's figures 6 and 7
// on the simulated segment (1 Gbit/s, virtual time), up to the paper's
// 16 machines, which the 2-core machine cannot host as namespaces:
// ms-per-call is the paper's figure of merit (virtual time per round
// divided by N), the time a real segment would take without the CPU.
func BenchmarkSimAlltoall(b *testing.B) {
	const rounds = 200
	for _, n := range []int{2, 4, 8, 16} {
		for _, size := range []int{20, 1024} {
			for _, loss := range []float64{0, 0.01, 0.05} {
				b.Run(fmt.Sprintf("n=%d/size=%d/loss=%g", n, size, loss), func(b *testing.B) {
					var perCall float64
					for i := range b.N {
						l := simtest.Link{MTU: 1500, In: testnet.Impairment{Loss: loss}}
						s := newSim(b, uint64(i+1), n, l, Config{}, func(ids []frame.MemberID, max int) [][]call {
							return alltoall(uint64(i+1), ids, rounds, size)
						})
						start := s.net.Now()
						if err := s.run(time.Minute); err != nil {
							b.Fatal(err)
						}
						var end time.Time
						for _, m := range s.members {
							if m.doneAt.After(end) {
								end = m.doneAt
							}
						}
						perCall += float64(end.Sub(start).Nanoseconds()) / 1e6 / rounds / float64(n)
					}
					b.ReportMetric(perCall/float64(b.N), "ms-per-call")
				})
			}
		}
	}
}
