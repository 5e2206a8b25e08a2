package files

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// mesh runs file cores 1..n on a lossless segment of fixed latency, in
// virtual time: the tests of a pass that every receiver holds.
type mesh struct {
	t     *testing.T
	cores []*Core // by member id - 1
	sinks []*memSink
	macs  [][6]byte
	now   Time
	queue []meshFrame
	// drop: a frame from member `from` to member `to` is lost.
	drop func(from, to frame.MemberID, v frame.View) bool
	// Sender 1's FileData frames: the pass's and the repairs.
	pass, repairs int
	reports       []Report
}

type meshFrame struct {
	at       Time
	from, to int
	dst      [6]byte
	v        frame.View
}

const meshLatency = 20 * Microsecond

// newMesh makes members 1..3 (those of members()), each with a sink
// holding stored[i] under the name "f" (none if nil).
func newMesh(t *testing.T, stored [3][]byte, edit func(*Config)) *mesh {
	m := &mesh{t: t, now: 1}
	for i, mi := range members() {
		s := newMemSink(func(f string, a ...any) { t.Fatalf(f, a...) })
		if stored[i] != nil {
			s.stored["f"] = bytes.Clone(stored[i])
		}
		m.sinks = append(m.sinks, s)
		m.cores = append(m.cores, newCore(t, mi.ID, s, func(c *Config) {
			c.BlockSize = 1000
			if edit != nil {
				edit(c)
			}
		}))
		m.macs = append(m.macs, mi.MAC)
	}
	return m
}

// collect queues every core's frames for delivery.
func (m *mesh) collect() {
	for i, c := range m.cores {
		dsts, vs := sent(m.t, c)
		for k, v := range vs {
			if i == 0 && v.Type() == frame.FileData {
				if v.Flags()&frame.FlagRetransmit != 0 {
					m.repairs++
				} else {
					m.pass++
				}
			}
			for j := range m.cores {
				if j == i || dsts[k] != c.cfg.Dst && dsts[k] != m.macs[j] {
					continue
				}
				if m.drop != nil && m.drop(frame.MemberID(i+1), frame.MemberID(j+1), v) {
					continue
				}
				m.queue = append(m.queue, meshFrame{at: m.now.Add(meshLatency), from: i, to: j, dst: dsts[k], v: v})
			}
		}
	}
}

// run steps the mesh until done says so or a virtual minute passed;
// each is called at every step.
func (m *mesh) run(done func() bool, each func()) {
	m.t.Helper()
	for end := m.now.Add(60 * Second); !done(); {
		m.collect()
		next := Time(0)
		for _, f := range m.queue {
			if next == 0 || f.at < next {
				next = f.at
			}
		}
		for _, c := range m.cores {
			if d := c.Deadline(); d != 0 && (next == 0 || d < next) {
				next = d
			}
		}
		if next == 0 || next > end {
			m.t.Fatalf("at %v: stuck (next step %v)", m.now, next)
		}
		m.now = max(m.now, next)
		var rest []meshFrame
		for _, f := range m.queue {
			if f.at > m.now {
				rest = append(rest, f)
				continue
			}
			m.cores[f.to].Step(m.now, m.macs[f.from], f.dst, f.v)
		}
		m.queue = rest
		for _, c := range m.cores {
			if d := c.Deadline(); d != 0 && d <= m.now {
				c.Tick(m.now)
			}
		}
		for _, c := range m.cores {
			m.reports = append(m.reports, c.Reports()...)
		}
		if each != nil {
			each()
		}
	}
}

// verdict is sender 1's verdict, if out.
func (m *mesh) verdict() *Report {
	for i := range m.reports {
		if m.reports[i].Kind == Verdict {
			return &m.reports[i]
		}
	}
	return nil
}

func skipData(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*13 + i>>8)
	}
	return data
}

// sendF queues data as "f" at member 1, without a hash (the pass hashes
// it).
func (m *mesh) sendF(data []byte) {
	m.t.Helper()
	if _, err := m.cores[0].Send(m.now, Outgoing{Name: "f", Size: uint64(len(data)), Source: &memSource{data: data, bs: 1000, fail: -1}}); err != nil {
		m.t.Fatal(err)
	}
}

// wantAll checks the verdict names members 2 and 3 done and that both
// committed data.
func (m *mesh) wantAll(data []byte) {
	m.t.Helper()
	v := m.verdict()
	if v == nil || !slices.Equal(v.Done, []frame.MemberID{2, 3}) || len(v.Missing) != 0 || v.Meta.Hash != sha256.Sum256(data) {
		m.t.Fatalf("verdict %v, want 2 and 3 done with the file's hash", v)
	}
	for i := 1; i < 3; i++ {
		if got := m.sinks[i].stored["f"]; !bytes.Equal(got, data) {
			m.t.Fatalf("member %d stores %d bytes that are not the file's", i+1, len(got))
		}
	}
}

