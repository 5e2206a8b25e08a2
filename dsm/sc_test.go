package dsm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/rbcast/rbcast/dsm"
)

// Theorem 2.2: a program that is data-race-free in BDSM's sense
// (definition 2.2: writes by different members, and one member's writes
// to different segments, are separated by barriers) sees sequentially
// consistent memory. The program runs phases; in each, every location has
// at most one writer, and the value written depends on values read after
// the previous barrier, so a stale read anywhere changes what is written.
// Every read is compared with a sequential execution of the same phases.

const (
	scLocsA = 96 // segment 1: 8-byte locations
	scLocsB = 40 // segment 2: 24-byte locations
	scSizeB = 24
)

// scOwner is the member that writes location loc of segment seg in phase
// p, or -1 when nobody does. In odd phases a member writes only segment
// 1, in even ones only segment 2 (definition 2.2, second clause).
func scOwner(p, seg, loc, members int) int {
	if (p%2 == 1) != (seg == 1) {
		return -1
	}
	h := uint64(p)*0x9e3779b97f4a7c15 ^ uint64(seg)<<32 ^ uint64(loc)*0xbf58476d1ce4e5b9
	h ^= h >> 29
	if h%5 == 0 {
		return -1
	}
	return int(h % uint64(members))
}

// scValue is what loc gets in phase p, from the previous phase's memory.
func scValue(p, seg, loc int, a []uint64, b [][scSizeB]byte) []byte {
	x := a[(loc*7+p)%scLocsA] ^ uint64(b[(loc*3+p)%scLocsB][p%scSizeB])<<8 ^ uint64(p)<<48 ^ uint64(loc)
	out := make([]byte, 8)
	if seg == 2 {
		out = make([]byte, scSizeB)
		binary.LittleEndian.PutUint64(out[16:], x*3)
	}
	binary.LittleEndian.PutUint64(out, x)
	return out
}

// scModel runs the phases sequentially and returns memory after each.
func scModel(phases, members int) ([][]uint64, [][][scSizeB]byte) {
	a := make([]uint64, scLocsA)
	b := make([][scSizeB]byte, scLocsB)
	as, bs := [][]uint64{append([]uint64(nil), a...)}, [][][scSizeB]byte{append([][scSizeB]byte(nil), b...)}
	for p := 1; p <= phases; p++ {
		na, nb := append([]uint64(nil), a...), append([][scSizeB]byte(nil), b...)
		for loc := range scLocsA {
			if scOwner(p, 1, loc, members) >= 0 {
				na[loc] = binary.LittleEndian.Uint64(scValue(p, 1, loc, a, b))
			}
		}
		for loc := range scLocsB {
			if scOwner(p, 2, loc, members) >= 0 {
				copy(nb[loc][:], scValue(p, 2, loc, a, b))
			}
		}
		a, b = na, nb
		as, bs = append(as, a), append(bs, b)
	}
	return as, bs
}

func scProgram(phases int) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		sa, err := attach(n, 1, scLocsA, 8)
		if err != nil {
			return err
		}
		sb, err := attach(n, 2, scLocsB, scSizeB)
		if err != nil {
			return err
		}
		wantA, wantB := scModel(phases, n.Size())
		if err := n.Barrier(ctx, 0); err != nil {
			return err
		}
		for p := 1; p <= phases; p++ {
			// What this member sees now is the previous phase's memory:
			// read it through the view and through Read.
			a := make([]uint64, scLocsA)
			for i, f := range sa.Float64s() {
				a[i] = uint64FromFloat(f)
			}
			b := make([][scSizeB]byte, scLocsB)
			for loc := range scLocsB {
				if _, err := sb.Read(loc, b[loc][:]); err != nil {
					return err
				}
			}
			for loc := range scLocsA {
				if a[loc] != wantA[p-1][loc] {
					return fmt.Errorf("phase %d: segment 1 location %d is %x, a sequential execution has %x", p, loc, a[loc], wantA[p-1][loc])
				}
			}
			for loc := range scLocsB {
				if b[loc] != wantB[p-1][loc] {
					return fmt.Errorf("phase %d: segment 2 location %d is %x, a sequential execution has %x", p, loc, b[loc], wantB[p-1][loc])
				}
			}
			// Reads and writes of one location are separated too: no
			// member writes phase p before every member has read phase
			// p-1.
			if err := n.Barrier(ctx, -p); err != nil {
				return err
			}
			// Write what this member owns: runs of owned locations as
			// bulk writes every third phase, single writes otherwise.
			for seg, s := range map[int]*dsm.Segment{1: sa, 2: sb} {
				locs := s.Geometry().Locations
				for loc := 0; loc < locs; loc++ {
					if scOwner(p, seg, loc, n.Size()) != n.Rank() {
						continue
					}
					if p%3 == 0 {
						end := loc
						var vals []byte
						for end < locs && scOwner(p, seg, end, n.Size()) == n.Rank() {
							vals = append(vals, scValue(p, seg, end, a, b)...)
							end++
						}
						if _, err := s.WriteBulk(loc, vals); err != nil {
							return err
						}
						loc = end - 1
						continue
					}
					if err := s.Write(loc, scValue(p, seg, loc, a, b)); err != nil {
						return err
					}
				}
			}
			if err := n.Barrier(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
}

func uint64FromFloat(f float64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(f))
	return binary.LittleEndian.Uint64(b[:])
}

func TestTheorem2_2SequentialConsistency(t *testing.T) {
	for _, unbuffered := range []bool{false, true} {
		for seed := range uint64(axiomSeeds) {
			t.Run(fmt.Sprintf("unbuffered=%v/seed=%d", unbuffered, seed), func(t *testing.T) {
				runSim(t, 4, seed, dsm.Config{Unbuffered: unbuffered}, scProgram(12))
			})
		}
	}
}
