package dsm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
)

// The axioms of BDSM (thesis §2.2.2.3) checked on the histories the
// simulator records: every member's events (core.Event) in the one global
// order in which they happened. The network loses, duplicates and
// reorders frames; the reliable layer repairs that, and the axioms must
// hold anyway.

// lossy is the impairment every axiom test runs under.
var lossy = testnet.Impairment{Loss: 0.05, Duplicate: 0.02, Reorder: 0.05, ReorderDelay: 300 * time.Microsecond}

// seeds each axiom test runs with.
const axiomSeeds = 4

type event struct {
	core.Event
	rank  int
	index int // position in the global order
}

// history is a run's events, globally and per member.
type history struct {
	all    []event
	byRank [][]event
}

func newHistory(n int) *history { return &history{byRank: make([][]event, n)} }

func (h *history) record(rank int, ev core.Event) {
	ev.Data = bytes.Clone(ev.Data)
	e := event{Event: ev, rank: rank, index: len(h.all)}
	h.all = append(h.all, e)
	h.byRank[rank] = append(h.byRank[rank], e)
}

// writeValue makes every write's value unique, so an update names its
// write: writer rank, writer's write number, padding to size.
func writeValue(rank, n, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint16(b, uint16(rank))
	binary.BigEndian.PutUint32(b[2:], uint32(n))
	return b
}

func idOf(rank int) frame.MemberID { return frame.MemberID(rank + 1) } // dsmsim.Run's ids

type writeKey struct {
	key  uint32
	loc  int
	data string
}

func wkey(e core.Event) writeKey { return writeKey{e.Key, e.Location, string(e.Data)} }

// runSim runs program on n members under lossy with a fresh history.
func runSim(t *testing.T, n int, seed uint64, cfg dsm.Config, program func(*dsm.Node) error) *history {
	t.Helper()
	h := newHistory(n)
	_, err := dsmsim.Run(dsmsim.Config{Members: n, Seed: seed, In: lossy, Node: cfg, Trace: h.record, Timeout: time.Minute}, program)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return h
}

// attach creates the segment at rank 0 and joins it elsewhere.
func attach(n *dsm.Node, key uint32, locs, size int) (*dsm.Segment, error) {
	if n.Rank() == 0 {
		return n.CreateSegment(key, locs, size)
	}
	return n.JoinSegment(context.Background(), key, locs, size)
}

// barrierProgram: rounds of writes (single, consecutive runs, bulk, to two
// segments of different location sizes), each round ending in a barrier.
// Writes race on purpose: the axioms of updates and barriers hold
// whatever the program.
func barrierProgram(rounds, writes int) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		a, err := attach(n, 11, 64, 8)
		if err != nil {
			return err
		}
		b, err := attach(n, 12, 40, 16)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(n.Rank()), 7))
		seq := 0
		for round := range rounds {
			for range writes {
				s := a
				if rng.IntN(3) == 0 {
					s = b
				}
				g := s.Geometry()
				switch rng.IntN(4) {
				case 0: // a bulk write of a few locations
					k := 1 + rng.IntN(5)
					loc := rng.IntN(g.Locations - k + 1)
					var vals []byte
					for range k {
						seq++
						vals = append(vals, writeValue(n.Rank(), seq, g.LocationSize)...)
					}
					if _, err := s.WriteBulk(loc, vals); err != nil {
						return err
					}
				default:
					seq++
					if err := s.Write(rng.IntN(g.Locations), writeValue(n.Rank(), seq, g.LocationSize)); err != nil {
						return err
					}
				}
			}
			if err := n.Barrier(context.Background(), 100+round); err != nil {
				return err
			}
		}
		return nil
	}
}