// Every receiver holds the file: the pass stops after what went before
// their first reports (the pacer's first burst, and a round trip), the sender hashes the
// rest, and FileEnd's hash is checked; nothing is written (the memory
// sink fails a write of a block it holds).
func TestSkipPassAllHold(t *testing.T) {
	data := skipData(200_000)
	m := newMesh(t, [3][]byte{nil, data, data}, nil)
	m.sendF(data)
	m.run(func() bool { return m.verdict() != nil }, nil)
	m.wantAll(data)
	st := m.cores[0].stats
	t.Logf("200 blocks: %d pass blocks, %d repairs, %d skipped, done at %v", m.pass, m.repairs, st.BlocksSkipped, m.now)
	if m.pass > DefaultBurst+8 || m.repairs != 0 || st.PassesSkipped != 1 || st.BlocksSkipped != uint64(200-m.pass) {
		t.Fatalf("sent %d pass blocks and %d repairs, stats %+v; want at most the first burst, no repairs, the rest skipped", m.pass, m.repairs, st)
	}
	for i := 1; i < 3; i++ {
		if s := m.cores[i].stats; s.FilesHeld != 1 || s.BlocksReceived != 0 {
			t.Fatalf("member %d: stats %+v, want the file held, no block received", i+1, s)
		}
	}
}

// One receiver holds the file, the other does not: the whole pass goes.
func TestSkipPassOneLacks(t *testing.T) {
	data := skipData(200_000)
	m := newMesh(t, [3][]byte{nil, data, nil}, nil)
	m.sendF(data)
	m.run(func() bool { return m.verdict() != nil }, nil)
	m.wantAll(data)
	if st := m.cores[0].stats; m.pass != 200 || st.PassesSkipped != 0 || st.BlocksSkipped != 0 {
		t.Fatalf("sent %d pass blocks, stats %+v; want the whole pass", m.pass, st)
	}
}

// Both receivers store a file of the name and size; one of them is
// another file. The pass stops, and at FileEnd the one whose hash does
// not match fetches every block by repair (from the source: the pass
// never sent them) and ends with the sender's bytes.
func TestSkipPassOneMismatch(t *testing.T) {
	data := skipData(200_000)
	other := bytes.Clone(data)
	other[123_456] ^= 1
	m := newMesh(t, [3][]byte{nil, data, other}, nil)
	m.sendF(data)
	m.run(func() bool { return m.verdict() != nil }, nil)
	m.wantAll(data)
	st := m.cores[0].stats
	t.Logf("%d pass blocks, %d repairs, %d skipped, done at %v", m.pass, m.repairs, st.BlocksSkipped, m.now)
	if m.pass > DefaultBurst+8 || st.PassesSkipped != 1 || m.repairs < 200-m.pass || m.repairs > 220 {
		t.Fatalf("sent %d pass blocks and %d repairs, stats %+v; want the pass skipped and the rest repaired about once", m.pass, m.repairs, st)
	}
	if s := m.cores[2].stats; s.HeldMismatches != 1 || s.FilesHeld != 0 {
		t.Fatalf("member 3: stats %+v, want one held mismatch", s)
	}
	var replaced bool
	for _, r := range m.reports {
		replaced = replaced || r.Kind == Received && r.Meta.Sender == 1 && r.Replaced
	}
	if !replaced {
		t.Fatalf("reports %v: none replaced the stored file", m.reports)
	}
}

// A receiver whose reports are lost is never taken to hold the file: the
// pass goes on while member 3 is unheard, and stops once it is heard.
func TestSkipPassReportLost(t *testing.T) {
	data := skipData(2_000_000)
	for _, tc := range []struct {
		name  string
		until Time // member 3's reports are lost before
		pass  int  // the pass sends at least
	}{
		{"lost throughout", Time(Second), 2000},
		{"lost at first", Time(Millisecond), 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t, [3][]byte{nil, data, data}, nil)
			m.drop = func(from, to frame.MemberID, v frame.View) bool {
				return from == 3 && v.Type() == frame.FileStatus && m.now < tc.until
			}
			m.sendF(data)
			m.run(func() bool { return m.verdict() != nil }, nil)
			m.wantAll(data)
			st := m.cores[0].stats
			t.Logf("%d pass blocks, %d skipped", m.pass, st.BlocksSkipped)
			if m.pass < tc.pass || m.pass+int(st.BlocksSkipped) != 2000 || (m.pass < 2000) != (st.PassesSkipped == 1) {
				t.Fatalf("sent %d pass blocks, stats %+v; want at least %d", m.pass, st, tc.pass)
			}
		})
	}
}

// A member that joins while the pass is skipped, and has not said it
// holds the file, makes it go on from where it stopped (it is in the
// snapshot: the verdict waits for it); it fetches the blocks before
// that by repair.
func TestSkipPassMemberJoins(t *testing.T) {
	data := skipData(20_000_000) // five chunks of hashing
	m := newMesh(t, [3][]byte{nil, data, nil}, nil)
	m.cores[0].SetMembers(members()[:2])
	m.cores[1].SetMembers(members()[:2])
	joined := false
	// Member 3 hears nothing before it joins (a receiver heard from that
	// lacks blocks keeps the pass going, in the snapshot or not).
	m.drop = func(from, to frame.MemberID, v frame.View) bool { return !joined && (from == 3 || to == 3) }
	m.sendF(data)
	m.run(func() bool { return m.verdict() != nil }, func() {
		if f := m.cores[0].passing(); f != nil && f.allHold && !joined {
			joined = true
			m.cores[0].SetMembers(members())
			m.cores[1].SetMembers(members())
		}
	})
	if !joined {
		t.Fatal("the pass was never skipped")
	}
	m.wantAll(data)
	st := m.cores[0].stats
	t.Logf("%d pass blocks, %d repairs, skipped %d", m.pass, m.repairs, st.BlocksSkipped)
	if st.PassesSkipped != 0 || m.pass != 20_000 {
		t.Fatalf("sent %d pass blocks, stats %+v; want the whole pass", m.pass, st)
	}
}
