package dsm_test

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/dsm/dsmsim"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/testnet"
)

// The fixture of the WC tests (wc_*_test.go): a simulated run in which
// rank 0, a barrier ahead, writes a segment it shares with the others
// while they compute, and WC holds it in the reliable window
// (docs/dsm.md, "How much WC copies"); the counters they read of it.

// wcSim is one simulated run of a WC test. Every write is a message of
// its own (dsm.Config.Unbuffered) unless buffered, and the run may take
// a minute of virtual time.
type wcSim struct {
	members  int                // ranks; 2 when 0
	seed     uint64             // the network's
	in       testnet.Impairment // on every frame every node receives
	views    bool               // dsmsim.Config.Views
	channels bool               // dsm.Config.Channels
	own      bool               // dsm.Config.AllMemberChannels: the shared segment on a channel of its own
	copies   int                // dsm.Config.WCCopies (-1: every hold at once)
	timed    bool               // dsm.Config.Timed
	buffered bool               // no dsm.Config.Unbuffered
	window   int                // reliable.Config.Window; wcWindow when 0
	trace    func(rank int, ev dsm.TraceEvent)
	late     func(*dsm.Node) error // dsmsim.Config.LateProgram, started lateAt in
	lateAt   time.Duration
	what     string // what the run is, in its failure's message
}

// wcResult is a wcSim's run and the counters the WC tests read of it.
type wcResult struct {
	dsmsim.Result
	sim wcSim
	key uint32 // the shared segment's
}

// run runs program on every rank of w; a run that fails ends the test.
func (w wcSim) run(t *testing.T, program func(*dsm.Node) error) wcResult {
	t.Helper()
	if w.members == 0 {
		w.members = 2
	}
	if w.window == 0 {
		w.window = wcWindow
	}
	cfg := dsmsim.Config{Members: w.members, Seed: w.seed, In: w.in, Views: w.views, Trace: w.trace, Timeout: time.Minute,
		LateProgram: w.late, LateAt: w.lateAt,
		Node: dsm.Config{Channels: w.channels, AllMemberChannels: w.own, Unbuffered: !w.buffered, WCCopies: w.copies, Timed: w.timed,
			Group: reliable.Config{Window: w.window}}}
	res, err := dsmsim.Run(cfg, program)
	if err != nil {
		if w.what != "" {
			t.Fatalf("seed %d: %s: %v", w.seed, w.what, err)
		}
		t.Fatalf("seed %d: %v", w.seed, err)
	}
	return wcResult{Result: res, sim: w}
}

// hold runs wcProgram(compute): rank 0 writes wcLocs messages while
// rank 1 computes.
func (w wcSim) hold(t *testing.T, compute time.Duration) wcResult {
	t.Helper()
	res := w.run(t, wcProgram(compute))
	res.key = wcKey
	return res
}

// crash runs crashProgram(crashAfter) on crashMembers ranks: rank 0
// writes, then crashes. It returns what each survivor read.
func (w wcSim) crash(t *testing.T, crashAfter time.Duration) (wcResult, [][]byte) {
	t.Helper()
	mem := make([][]byte, crashMembers)
	w.members = crashMembers
	w.what = "the survivors did not get past the crash"
	res := w.run(t, crashProgram(crashAfter, mem))
	res.key = crashKey
	return res, mem
}

// wcRow names a wcSim: a row of a WC test's table, run as a subtest.
type wcRow struct {
	name string
	sim  wcSim
}

// holdRows runs each row's sim at seed 1 with hold(compute), a subtest
// each, and hands check its result.
func holdRows(t *testing.T, compute time.Duration, rows []wcRow, check func(*testing.T, wcResult)) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			w := row.sim
			w.seed = 1
			check(t, w.hold(t, compute))
		})
	}
}

// link is rank's counters of the reliable group the shared segment
// travels on: its own channel's, or the global group's.
func (r wcResult) link(rank int) reliable.Stats {
	if r.sim.channels && r.sim.own {
		return r.Stats[rank].Channels[r.key]
	}
	return r.Stats[rank].Group
}

func (r wcResult) linkName() string {
	if r.sim.channels && r.sim.own {
		return "channel"
	}
	return "global group"
}

// logHold logs what rank 0 sent and rank 1 copied and held in a hold
// run.
func (r wcResult) logHold(t *testing.T) {
	t.Helper()
	slow, fast := r.Stats[1], r.Stats[0]
	sent := r.link(0).Protocol
	t.Logf("rank 0 sent %d update messages (%d B); rank 1 copied %d (peak %d B), held %d frames; rank 0 sent %d frames, retransmitted %d; %v virtual",
		fast.Updates, fast.UpdateBytes, slow.Held, slow.HeldPeak, r.link(1).HeldData, sent.Sent, sent.Retransmitted, r.Elapsed)
}