// Axiom 2.1: locally, events are in program order, and a write is
// visible to its writer at once (before its update leaves).
func TestAxiom2_1ProgramOrder(t *testing.T) {
	for seed := range uint64(axiomSeeds) {
		h := runSim(t, 3, seed, dsm.Config{}, func(n *dsm.Node) error {
			s, err := attach(n, 1, 32, 8)
			if err != nil {
				return err
			}
			for i := range 200 {
				v := writeValue(n.Rank(), i, 8)
				loc := (i * 7) % 32
				if err := s.Write(loc, v); err != nil {
					return err
				}
				got, err := s.Read(loc, make([]byte, 8))
				if err != nil {
					return err
				}
				if !bytes.Equal(got, v) || !bytes.Equal(s.Location(loc), v) {
					return fmt.Errorf("write %d not visible to its writer: read %x, wrote %x", i, got, v)
				}
				if i%50 == 49 {
					if err := n.Barrier(context.Background(), i); err != nil {
						return err
					}
				}
			}
			return nil
		})
		for r, evs := range h.byRank {
			i, barriers := 0, 0
			for _, e := range evs {
				switch e.Kind {
				case core.EvWrite:
					if !bytes.Equal(e.Data, writeValue(r, i, 8)) {
						t.Fatalf("seed %d rank %d: write %d out of program order: %x", seed, r, i, e.Data)
					}
					i++
				case core.EvBarrierEnter:
					barriers++
					if i != 50*barriers {
						t.Fatalf("seed %d rank %d: barrier %d entered after %d writes, want %d", seed, r, barriers, i, 50*barriers)
					}
				}
			}
		}
	}
}

// Axiom 2.2: every write leads to exactly one update at every other
// member, after the write. Axiom 2.3: a writer's updates of one segment
// are seen in the order written.
func TestAxioms2_2and2_3Updates(t *testing.T) {
	const n = 4
	for seed := range uint64(axiomSeeds) {
		h := runSim(t, n, seed, dsm.Config{}, barrierProgram(5, 60))
		for i := range n {
			for j := range n {
				if i == j {
					continue
				}
				// i's writes and j's updates from i, per segment.
				writes := map[uint32][]writeKey{}
				wrote := map[writeKey]int{}
				for _, e := range h.byRank[i] {
					if e.Kind == core.EvWrite {
						writes[e.Key] = append(writes[e.Key], wkey(e.Event))
						wrote[wkey(e.Event)] = e.index
					}
				}
				seen := map[uint32][]writeKey{}
				for _, e := range h.byRank[j] {
					if e.Kind == core.EvUpdate && e.From == idOf(i) {
						k := wkey(e.Event)
						at, ok := wrote[k]
						if !ok {
							t.Fatalf("seed %d: rank %d applied an update from rank %d that it never wrote: %+v", seed, j, i, k)
						}
						if at > e.index {
							t.Fatalf("seed %d: rank %d applied %+v before rank %d wrote it", seed, j, k, i)
						}
						seen[e.Key] = append(seen[e.Key], k)
					}
				}
				for key, w := range writes {
					if len(seen[key]) != len(w) {
						t.Fatalf("seed %d: rank %d wrote %d locations of segment %d, rank %d applied %d updates (axiom 2.2: exactly one each)", seed, i, len(w), key, j, len(seen[key]))
					}
					for x := range w {
						if seen[key][x] != w[x] {
							t.Fatalf("seed %d: segment %d: rank %d's write %d is %+v, rank %d's update %d is %+v (axiom 2.3: order written)", seed, key, i, x, w[x], j, x, seen[key][x])
						}
					}
				}
			}
		}
	}
}

