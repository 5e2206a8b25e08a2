package dsm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/core"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/testnet"
)

// A member dies with its last write on a segment channel delivered at
// one survivor only, and the global group reports it failed before the
// channel's relay has brought that write to the other (docs/dsm.md, "When
// a member dies with frames on the wire"). Rank 0 writes goneLocs
// locations of the segment it shares with ranks 1 and 2, one every
// 10 ms, so its channel is busy while its global channel is quiet; rank
// 2 stops hearing rank 0 just before its last write, and rank 0 crashes
// right after it. The survivors then enter barrier 2. They must cross it
// with every write of rank 0 that either delivered (axiom 2.7: no write
// of the phase before a crossing is applied after it), and read the
// same memory.

const (
	goneLocs = 10
	goneKey  = 42
)

// goneProgram records in mem[rank] what survivor rank read right after
// crossing barrier 2. With cutTo > 0, rank 2 also hears nothing from rank
// 1 between cutFrom and cutTo after barrier 1 (rank 1 enters barrier 2
// at cutTo): every relay of rank 1's in that time is lost.
func goneProgram(mem [][]byte, cutFrom, cutTo time.Duration) func(*dsm.Node) error {
	return func(n *dsm.Node) error {
		ctx := context.Background()
		s, err := sharedSegment(ctx, n, goneKey, goneLocs)
		if err != nil {
			return err
		}
		if n.Rank() == 0 {
			for loc := range goneLocs {
				if loc == goneLocs-1 {
					if err := dsmsim.Deafen(n, 2, 0, true); err != nil {
						return err
					}
				}
				if err := s.Write(loc, wcValue(1, loc)); err != nil {
					return err
				}
				if err := dsmsim.Compute(n, 10*time.Millisecond); err != nil {
					return err
				}
			}
			return dsmsim.Crash(n)
		}
		if err := dsmsim.Compute(n, 110*time.Millisecond); err != nil {
			return err
		}
		if cutTo > 0 && n.Rank() == 1 {
			// Rank 1's program steers the cut; its host keeps running.
			if err := dsmsim.Compute(n, cutFrom-110*time.Millisecond); err != nil {
				return err
			}
			if err := dsmsim.Deafen(n, 2, 1, true); err != nil {
				return err
			}
			if err := dsmsim.Compute(n, cutTo-cutFrom); err != nil {
				return err
			}
			if err := dsmsim.Deafen(n, 2, 1, false); err != nil {
				return err
			}
		}
		if err := n.Barrier(ctx, 2); err != nil {
			return err
		}
		buf := make([]byte, 8)
		for loc := range goneLocs {
			got, err := s.Read(loc, buf)
			if err != nil {
				return err
			}
			mem[n.Rank()] = append(mem[n.Rank()], got...)
		}
		return nil
	}
}

// runGone runs goneProgram and returns the survivors' memories and the
// axiom 2.7 violations: rank 0's writes applied at a survivor after it
// crossed barrier 2.
func runGone(t *testing.T, seed uint64, in testnet.Impairment, group reliable.Config, cutFrom, cutTo time.Duration) ([][]byte, []string, dsmsim.Result) {
	t.Helper()
	mem := make([][]byte, crashMembers)
	crossed := make([]bool, crashMembers)
	var late []string
	trace := func(rank int, ev dsm.TraceEvent) {
		switch {
		case ev.Kind == core.EvBarrierPass && ev.ID == 2:
			crossed[rank] = true
		case ev.Kind == core.EvUpdate && ev.From == 1 && crossed[rank]:
			late = append(late, fmt.Sprintf("rank %d applied rank 0's write of location %d after crossing barrier 2", rank, ev.Location))
		}
	}
	cfg := dsmsim.Config{Members: crashMembers, Seed: seed, In: in, Timeout: time.Minute, Trace: trace,
		Node: dsm.Config{Channels: true, AllMemberChannels: true, Unbuffered: true, Group: group}}
	res, err := dsmsim.Run(cfg, goneProgram(mem, cutFrom, cutTo))
	if err != nil {
		t.Fatalf("seed %d: the survivors did not get past the crash: %v", seed, err)
	}
	return mem, late, res
}

