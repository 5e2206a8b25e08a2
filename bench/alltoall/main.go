// Command alltoall is one rank of the all-to-all benchmark of issue 24
// (PCODE, §6 of Bruck, Dolev, Ho, Orni & Strong): R rounds in which
// every rank sends an S-byte message to every other, timed per round.
// Run one per namespace with bench/mpi/netns-bdsm (which appends -iface,
// -procs and -rank); bench/alltoall/run runs the whole table.
//
//	-proto pcode      PCODE, the paper's second driver: multicast, then a
//	                  request for every other rank (collective.Allgather)
//	-proto pcode1     PCODE, the first driver: ranks broadcast in turn
//	                  (a Bcast per rank)
//	-proto tcp1       a TCP mesh, the first driver: in turn, the sender
//	                  writes to every other rank, the others read
//	-proto tcp2       a TCP mesh, the second driver: write to all, then
//	                  read from all
//	-proto pbp2       PBP2 (Order FIFO): Send, then Recv N-1
//	-proto pbp2-expect  the same, with Group.Expect(q, 1) for every other
//	                  rank before receiving (request-driven NACKs)
//
// It prints one line: proto, procs, size, rounds, ms per call (the
// paper's figure of merit: the mean round time divided by the ranks),
// the round time's p50 and p99, and the repair counters.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"github.com/rbcast/rbcast/collective"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
)

func main() {
	proto := flag.String("proto", "pcode", "pcode, pcode1, tcp1, tcp2, pbp2 or pbp2-expect")
	iface := flag.String("iface", "eth0", "interface")
	procs := flag.Int("procs", 2, "ranks")
	rank := flag.Int("rank", 0, "this rank (0 registers the group)")
	size := flag.Int("size", 1024, "message bytes")
	rounds := flag.Int("rounds", 1000, "timed rounds (after 10 untimed)")
	addr := flag.String("addr", "10.77.0.%d:7724", "TCP address of rank i (printf with i+1), as scripts/netns/up -a numbers hosts")
	flag.Parse()
	if err := run(*proto, *iface, *procs, *rank, *size, *rounds, *addr); err != nil {
		fmt.Fprintf(os.Stderr, "alltoall rank %d: %v\n", *rank, err)
		os.Exit(1)
	}
}

// round is one timed all-to-all; stats reads the repair counters.
type bench struct {
	round func(r int) error
	stats func() string
	close func() error
}

func run(proto, iface string, procs, rank, size, rounds int, addr string) error {
	var b bench
	var err error
	switch proto {
	case "pcode", "pcode1":
		b, err = pcodeBench(proto == "pcode1", iface, procs, rank, size)
	case "pbp2", "pbp2-expect":
		b, err = pbpBench(proto == "pbp2-expect", iface, procs, rank, size)
	case "tcp1", "tcp2":
		b, err = tcpBench(proto == "tcp1", procs, rank, size, addr)
	default:
		return fmt.Errorf("-proto %q: want pcode, pcode1, tcp1, tcp2, pbp2 or pbp2-expect", proto)
	}
	if err != nil {
		return err
	}
	for r := range 10 {
		if err := b.round(-1 - r); err != nil {
			return fmt.Errorf("warm-up round %d: %w", r, err)
		}
	}
	times := make([]time.Duration, rounds)
	start := time.Now()
	for r := range rounds {
		t := time.Now()
		if err := b.round(r); err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		times[r] = time.Since(t)
	}
	total := time.Since(start)
	slices.Sort(times)
	pct := func(p int) time.Duration { return times[max(0, (p*len(times)+99)/100-1)] }
	fmt.Printf("proto=%s procs=%d size=%d rounds=%d ms_per_call=%.4f round_p50_us=%.1f round_p99_us=%.1f %s\n",
		proto, procs, size, rounds, float64(total.Microseconds())/1000/float64(rounds)/float64(procs),
		float64(pct(50).Nanoseconds())/1000, float64(pct(99).Nanoseconds())/1000, b.stats())
	return b.close()
}

// message is rank from's message of round r: its first 12 bytes say
// whose and which, so that every receiver checks what it got.
func message(buf []byte, from, r, size int) []byte {
	buf = buf[:0]
	buf = binary.BigEndian.AppendUint32(buf, uint32(from))
	buf = binary.BigEndian.AppendUint64(buf, uint64(int64(r)))
	for len(buf) < size {
		buf = append(buf, byte(from+r+len(buf)))
	}
	return buf[:max(size, 12)]
}

func check(got []byte, from, r, size int) error {
	want := message(nil, from, r, size)
	if string(got) != string(want) {
		return fmt.Errorf("message from %d of round %d: got %d bytes %.12x, want %d bytes %.12x", from, r, len(got), got, len(want), want)
	}
	return nil
}