// Axioms 2.4 and 2.5: every member crosses every barrier, all in the same
// order. Axiom 2.6: updates of writes before a barrier are seen before it
// everywhere; axiom 2.7: those after it, after it.
func TestAxioms2_4to2_7Barriers(t *testing.T) {
	const n, rounds = 4, 6
	for seed := range uint64(axiomSeeds) {
		h := runSim(t, n, seed, dsm.Config{}, barrierProgram(rounds, 40))
		// Per member: where it entered and passed each barrier, and for
		// each write how many barriers it had entered and passed before.
		enterAt := make([]map[uint32]int, n) // rank → barrier seq → global index
		passAt := make([]map[uint32]int, n)
		enteredBefore := make([]map[writeKey]uint32, n)
		passedBefore := make([]map[writeKey]uint32, n)
		for r, evs := range h.byRank {
			enterAt[r], passAt[r] = map[uint32]int{}, map[uint32]int{}
			enteredBefore[r], passedBefore[r] = map[writeKey]uint32{}, map[writeKey]uint32{}
			var ids []int32
			var entered, passed uint32
			for _, e := range evs {
				switch e.Kind {
				case core.EvBarrierEnter:
					entered = e.Seq
					enterAt[r][e.Seq] = e.index
				case core.EvBarrierPass:
					passed = e.Seq
					passAt[r][e.Seq] = e.index
					ids = append(ids, e.ID)
				case core.EvWrite:
					enteredBefore[r][wkey(e.Event)] = entered
					passedBefore[r][wkey(e.Event)] = passed
				}
			}
			if len(ids) != rounds {
				t.Fatalf("seed %d: rank %d crossed %d barriers, want %d (axiom 2.4)", seed, r, len(ids), rounds)
			}
			for k, id := range ids {
				if id != int32(100+k) {
					t.Fatalf("seed %d: rank %d crossed barrier %d as its %d-th, want %d (axiom 2.5)", seed, r, id, k+1, 100+k)
				}
			}
		}
		for j, evs := range h.byRank {
			for _, e := range evs {
				if e.Kind != core.EvUpdate {
					continue
				}
				i := int(e.From) - 1
				k := wkey(e.Event)
				// Written before i entered barrier b → seen at j before j
				// crossed b.
				if before := enteredBefore[i][k]; before < rounds {
					if pass := passAt[j][before+1]; pass < e.index {
						t.Fatalf("seed %d: rank %d wrote %+v before barrier %d, rank %d saw it after crossing that barrier (axiom 2.6)", seed, i, k, before+1, j)
					}
				}
				// Written after i crossed barrier b → seen at j only once
				// j has crossed b. Applying it while j waits at b for a
				// third member would let that member's older writes, still
				// being repaired, overwrite it: the wait condition (WC,
				// thesis def. 7.3) holds it until j crosses.
				if after := passedBefore[i][k]; after > 0 {
					if pass := passAt[j][after]; pass > e.index {
						t.Fatalf("seed %d: rank %d wrote %+v after barrier %d, rank %d saw it before crossing that barrier (axiom 2.7)", seed, i, k, after, j)
					}
				}
			}
		}
	}
}

// lockProgram: critical sections on two locks, each incrementing the
// lock's counter and writing a record under it, with unsynchronised
// writes to the member's own locations in between.
func lockProgram(sections int, reads *[][]uint64) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := attach(n, 1, 2+8*n.Size(), 8)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(n.Rank()), 11))
		seq := 0
		for range sections {
			lock := rng.IntN(2)
			for range rng.IntN(4) { // outside any lock: own locations
				seq++
				if err := s.Write(2+8*n.Rank()+rng.IntN(8), writeValue(n.Rank(), seq, 8)); err != nil {
					return err
				}
			}
			if err := n.Lock(ctx, lock); err != nil {
				return err
			}
			b, err := s.Read(lock, make([]byte, 8))
			if err != nil {
				return err
			}
			v := binary.BigEndian.Uint64(b)
			if reads != nil {
				(*reads)[lock] = append((*reads)[lock], v)
			}
			if err := s.Write(lock, binary.BigEndian.AppendUint64(nil, v+1)); err != nil {
				return err
			}
			if err := n.Unlock(lock); err != nil {
				return err
			}
		}
		return n.Barrier(ctx, 1)
	}
}

// Axiom 2.8: every acquire is seen (permitted) by every other member.
// Axiom 2.9: every acquire has its release. Axiom 2.10: acquires of a
// lock are ordered — the holder's release comes before its permission to
// the next, who saw the earlier acquire first — and never overlap.
// Axiom 2.11: updates a member wrote before permitting an acquire are
// seen by the acquirer before it acquires.
func TestAxioms2_8to2_11Locks(t *testing.T) {
	for seed := range uint64(axiomSeeds) {
		checkLockAxioms(t, seed, runSim(t, 4, seed, dsm.Config{}, lockProgram(25, nil)), 4, 25)
	}
}