// checkHold logs a hold run and checks that rank 1 held rank 0 in the
// window. When bounded (compute shorter than the hold's bound, a
// quarter of the failure timeout: 500 ms) it also checks that the hold
// was released at the crossing, that no frame was sent twice but lost
// ones, and that rank 1 copied at most WCCopies and a window — nothing
// of the whole phase with WCCopies -1.
func (r wcResult) checkHold(t *testing.T, compute time.Duration, bounded bool) {
	t.Helper()
	r.logHold(t)
	slow, fast := r.Stats[1], r.Stats[0]
	if r.link(1).HeldData == 0 {
		t.Errorf("rank 1's %s held no frame: the hold never took effect", r.linkName())
	}
	if !bounded {
		return
	}
	// Released at the crossing, not at the hold's bound (500 ms later).
	// Under loss a lost tail whose first probe is lost too costs 30 ms
	// more (the resend timer's probe at 10 ms, again 20 ms later): seed
	// 1 with frames of 1424 bytes (channels that relay,
	// pbp.Config.Relay) took 132.7 ms so.
	limit := compute + 20*time.Millisecond
	if r.sim.in.Loss > 0 {
		limit = compute + 50*time.Millisecond
	}
	if r.sim.views {
		// The founders listen for a running group for half the failure
		// timeout (view.Config.Listen) before they found one: the run
		// without the hold took 1.100 s.
		limit += time.Second
	}
	if r.Elapsed > limit {
		t.Errorf("the run took %v, want at most %v: the hold was not released at the crossing", r.Elapsed, limit)
	}
	// Held frames wait in rank 1's window (pbp's hold) and are delivered
	// from it at the release: none is sent twice.
	if sent := r.link(0).Protocol; r.sim.in == (testnet.Impairment{}) && sent.Retransmitted != 0 {
		t.Errorf("rank 0 retransmitted %d frames, want none: held frames are delivered from the receiver's window", sent.Retransmitted)
	}
	copies := max(r.sim.copies, 0)
	if bound := uint64(copies + wcWindow*testnet.DefaultMTU); slow.HeldPeak > bound {
		t.Errorf("rank 1 copied up to %d B for WC of rank 0's %d B, want at most WCCopies (%d B) and a window (%d frames of %d B): %d B",
			slow.HeldPeak, fast.UpdateBytes, copies, wcWindow, testnet.DefaultMTU, bound)
	}
	if r.sim.copies < 0 && slow.HeldPeak >= fast.UpdateBytes/4 {
		t.Errorf("rank 1 copied up to %d B of rank 0's %d B: the hold did not bound it", slow.HeldPeak, fast.UpdateBytes)
	}
}

// checkCopiesFirst checks that rank 1 copied WCCopies before the window
// held, when WCCopies is positive.
func (r wcResult) checkCopiesFirst(t *testing.T) {
	t.Helper()
	if r.sim.copies > 0 && r.Stats[1].HeldPeak < uint64(r.sim.copies) {
		t.Errorf("rank 1 copied up to %d B, want at least WCCopies (%d B) before the window holds", r.Stats[1].HeldPeak, r.sim.copies)
	}
}

// checkCrash checks a crash run: each survivor read a prefix of rank 0's
// writes (axiom 2.3) and both read the same; when removed, each
// survivor's link removed rank 0 having delivered every frame it sent,
// discarding none. It returns the frames the survivors held.
func (r wcResult) checkCrash(t *testing.T, mem [][]byte, removed bool) (held uint64) {
	t.Helper()
	seed := r.sim.seed
	sent := r.link(0).Protocol.Sent
	var seen [crashMembers]int
	for rank := 1; rank < crashMembers; rank++ {
		held += r.link(rank).HeldData
		k, err := seenPrefix(mem[rank])
		if err != nil {
			t.Fatalf("seed %d: rank %d: %v", seed, rank, err)
		}
		seen[rank] = k
		if !removed {
			continue
		}
		var failed bool
		for _, ev := range r.link(rank).Events {
			if ev.Kind == reliable.MemberFailed && ev.Member == 1 {
				failed = true
				if uint64(ev.Delivered) != sent || ev.Discarded != 0 {
					t.Errorf("seed %d: rank %d delivered rank 0's frames up to %d, discarding %d messages; rank 0 sent %d frames: want all delivered",
						seed, rank, ev.Delivered, ev.Discarded, sent)
				}
			}
		}
		if !failed {
			t.Errorf("seed %d: rank %d's %s never removed rank 0: events %v", seed, rank, r.linkName(), r.link(rank).Events)
		}
	}
	if string(mem[1]) != string(mem[2]) {
		t.Errorf("seed %d: the survivors' memories differ: rank 1 read %d of rank 0's writes, rank 2 %d", seed, seen[1], seen[2])
	}
	return held
}

// relayedBy is how many frames of a dead member's the group of st
// relayed to the others (pbp.Config.Relay).
func relayedBy(st reliable.Stats) uint64 {
	if d, ok := st.Protocol.Detail.(pbp.Stats); ok {
		return d.Relayed
	}
	return 0
}