func join(iface string, procs, rank int, cfg reliable.Config) (*reliable.Group, error) {
	l, err := ring.Open(iface, ring.Config{})
	if err != nil {
		return nil, err
	}
	cfg.Group, cfg.Size, cfg.Server = 0x2424, procs, rank == 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return reliable.Join(ctx, l, cfg)
}

func protoStats(g *reliable.Group) string {
	s := g.Stats().Protocol
	return fmt.Sprintf("sent=%d resent=%d repair_requests=%d", s.Sent, s.Retransmitted, s.RepairRequests)
}

func pcodeBench(first bool, iface string, procs, rank, size int) (bench, error) {
	g, err := join(iface, procs, rank, reliable.Config{Order: reliable.PCODE})
	if err != nil {
		return bench{}, err
	}
	c := collective.New(g)
	ids := c.Members()
	me := slices.Index(ids, c.Self())
	ctx := context.Background()
	var buf []byte
	return bench{
		round: func(r int) error {
			if first {
				for i := range ids {
					m, err := c.Bcast(ctx, ids[i], message(buf, i, r, size))
					if err != nil {
						return err
					}
					if err := check(m, i, r, size); err != nil {
						return err
					}
				}
				return nil
			}
			all, err := c.Allgather(ctx, message(buf, me, r, size))
			if err != nil {
				return err
			}
			for i, m := range all {
				if err := check(m, i, r, size); err != nil {
					return err
				}
			}
			return nil
		},
		stats: func() string { return protoStats(g) },
		close: c.Close,
	}, nil
}

func pbpBench(expect bool, iface string, procs, rank, size int) (bench, error) {
	g, err := join(iface, procs, rank, reliable.Config{})
	if err != nil {
		return bench{}, err
	}
	var ids []frame.MemberID
	for _, m := range g.Members() {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	me := slices.Index(ids, g.Self())
	ctx := context.Background()
	var buf []byte
	early := make([][][]byte, len(ids))
	return bench{
		round: func(r int) error {
			if err := g.Send(ctx, message(buf, me, r, size)); err != nil {
				return err
			}
			if expect {
				for _, q := range ids {
					if q != g.Self() {
						g.Expect(q, 1)
					}
				}
			}
			// FIFO per sender: round r's message of each is the next of
			// that sender's, but a fast sender's next round may come
			// before a slow one's this round: it waits in early.
			for i, q := range ids {
				if q == g.Self() {
					continue
				}
				for len(early[i]) == 0 {
					m, err := g.Recv(ctx)
					if err != nil {
						return err
					}
					j := slices.Index(ids, m.From)
					early[j] = append(early[j], m.Data)
				}
				m := early[i][0]
				early[i] = early[i][1:]
				if err := check(m, i, r, size); err != nil {
					return err
				}
			}
			return nil
		},
		stats: func() string { return protoStats(g) },
		close: g.Close,
	}, nil
}

// tcpBench builds the mesh: rank i listens, dials every lower rank and
// accepts every higher one; a connection starts with the dialer's rank.
func tcpBench(first bool, procs, rank, size int, addr string) (bench, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf(addr, rank+1))
	if err != nil {
		return bench{}, err
	}
	defer ln.Close()
	conns := make([]net.Conn, procs)
	rd := make([]*bufio.Reader, procs)
	for j := range rank {
		var c net.Conn
		for try := 0; ; try++ {
			c, err = net.Dial("tcp", fmt.Sprintf(addr, j+1))
			if err == nil || try == 300 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return bench{}, err
		}
		if _, err := c.Write([]byte{byte(rank)}); err != nil {
			return bench{}, err
		}
		conns[j] = c
	}
	for range procs - 1 - rank {
		c, err := ln.Accept()
		if err != nil {
			return bench{}, err
		}
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return bench{}, err
		}
		conns[b[0]] = c
	}
	for j, c := range conns {
		if c != nil {
			c.(*net.TCPConn).SetNoDelay(true)
			rd[j] = bufio.NewReaderSize(c, 64<<10)
		}
	}
	var out []byte
	in := make([]byte, max(size, 12))
	send := func(r int) error {
		out = message(out, rank, r, size)
		for j, c := range conns {
			if j != rank {
				if _, err := c.Write(out); err != nil {
					return err
				}
			}
		}
		return nil
	}
	recv := func(j, r int) error {
		if _, err := io.ReadFull(rd[j], in); err != nil {
			return err
		}
		return check(in, j, r, size)
	}
	return bench{
		round: func(r int) error {
			if first {
				for s := range procs {
					if s == rank {
						if err := send(r); err != nil {
							return err
						}
					} else if err := recv(s, r); err != nil {
						return err
					}
				}
				return nil
			}
			if err := send(r); err != nil {
				return err
			}
			for j := range procs {
				if j != rank {
					if err := recv(j, r); err != nil {
						return err
					}
				}
			}
			return nil
		},
		stats: func() string { return "" },
		close: func() error {
			for _, c := range conns {
				if c != nil {
					c.Close()
				}
			}
			return nil
		},
	}, nil
}