// checkLockAxioms checks axioms 2.8–2.11 on a history of
// lockProgram(sections) on n members.
func checkLockAxioms(t *testing.T, seed uint64, h *history, n, sections int) {
	t.Helper()
	type req struct {
		rank int
		lock int32
		ts   uint64
	}
	acquired := map[req]int{} // → global index
	released := map[req]int{}
	permits := map[req][]event{} // permits given to the request
	for r, evs := range h.byRank {
		var held *req
		for _, e := range evs {
			switch e.Kind {
			case core.EvLockAcquire:
				q := req{r, e.Lock, e.TS}
				acquired[q] = e.index
				held = &q
			case core.EvLockRelease:
				if held == nil || held.lock != e.Lock {
					t.Fatalf("seed %d: rank %d released lock %d it did not hold", seed, r, e.Lock)
				}
				released[*held] = e.index
				held = nil
			case core.EvLockPermit:
				q := req{int(e.To) - 1, e.Lock, e.TS}
				permits[q] = append(permits[q], e)
			}
		}
		if held != nil {
			t.Fatalf("seed %d: rank %d never released lock %d (axiom 2.9)", seed, r, held.lock)
		}
	}
	if len(acquired) != n*sections {
		t.Fatalf("seed %d: %d acquires, want %d", seed, len(acquired), n*sections)
	}
	for q, at := range acquired {
		rel, ok := released[q]
		if !ok || rel < at {
			t.Fatalf("seed %d: acquire %+v has no release after it (axiom 2.9)", seed, q)
		}
		from := map[int]event{}
		for _, p := range permits[q] {
			from[p.rank] = p
		}
		for j := range n {
			if j == q.rank {
				continue
			}
			p, ok := from[j]
			if !ok || p.index > at {
				t.Fatalf("seed %d: rank %d acquired lock %d without rank %d's permission first (axiom 2.8)", seed, q.rank, q.lock, j)
			}
			// Axiom 2.11: j's writes before its permission are seen
			// by q.rank before the acquire.
			wrote := map[writeKey]bool{}
			for _, e := range h.byRank[j] {
				if e.index > p.index {
					break
				}
				if e.Kind == core.EvWrite {
					wrote[wkey(e.Event)] = true
				}
			}
			for _, e := range h.byRank[q.rank] {
				if e.index > at {
					break
				}
				if e.Kind == core.EvUpdate && e.From == idOf(j) {
					delete(wrote, wkey(e.Event))
				}
			}
			// A location j wrote twice before permitting leaves only
			// the last value to check; all updates are in order, so
			// the earlier ones were applied as well.
			if len(wrote) > 0 {
				for k := range wrote {
					t.Fatalf("seed %d: rank %d wrote %+v before permitting rank %d's acquire of lock %d; not seen before the acquire (axiom 2.11)", seed, j, k, q.rank, q.lock)
				}
			}
		}
		// Axiom 2.10: no other acquire of the lock overlaps this one.
		for q2, at2 := range acquired {
			if q2 != q && q2.lock == q.lock && at2 > at && at2 < rel {
				t.Fatalf("seed %d: rank %d acquired lock %d at %d while rank %d held it (%d..%d) (axiom 2.10)", seed, q2.rank, q.lock, at2, q.rank, at, rel)
			}
		}
	}
	// Axiom 2.10's ordering at the holder: a member that held the
	// lock permits a later request only after releasing.
	for q, ps := range permits {
		for _, p := range ps {
			for q2, at2 := range acquired {
				if q2.rank == p.rank && q2.lock == q.lock && at2 < p.index && released[q2] > p.index {
					t.Fatalf("seed %d: rank %d permitted rank %d's acquire of lock %d while holding it (axiom 2.10)", seed, p.rank, q.rank, q.lock)
				}
			}
		}
	}
}

// Between two members a lock-protected counter is exact: each critical
// section reads the value the previous one wrote. (With three or more it
// need not be: BDSM is not causal, see docs/dsm.md — a member may apply
// an old holder's update after a newer holder's, and the model promises
// sequential consistency only to programs whose writes by different
// members are separated by barriers, definition 2.2.)
func TestLockCounterTwoMembers(t *testing.T) {
	for seed := range uint64(axiomSeeds) {
		reads := make([][]uint64, 2)
		runSim(t, 2, seed, dsm.Config{}, lockProgram(40, &reads))
		for lock, vs := range reads {
			seen := make([]bool, len(vs))
			for _, v := range vs {
				if v >= uint64(len(vs)) || seen[v] {
					t.Fatalf("seed %d: lock %d: counter reads %v are not a permutation of 0..%d", seed, lock, vs, len(vs)-1)
				}
				seen[v] = true
			}
		}
	}
}

