package files

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
)

// manyFilesRun sends count files of 2 MB (1,367 blocks at MTU 1500) from
// member 0 to two receivers on testnet's lossless 1 Gbit/s segment, the
// pacer at 250 MB/s (faster than the link: the link's queue holds what
// the pacer sends ahead of it), as issue 20's fig. 5b runs on netns. It
// returns the sender's stats, the receivers' duplicate blocks, and when
// the last receiver had the last file.
func manyFilesRun(t *testing.T, count int) (Stats, uint64, time.Duration) {
	t.Helper()
	return manyFilesSized(t, count, 2_000_000)
}

func manyFilesSized(t *testing.T, count, size int) (Stats, uint64, time.Duration) {
	t.Helper()
	r := rand.NewChaCha8([32]byte{5, 'b'})
	var fs []*simFile
	for i := range count {
		f := &simFile{name: fmt.Sprintf("many/%03d", i), data: make([]byte, size)}
		r.Read(f.data)
		f.hash = sha256.Sum256(f.data)
		fs = append(fs, f)
	}
	sc := &scenario{seed: 1, n: 3, link: simtest.Link{MTU: 1500}, files: [][]*simFile{fs}, senders: 1,
		crash: map[int][2]time.Duration{}, late: map[int]time.Duration{}, ghost: -1, refuse: -1, rate: 250_000_000}
	s, err := runSim(t, sc, nil)
	if err != nil {
		t.Fatalf("%v\n%v", err, sc)
	}
	var dups uint64
	var last time.Duration
	for _, n := range s.nodes[1:] {
		if len(n.received) != count {
			t.Fatalf("member %d received %d of %d files", n.id, len(n.received), count)
		}
		dups += n.core.stats.Duplicates
		for _, rep := range n.reports {
			if rep.Kind == Received {
				last = max(last, s.clock.Wall(rep.At).Sub(s.start))
			}
		}
	}
	return s.nodes[0].core.stats, dups, last
}

// TestManyFilesLossless: with no loss, a run of many files is sent once
// (issue 20, fig. 5b). Each 2 MB file's pass is shorter than the window
// and the pacer outruns the link: the link's queue grew file by file
// (nothing bounded the blocks in flight over files) until a receiver's
// first report on a file came after that file's pass had ended, and the
// sender, with no round trip measured on that receiver for the file,
// declared every block after the report's position lost and repaired
// the whole file to the group: 4,197 repairs at 15 files, 11,192 at 20,
// 21,853 at 30, 83,095 at 100, every one a block the receivers held.
// The round trip carried over from the files before (latestRTT) and the
// window spanning files (windowOpen) each prevent it here; beyond about
// 100 files only the window does (TestWindowSpansFiles).
func TestManyFilesLossless(t *testing.T) {
	for _, count := range []int{12, 25} {
		st, dups, took := manyFilesRun(t, count)
		t.Logf("%d files of 2 MB: %d blocks sent, %d repaired (%d to the group), %d window stalls; receivers' duplicates %d; %v",
			count, st.BlocksSent, st.BlocksRepaired, st.RepairsToGroup, st.WindowStalls, dups, took)
		if st.BlocksRepaired != 0 || dups != 0 {
			t.Errorf("%d files, no loss: %d blocks repaired, %d duplicates at the receivers; want none", count, st.BlocksRepaired, dups)
		}
	}
}

// passBlocks counts the pass's FileData frames (not repairs) c sent.
func passBlocks(t *testing.T, c *Core) (n int) {
	t.Helper()
	_, vs := sent(t, c)
	for _, v := range vs {
		if v.Type() == frame.FileData && v.Flags()&frame.FlagRetransmit == 0 {
			n++
		}
	}
	return n
}