// checkGone checks a run of goneProgram: no write of rank 0's applied
// after a crossing of barrier 2, the survivors' memories equal and a
// prefix of rank 0's writes (axiom 2.3); with all, every write of rank 0
// read (none lost at both survivors). It returns the frames the
// survivors' channels relayed.
func checkGone(t *testing.T, name string, mem [][]byte, late []string, res dsmsim.Result, all bool) uint64 {
	t.Helper()
	for _, l := range late {
		t.Errorf("%s: %s (axiom 2.7)", name, l)
	}
	var relayed uint64
	for r := 1; r < crashMembers; r++ {
		if d, ok := res.Stats[r].Channels[goneKey].Protocol.Detail.(pbp.Stats); ok {
			relayed += d.Relayed
		}
	}
	if string(mem[1]) != string(mem[2]) {
		t.Errorf("%s: the survivors read different memories after barrier 2:\nrank 1 %x\nrank 2 %x", name, mem[1], mem[2])
	}
	k := 0
	for loc := range goneLocs {
		switch got := mem[1][8*loc : 8*loc+8]; {
		case string(got) == string(wcValue(1, loc)) && k == loc:
			k++
		case string(got) == string(make([]byte, 8)) && loc >= k:
		default:
			t.Errorf("%s: rank 1 read %x at location %d: not a prefix of rank 0's writes", name, got, loc)
		}
	}
	if all && (k != goneLocs || relayed == 0) {
		t.Errorf("%s: the survivors read %d of rank 0's %d writes, and %d frames were relayed: want all, relayed to rank 2", name, k, goneLocs, relayed)
	}
	return relayed
}

// The global group reports rank 0 failed first because it heard rank 0
// last earlier: rank 0's global channel was quiet since barrier 1 (its
// heartbeat due 100 ms after), its segment channel busy until the crash;
// with a failure timeout of 150 ms the report comes 60 ms after the
// crash, the channel's relay 75 ms after it. Before the barrier waited
// for the channel's removal, rank 2 crossed barrier 2 without rank 0's
// last write, read zero there, and applied the relayed write 15 ms later.
func TestChannelsGoneBeforeRelayQuietGlobal(t *testing.T) {
	group := reliable.Config{HeartbeatInterval: 100 * time.Millisecond, FailureTimeout: 150 * time.Millisecond}
	mem, late, res := runGone(t, 0, testnet.Impairment{}, group, 0, 0)
	checkGone(t, "no loss", mem, late, res, true)
	var relayed uint64
	seeds := uint64(axiomSeeds * 4)
	for seed := range seeds {
		mem, late, res := runGone(t, seed, lossy, group, 0, 0)
		relayed += checkGone(t, fmt.Sprintf("5 %% loss, seed %d", seed), mem, late, res, false)
	}
	if relayed == 0 {
		t.Errorf("no survivor relayed a frame of rank 0's in %d runs at 5 %% loss", seeds)
	}
}

// With the heartbeat's lead below half the failure timeout (heartbeat
// 400 ms, failure 1 s; 100 ms and 2 s by default) the relay starts before
// the global group's report and repeats every FailureTimeout/16: it comes
// after the report only if every relay is lost until then. Here rank 2
// hears nothing from rank 1 from 550 ms after barrier 1 (before the relay
// starts, about 590 ms) until 1.01 s, 5 ms after the report is due (a
// cut shorter than the failure timeout: nobody suspects rank 1). Before
// the barrier waited for the channel's removal, rank 2 crossed barrier 2
// on the report and rank 1's arrival, then applied the next relay.
func TestChannelsGoneBeforeRelayLostRelays(t *testing.T) {
	group := reliable.Config{HeartbeatInterval: 400 * time.Millisecond, FailureTimeout: time.Second}
	mem, late, res := runGone(t, 0, testnet.Impairment{}, group, 550*time.Millisecond, 1010*time.Millisecond)
	checkGone(t, "no loss", mem, late, res, true)
}