// The thesis's error cases of §2.3 are errors, with clear text.
func TestAPIErrors(t *testing.T) {
	ctx := context.Background()
	_, err := dsmsim.Run(dsmsim.Config{Members: 2, Seed: 1}, func(n *dsm.Node) error {
		if n.Rank() == 1 {
			_, err := n.JoinSegment(ctx, 9, 10, 4)
			var ge *dsm.GeometryError
			if !errors.As(err, &ge) || ge.Have != (dsm.Geometry{Locations: 10, LocationSize: 8}) || ge.Want != (dsm.Geometry{Locations: 10, LocationSize: 4}) ||
				err.Error() != "dsm: segment 9: geometry 10 locations of 4 bytes differs from its creator's (member 1): 10 locations of 8 bytes" {
				return fmt.Errorf("join with another geometry: %v", err)
			}
			if _, err := n.CreateSegment(9, 10, 8); !errors.Is(err, dsm.ErrExists) {
				return fmt.Errorf("create of an existing key: %v", err)
			}
			return n.Barrier(ctx, 1)
		}
		s, err := n.CreateSegment(9, 10, 8)
		if err != nil {
			return err
		}
		if err := s.Write(10, make([]byte, 8)); err == nil || err.Error() != "dsm: segment 9: location 10 is outside the segment's 10 locations" {
			return fmt.Errorf("write past the end: %v", err)
		}
		if _, err := s.WriteBulk(8, make([]byte, 24)); err == nil || err.Error() != "dsm: segment 9: locations 8..10 are outside the segment's 10 locations" {
			return fmt.Errorf("bulk write past the end: %v", err)
		}
		if err := s.Write(0, make([]byte, 4)); err == nil || err.Error() != "dsm: value is 4 bytes, want 8 bytes (segment 9's location size)" {
			return fmt.Errorf("short value: %v", err)
		}
		max := n.MaxMessage() - core.UpdateOverhead
		if _, err := n.CreateSegment(10, 1, max+1); err == nil || err.Error() != fmt.Sprintf("dsm: location size is %d bytes, want 1..%d bytes (what one %d-byte message carries after its %d bytes of header)", max+1, max, n.MaxMessage(), core.UpdateOverhead) {
			return fmt.Errorf("location larger than a frame: %v", err)
		}
		if _, err := n.CreateSegment(11, 1, max); err != nil {
			return fmt.Errorf("location of a full frame: %v", err)
		}
		if err := n.Unlock(3); !errors.Is(err, dsm.ErrNotHeld) {
			return fmt.Errorf("release of a lock not held: %v", err)
		}
		if err := n.Lock(ctx, 3); err != nil {
			return err
		}
		if err := n.Lock(ctx, 4); !errors.Is(err, dsm.ErrSecondLock) || err.Error() != "dsm: a lock is already held: acquiring lock 4 while holding lock 3" {
			return fmt.Errorf("second lock: %v", err)
		}
		if err := n.Unlock(4); !errors.Is(err, dsm.ErrNotHeld) {
			return fmt.Errorf("release of another lock: %v", err)
		}
		if err := n.Unlock(3); err != nil {
			return err
		}
		if err := s.Remove(); err != nil {
			return err
		}
		if err := s.Write(0, make([]byte, 8)); !errors.Is(err, dsm.ErrRemoved) {
			return fmt.Errorf("write to a removed segment: %v", err)
		}
		if s.View() != nil {
			return fmt.Errorf("removed segment still has a view")
		}
		again, err := n.JoinSegment(ctx, 9, 10, 8)
		if err != nil {
			return fmt.Errorf("joining a removed segment again: %v", err)
		}
		if err := again.Write(0, make([]byte, 8)); err != nil {
			return fmt.Errorf("write after joining again: %v", err)
		}
		if err := n.Barrier(ctx, 1); err != nil {
			return err
		}
		if err := n.Exit(); err != nil {
			return err
		}
		if err := n.Barrier(ctx, 2); !errors.Is(err, dsm.ErrClosed) {
			return fmt.Errorf("barrier after exit: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