// The window spans files: files shorter than it go out only as far as
// Window blocks past the receivers' positions, counted over the
// sender's passes, and a receiver not heard on a file yet counts at its
// position in the files before. Three files of 5 blocks, Window 8, both
// receivers at block 0 of the first: 8 blocks go (the first file and 3
// of the second), not all 15; once both hold the first file, 5 more.
func TestWindowSpansFiles(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Window = 8; c.Burst = 1; c.Rate = 1e9 })
	data := make([]byte, 50)
	var ids []uint32
	for _, name := range []string{"a", "b", "c"} {
		id, err := s.Send(1, Outgoing{Name: name, Size: 50, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var seq uint32
	report := func(now Time, id uint32, state frame.FileState, top uint32) {
		for _, m := range []struct {
			id  frame.MemberID
			inc uint32
			mac [6]byte
		}{{2, 22, macB}, {3, 33, macC}} {
			seq++
			s.Step(now, m.mac, macA, encode(t, m.id, m.inc, seq, frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: state, Credit: 10, Held: top, Top: top}))
		}
	}
	// The first file's offer goes, and a block (Burst 1); both receivers
	// report it, at block 0.
	s.Tick(2)
	blocks := passBlocks(t, s)
	report(3, ids[0], frame.FileReceiving, 0)
	for now := Time(4); now < Time(10*Millisecond); now += Time(100 * Microsecond) {
		s.Tick(now)
		blocks += passBlocks(t, s)
	}
	blocks += passBlocks(t, s)
	if blocks != 8 {
		t.Fatalf("the passes sent %d blocks with the receivers at block 0 of the first file; want Window 8", blocks)
	}
	if f := s.passing(); f == nil || f.meta.ID != ids[1] || f.next != 3 {
		t.Fatalf("passing %+v, want file %d at block 3", f, ids[1])
	}
	report(Time(10*Millisecond), ids[0], frame.FileDone, 5)
	blocks += passBlocks(t, s)
	for now := Time(11 * Millisecond); now < Time(20*Millisecond); now += Time(100 * Microsecond) {
		s.Tick(now)
		blocks += passBlocks(t, s)
	}
	if blocks != 13 {
		t.Fatalf("the passes sent %d blocks with the receivers holding the first file (5 blocks); want 5 + Window 8", blocks)
	}
}

// A receiver's first report on a file that comes after the file's pass
// ended (the pass ran ahead of the link's queues) finds the blocks after
// its position still in flight: they are not due before the round trip
// measured on it in the file before. With no round trip on the new
// record they were due at once (the rto of the idle start), and the
// whole file was repaired to the group though it arrived.
func TestFirstReportTakesMeasuredRTT(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Burst = 64; c.Rate = 1e9; c.Members = members()[:2] })
	data := make([]byte, 40)
	var ids []uint32
	for _, name := range []string{"a", "b"} {
		id, err := s.Send(1, Outgoing{Name: name, Size: 40, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Both passes go at once (no receiver heard), ending at 2.
	s.Tick(2)
	if n := passBlocks(t, s); n != 8 || s.passing() != nil {
		t.Fatalf("the passes sent %d blocks by 2, want both files' 8", n)
	}
	var seq uint32
	report := func(now Time, id uint32, state frame.FileState, top uint32, missing ...frame.Range) {
		seq++
		s.Step(now, macB, macA, encode(t, 2, 22, seq, frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: state, Credit: 10,
			Held: top, Top: top, Missing: missing}))
	}
	// 50 ms of queues: the first file's last block is reported 50 ms
	// after it went, the second file's offer at 51 ms.
	report(Time(50*Millisecond), ids[0], frame.FileReceiving, 4)
	report(Time(51*Millisecond), ids[1], frame.FileReceiving, 0)
	repairs := 0
	for now := Time(51 * Millisecond); now < Time(53*Millisecond); now += Time(100 * Microsecond) {
		s.Tick(now)
		_, vs := sent(t, s)
		for _, v := range vs {
			if v.Type() == frame.FileData {
				repairs++
			}
		}
	}
	report(Time(53*Millisecond), ids[1], frame.FileDone, 4)
	if repairs != 0 || s.stats.BlocksRepaired != 0 {
		t.Fatalf("%d blocks sent again (%d repairs) to a receiver 50 ms of queue away, 1 ms after it reported the second file at block 0", repairs, s.stats.BlocksRepaired)
	}
}
