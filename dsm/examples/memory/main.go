// Command memory is issue 21's memory benchmark: -segs segments (8) of
// -mib MiB (64) each, created round-robin by the ranks (rank r creates
// the segments k with k mod procs = r: 2 each at 4 processes), every rank
// filling its own segments completely. With full replication every
// process allocates every segment when it is announced and applies every
// update, so it ends up holding all of them (8 × 64 MiB); with -channels
// (selective join, thesis §7.2.1) a process allocates only its own. At
// the end each rank prints its peak resident memory (VmHWM of
// /proc/self/status) beside the report line:
//
//	memory rank=R segs_held=2 seg_mib=64 vmhwm_kib=… vmrss_kib=…
//
// The result checked against the sequential run (-verify) is the FNV-1a
// checksum of the per-segment checksums, gathered in a small segment all
// ranks join; the sequential run computes them without allocating the
// segments. bench/mpi/bench-memory runs it in four namespaces, each
// process in a memory cgroup of its own (docs/benchmarks.md, "BDSM
// channels").
//
//	memory -segs 8 -mib 8 -sim -procs 4 -channels -verify
//	memory -iface eth0 -procs 4 -rank R -channels
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/examples/internal/harness"
)

const (
	segBase = 0x4d454d00 // + k: segment k
	segSums = 0x4d454d53 // the per-segment checksums
)

func main() {
	harness.Main("memory", setup)
}

func setup(fs *flag.FlagSet, o *harness.Options) (func() harness.Result, harness.Program) {
	segs := fs.Int("segs", 8, "number of segments")
	mib := fs.Int("mib", 64, "size of each segment in MiB")
	locSize := fs.Int("locsize", 1024, "location size in bytes (at most what one message carries)")
	o.Bound("segs", segs, 1, 4096, "segments")
	o.Bound("mib", mib, 1, 65536, "MiB per segment")
	o.Bound("locsize", locSize, 1, 65536, "bytes per location")
	o.AllowChannels(false)
	g := func() geometry {
		o.SetParams("segs=%d mib=%d locsize=%d", *segs, *mib, *locSize)
		return geometry{segs: *segs, locs: (*mib << 20) / *locSize, size: *locSize}
	}
	seq := func() harness.Result {
		g := g()
		start := time.Now()
		sums := make([]uint64, g.segs)
		chunk := make([]byte, chunkLocs*g.size)
		for k := range g.segs {
			h := fnv.New64a()
			for loc := 0; loc < g.locs; loc += chunkLocs {
				n := min(chunkLocs, g.locs-loc)
				fill(chunk[:n*g.size], k, loc, g.size)
				h.Write(chunk[:n*g.size])
			}
			sums[k] = h.Sum64()
		}
		return harness.Result{Valid: true, Checksum: sumOf(sums), Detail: fmt.Sprintf("segs=%d", g.segs), Solve: time.Since(start)}
	}
	par := func(ctx context.Context, node *dsm.Node) (harness.Result, error) {
		return parallel(ctx, node, g())
	}
	return seq, par
}

type geometry struct{ segs, locs, size int }

// chunkLocs is how many locations one WriteBulk sets.
const chunkLocs = 256

// fill writes the values of locations loc.. of segment k into b: a
// pattern that differs per segment, location and byte.
func fill(b []byte, k, loc, size int) {
	for i := range b {
		l := loc + i/size
		b[i] = byte(k*131 + l*7 + i%size*3)
	}
}

func sumOf(sums []uint64) uint64 {
	h := fnv.New64a()
	for _, s := range sums {
		h.Write(binary.LittleEndian.AppendUint64(nil, s))
	}
	return h.Sum64()
}

func parallel(ctx context.Context, node *dsm.Node, g geometry) (harness.Result, error) {
	size, rank := node.Size(), node.Rank()
	if g.locs < 1 || g.segs < size {
		return harness.Result{}, fmt.Errorf("memory needs at least one segment per rank and a location per segment: -segs %d, -procs %d, %d locations", g.segs, size, g.locs)
	}
	mine := map[int]*dsm.Segment{}
	for k := rank; k < g.segs; k += size {
		s, err := node.CreateSegment(segBase+uint32(k), g.locs, g.size)
		if err != nil {
			return harness.Result{}, err
		}
		mine[k] = s
	}
	sums, err := harness.Attach(ctx, node, segSums, g.segs, 8)
	if err != nil {
		return harness.Result{}, err
	}
	sync := harness.Barriers(ctx, node)
	if err := sync(); err != nil { // fixes the memberships
		return harness.Result{}, err
	}
	start := time.Now()
	chunk := make([]byte, chunkLocs*g.size)
	for k := rank; k < g.segs; k += size {
		s := mine[k]
		for loc := 0; loc < g.locs; loc += chunkLocs {
			n := min(chunkLocs, g.locs-loc)
			fill(chunk[:n*g.size], k, loc, g.size)
			if _, err := s.WriteBulk(loc, chunk[:n*g.size]); err != nil {
				return harness.Result{}, err
			}
		}
		h := fnv.New64a()
		h.Write(s.View())
		if err := sums.Write(k, binary.LittleEndian.AppendUint64(nil, h.Sum64())); err != nil {
			return harness.Result{}, err
		}
	}
	if err := sync(); err != nil {
		return harness.Result{}, err
	}
	all := make([]uint64, g.segs)
	for k := range all {
		all[k] = binary.LittleEndian.Uint64(sums.Location(k))
	}
	solve := time.Since(start)
	hwm, rss := status("VmHWM:"), status("VmRSS:")
	fmt.Printf("memory rank=%d segs_held=%d seg_mib=%d vmhwm_kib=%d vmrss_kib=%d\n", rank, len(mine), (g.locs*g.size)>>20, hwm, rss)
	return harness.Result{Valid: true, Checksum: sumOf(all), Detail: fmt.Sprintf("segs=%d", g.segs), Solve: solve}, nil
}

// status reads a "kB" field of /proc/self/status (-1 if absent).
func status(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			var v int64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}
