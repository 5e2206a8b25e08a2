package replay

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/seq"
)

// seqDelivered is one message as a live (simulated) sequencer member
// delivered it.
type seqDelivered struct {
	Global uint32
	From   frame.MemberID
	Data   []byte
}

// seqNode runs a reliable/seq core over a captured testnet endpoint on a
// core.Stepper, as reliable's runtime does: read a batch, Step each frame,
// Tick, send Ready's frames, Advance, on the runtime's clock.
type seqNode struct {
	t   testing.TB
	st  *core.Stepper
	l   *capture.Link
	rx  []link.Frame
	clk wall.Clock
	got []seqDelivered
}

func (n *seqNode) Step(now time.Time) time.Time {
	t := n.clk.Core(now)
	for {
		k, _ := n.l.Recv(time.Time{}, n.rx)
		for _, f := range n.rx[:k] {
			n.st.Step(t, f.Data)
		}
		n.st.Tick(t)
		n.output()
		if k == 0 {
			break
		}
	}
	return n.clk.Wall(n.st.Deadline())
}

func (n *seqNode) output() {
	rd := n.st.Ready()
	if len(rd.Frames) > 0 {
		if _, err := n.l.Send(rd.Frames); err != nil {
			n.t.Errorf("send: %v", err)
		}
	}
	for _, d := range rd.Deliveries {
		n.got = append(n.got, seqDelivered{d.Global, d.From, bytes.Clone(d.Data)})
	}
	n.st.Advance()
}

func (n *seqNode) propose(now time.Time, msg []byte) error {
	err := n.st.Propose(n.clk.Core(now), msg)
	n.output()
	return err
}

// seqRun is a total-order group on the simulator, every endpoint captured.
type seqRun struct {
	path    string
	members []frame.MemberInfo
	got     [][]seqDelivered
	cfg     seq.Config // the shared settings (Self and Members unset)
}

// runSeq runs n sequencer-protocol members sending k messages each with
// receive loss; message sizes alternate below and above the hybrid
// threshold so both methods run.
//
// crash, when given, crashes member crash[0] (1-based) once it proposed
// half its messages; the group then runs with a 200 ms failure timeout so
// that the sequencer removes it within the run.
func runSeq(t testing.TB, path string, seed uint64, n, k int, loss float64, crash ...int) *seqRun {
	t.Helper()
	run := &seqRun{path: path, got: make([][]seqDelivered, n),
		// SafeSequencer: a re-run reproduces every frame (under
		// SafeMajority, safe-point announcements depend on how the live
		// node grouped its Ready calls; see SimOptions.Resilience).
		cfg: seq.Config{Group: 9, Threshold: 100, InitialGlobal: 1000, Resilience: seq.SafeSequencer}}
	victim := -1
	if len(crash) > 0 {
		victim = crash[0] - 1
		run.cfg.HeartbeatInterval, run.cfg.FailureTimeout = 20*seq.Millisecond, 200*seq.Millisecond
	}
	inv := capture.NewInvariants(0, nil)
	seg := newSimSegment(t, path, seed, n, loss, inv, 1)
	net, eps, links := seg.net, seg.eps, seg.links
	run.members = seg.members
	var nodes []*seqNode
	for i, l := range links {
		ep := eps[i]
		cfg := run.cfg
		cfg.Self, cfg.Members = frame.MemberID(i+1), run.members
		c, err := seq.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nd := &seqNode{t: t, st: core.NewStepper(c, cfg.Group, frame.EtherType), l: l, rx: make([]link.Frame, 64), clk: wall.Clock{Epoch: net.Now()}}
		nodes = append(nodes, nd)
		ep.Bind(nd)
	}
	next := make([]int, n)
	for round := 0; ; round++ {
		busy := false
		for i, nd := range nodes {
			for next[i] < k {
				if i == victim && next[i] >= k/2 {
					eps[i].Crash()
					break
				}
				msg := fmt.Appendf(nil, "message %d from member %d, seed %d", next[i], i+1, seed)
				if next[i]%3 == 2 {
					msg = append(msg, bytes.Repeat([]byte{'.'}, 150)...) // method 2
				}
				if err := nd.propose(net.Now(), msg); err != nil {
					if !errors.Is(err, seq.ErrWindowFull) {
						t.Fatal(err)
					}
					break
				}
				next[i]++
			}
			busy = busy || next[i] < k && !eps[i].Crashed()
		}
		if !busy {
			break
		}
		if round > 100000 {
			t.Fatal("senders stuck")
		}
		net.RunFor(200 * time.Microsecond)
	}
	net.RunFor(300 * time.Millisecond)
	if victim >= 0 {
		net.RunFor(time.Second)
	}
	seg.close(t)
	if n := inv.Counts(); len(n) != 0 {
		t.Fatalf("the online invariant checks found %v in a correct run", n)
	}
	for i, nd := range nodes {
		run.got[i] = nd.got
	}
	return run
}

func seqCapture(t *testing.T) (*seqRun, *Capture) {
	t.Helper()
	run := runSeq(t, filepath.Join(t.TempDir(), "seq.pcapng"), 5, 4, 60, 0.05)
	for i, got := range run.got {
		if len(got) != 4*60 {
			t.Fatalf("member %d delivered %d messages live, want %d", i+1, len(got), 4*60)
		}
	}
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return run, c
}

func TestSeqCheckPassesAndSummary(t *testing.T) {
	_, c := seqCapture(t)
	if vs := Check(c, CheckOptions{}); len(vs) != 0 {
		t.Fatalf("%d violations on a correct sequencer run, first %v", len(vs), vs[0])
	}
	var sum, tl bytes.Buffer
	if err := WriteSummary(&sum, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sequencer protocol:", "first global 1000", "epoch 1: sequencer 1", "by Accept", "member 2.1", "retransmit requests", "at n3", "never repaired 0", "repair latency, all receivers"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(sum.String(), "sender ") {
		t.Error("summary has a PBP sender section for a sequencer capture")
	}
	if err := WriteTimeline(&tl, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SeqRequest", "SeqData", "SeqAccept", "SeqRetransmit", "epoch 1"} {
		if !strings.Contains(tl.String(), want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	t.Logf("summary:\n%s", head(sum.String(), 14))
}

// A member crashes: the sequencer numbers its removal in the stream
// (SeqMember); check finds nothing wrong with it, summary counts it, the
// timeline shows it.
func TestSeqCheckMemberRemoved(t *testing.T) {
	run := runSeq(t, filepath.Join(t.TempDir(), "seq.pcapng"), 7, 3, 40, 0.02, 3)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Check(c, CheckOptions{}) {
		if !strings.Contains(v.Detail, "sim3") { // the crashed member's own gaps
			t.Errorf("violation on a correct run with a crash: %v", v)
		}
	}
	var sum, tl bytes.Buffer
	if err := WriteSummary(&sum, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "1 member changes by SeqMember") {
		t.Errorf("summary does not count the removal:\n%s", head(sum.String(), 14))
	}
	if err := WriteTimeline(&tl, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tl.String(), "SeqMember") || !strings.Contains(tl.String(), "member 3.1 removed (silent past the failure timeout)") {
		t.Errorf("timeline does not show the removal")
	}
	// A survivor's re-run delivers what it did live, the removal in
	// between (the re-run drives the same core).
	for i, m := range run.members[:2] {
		res, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1, Threshold: run.cfg.Threshold, Resilience: run.cfg.Resilience,
			HeartbeatInterval: time.Duration(run.cfg.HeartbeatInterval), FailureTimeout: time.Duration(run.cfg.FailureTimeout)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Deliveries) != len(run.got[i]) {
			t.Fatalf("member %d: re-run delivered %d messages, the live node %d (notes %q)", m.ID, len(res.Deliveries), len(run.got[i]), res.Notes)
		}
		for k, d := range res.Deliveries {
			if w := run.got[i][k]; d.Global != w.Global || d.From != w.From || !bytes.Equal(d.Data, w.Data) {
				t.Fatalf("member %d delivery %d: re-run global %d from %d, live global %d from %d", m.ID, k, d.Global, d.From, w.Global, w.From)
			}
		}
	}
	// Everything of the survivors, and what the victim sent before it
	// crashed (some of its last 20 may have waited in its core).
	if a, b := len(run.got[0]), len(run.got[1]); a != b || a < 2*40+10 || a > 2*40+20 {
		t.Errorf("survivors delivered %d and %d messages, want the same, 90..100", a, b)
	}
}

func head(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}

// firstOut returns the index of the first record matching f.
func firstRec(t *testing.T, recs []Record, what string, f func(r *Record) bool) int {
	t.Helper()
	for i := range recs {
		if recs[i].View != nil && f(&recs[i]) {
			return i
		}
	}
	t.Fatalf("no %s in the capture", what)
	return -1
}

func TestSeqCheckGlobalReuse(t *testing.T) {
	_, c := seqCapture(t)
	recs := clone(c)
	// The sequencer's SeqData for global 1010 now numbers another request
	// under the same global (a sequencer reusing a number): receivers'
	// copies name the original request.
	i := firstRec(t, recs, "SeqData 1010 from the sequencer", func(r *Record) bool {
		return r.Dir == DirOut && r.View.Type() == frame.SeqData && r.View.Seq() == 1010 && !r.View.Retransmission()
	})
	recs[i].Data = reencode(t, recs[i].Data, func(h *frame.Header, b frame.Body) frame.Body {
		d := *b.(*frame.SeqDataBody)
		d.UID.Seq += 7
		d.Data = []byte("another message numbered 1010")
		return &d
	})
	vs := kinds(Check(writeNg(t, c, recs), CheckOptions{}))["global-reuse"]
	if len(vs) == 0 || !hasFrame(vs[0], i+1) || !strings.Contains(vs[0].Detail, "epoch 1 global 1010") {
		t.Fatalf("global-reuse %v, want one naming frame %d and epoch 1 global 1010", vs, i+1)
	}
	t.Log(vs[0])

	// Same request, same global, different payload.
	recs = clone(c)
	recs[i].Data = reencode(t, recs[i].Data, func(h *frame.Header, b frame.Body) frame.Body {
		d := *b.(*frame.SeqDataBody)
		d.Data = []byte("other bytes")
		return &d
	})
	vs = kinds(Check(writeNg(t, c, recs), CheckOptions{}))["global-reuse"]
	if len(vs) == 0 || !hasFrame(vs[0], i+1) || !strings.Contains(vs[0].Detail, "payload") {
		t.Fatalf("global-reuse %v, want one naming frame %d and the payload", vs, i+1)
	}
}

func TestSeqCheckSequencedTwiceAndRequestReuse(t *testing.T) {
	_, c := seqCapture(t)
	recs := clone(c)
	// The SeqData of global 1011 names the request of global 1010: one
	// request numbered twice.
	i10 := firstRec(t, recs, "SeqData 1010", func(r *Record) bool {
		return r.Dir == DirOut && r.View.Type() == frame.SeqData && r.View.Seq() == 1010 && !r.View.Retransmission()
	})
	uid := recs[i10].View.SeqDataUID()
	payload := bytes.Clone(recs[i10].View.Payload())
	i11 := firstRec(t, recs, "SeqData 1011", func(r *Record) bool {
		return r.Dir == DirOut && r.View.Type() == frame.SeqData && r.View.Seq() == 1011 && !r.View.Retransmission()
	})
	recs[i11].Data = reencode(t, recs[i11].Data, func(h *frame.Header, b frame.Body) frame.Body {
		d := *b.(*frame.SeqDataBody)
		d.UID, d.Data = uid, payload
		return &d
	})
	vs := kinds(Check(writeNg(t, c, recs), CheckOptions{}))["sequenced-twice"]
	if len(vs) != 1 || !hasFrame(vs[0], i10+1) || !hasFrame(vs[0], i11+1) {
		t.Fatalf("sequenced-twice %v, want one naming frames %d and %d", vs, i10+1, i11+1)
	}
	t.Log(vs[0])

	// A member reusing a request number for another message.
	recs = clone(c)
	r := firstRec(t, recs, "request 5 from member 2", func(r *Record) bool {
		return r.Dir == DirOut && r.View.Type() == frame.SeqRequest && r.View.Sender() == 2 && r.View.Seq() == 5 && !r.View.Retransmission()
	})
	recs[r].Data = reencode(t, recs[r].Data, func(h *frame.Header, b frame.Body) frame.Body {
		return &frame.Payload{T: frame.SeqRequest, Data: []byte("a different message under request 5")}
	})
	k := kinds(Check(writeNg(t, c, recs), CheckOptions{}))
	if vs := k["seq-reuse"]; len(vs) != 1 || !hasFrame(vs[0], r+1) || !strings.Contains(vs[0].Detail, "member 2.1 request 5") {
		t.Fatalf("seq-reuse %v, want one naming frame %d and member 2.1 request 5", vs, r+1)
	}
}

func TestSeqCheckUnrepairedGap(t *testing.T) {
	_, c := seqCapture(t)
	// A global member 3 (interface 2) got only by retransmission: drop
	// every copy of it there.
	j := firstRec(t, c.Records, "retransmitted SeqData at n3", func(r *Record) bool {
		return r.Iface == 2 && r.Dir == DirIn && r.View.Type() == frame.SeqData && r.View.Retransmission()
	})
	g := c.Records[j].View.Seq()
	var recs []Record
	for _, r := range clone(c) {
		if r.Iface == 2 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.SeqData && r.View.Seq() == g {
			continue
		}
		recs = append(recs, r)
	}
	k := kinds(Check(writeNg(t, c, recs), CheckOptions{}))
	gaps := k["unrepaired-gap"]
	if len(gaps) != 1 || !strings.Contains(gaps[0].Detail, fmt.Sprintf("at n3: global %d", g)) {
		t.Fatalf("unrepaired-gap %v, want one at n3 for global %d", gaps, g)
	}
	// Member 3's delivered cursor still passed it.
	if v := k["delivery-order"]; len(v) != 1 || !strings.Contains(v[0].Detail, fmt.Sprintf("delivered global %d", g)) {
		t.Errorf("delivery-order %v, want member 3 delivering global %d", v, g)
	}
	t.Logf("%v\n%v", gaps[0], k["delivery-order"])
}

func TestSeqSimulateReproducesDeliveries(t *testing.T) {
	run, c := seqCapture(t)
	for i, m := range run.members {
		res, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1, Threshold: run.cfg.Threshold, Resilience: run.cfg.Resilience})
		if err != nil {
			t.Fatal(err)
		}
		if res.Protocol != ProtocolSeq {
			t.Fatalf("member %d: protocol %v, want the sequencer", m.ID, res.Protocol)
		}
		live := run.got[i]
		if len(res.Deliveries) != len(live) {
			t.Fatalf("member %d: re-run delivered %d messages, the live node %d (notes %q)", m.ID, len(res.Deliveries), len(live), res.Notes)
		}
		for k, d := range res.Deliveries {
			if w := live[k]; d.Global != w.Global || d.From != w.From || !bytes.Equal(d.Data, w.Data) {
				t.Fatalf("member %d delivery %d: re-run global %d from %d %q, live global %d from %d %q", m.ID, k, d.Global, d.From, d.Data, w.Global, w.From, w.Data)
			}
		}
		for _, n := range res.Notes {
			if strings.Contains(n, "diverge") {
				t.Errorf("member %d: %s", m.ID, n)
			}
		}
		if d := sentAsCaptured(c, res); d != "" {
			t.Errorf("member %d: %s", m.ID, d)
		}
		var a, b bytes.Buffer
		res.Write(&a, c, false)
		res2, _ := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1, Threshold: run.cfg.Threshold, Resilience: run.cfg.Resilience})
		res2.Write(&b, c, false)
		if a.String() != b.String() {
			t.Fatalf("member %d: two re-runs print differently", m.ID)
		}
		if i == 1 {
			t.Logf("member %d re-run:\n%s\n%s", m.ID, head(a.String(), 10), tail(a.String(), 3))
		}
	}
}

// TestSimulateManySeeds: for PBP and the sequencer, on runs of 2 to 5
// members with 0-20% receive loss, check passes and every member's re-run
// delivers what the live member did and sends as many frames.
func TestSimulateManySeeds(t *testing.T) {
	t.Run("seq", func(t *testing.T) { seqManySeeds(t, 12) })
	t.Run("pbp", func(t *testing.T) { pbpManySeeds(t, 12) })
}

func seqManySeeds(t *testing.T, seeds uint64) {
	for seed := uint64(1); seed <= seeds; seed++ {
		loss := []float64{0, 0.05, 0.1, 0.2}[seed%4]
		run := runSeq(t, filepath.Join(t.TempDir(), "seq.pcapng"), seed, 2+int(seed%4), 40, loss)
		c, err := ReadFile(run.path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if vs := Check(c, CheckOptions{}); len(vs) != 0 {
			t.Errorf("seed %d: %d violations, first %v", seed, len(vs), vs[0])
		}
		for i, m := range run.members {
			res, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1, Threshold: run.cfg.Threshold, Resilience: run.cfg.Resilience})
			if err != nil {
				t.Fatal(err)
			}
			ok := len(res.Deliveries) == len(run.got[i])
			for k := 0; ok && k < len(res.Deliveries); k++ {
				ok = res.Deliveries[k].Global == run.got[i][k].Global && bytes.Equal(res.Deliveries[k].Data, run.got[i][k].Data)
			}
			if d := sentAsCaptured(c, res); !ok || d != "" {
				t.Errorf("seed %d loss %v member %d: deliveries equal %v (%d/%d); %s", seed, loss, m.ID, ok, len(res.Deliveries), len(run.got[i]), d)
			}
		}
	}
}

func pbpManySeeds(t *testing.T, seeds uint64) {
	for seed := uint64(1); seed <= seeds; seed++ {
		loss := []float64{0, 0.05, 0.1, 0.2}[seed%4]
		run := runLossy(t, filepath.Join(t.TempDir(), "l.pcapng"), seed, 2+int(seed%4), 60, loss)
		c, err := ReadFile(run.path, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if vs := Check(c, CheckOptions{}); len(vs) != 0 {
			t.Errorf("seed %d: %d violations, first %v", seed, len(vs), vs[0])
		}
		for i, m := range run.members {
			res, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1})
			if err != nil {
				t.Fatal(err)
			}
			ok := len(res.Deliveries) == len(run.got[i])
			for k := 0; ok && k < len(res.Deliveries); k++ {
				ok = bytes.Equal(res.Deliveries[k].Data, run.got[i][k].Data)
			}
			if d := sentAsCaptured(c, res); !ok || d != "" {
				t.Errorf("seed %d loss %v member %d: deliveries equal %v (%d/%d); %s", seed, loss, m.ID, ok, len(res.Deliveries), len(run.got[i]), d)
			}
		}
	}
}

// TestReadFilesMerges: one file per node (as each rbcastd -capture
// writes), read together, is the whole capture again: same frames in time
// order, check passes, and a member's re-run delivers what it delivered
// live.
func TestReadFilesMerges(t *testing.T) {
	run, c := goodCapture(t)
	dir := t.TempDir()
	var paths []string
	for i, intf := range c.Interfaces {
		var recs []Record
		for _, r := range c.Records {
			if r.Iface == i {
				r.Iface = 0
				recs = append(recs, r)
			}
		}
		one := &Capture{Interfaces: []Interface{intf}}
		p := filepath.Join(dir, fmt.Sprintf("n%d.pcapng", i+1))
		if err := os.WriteFile(p, ngBytes(t, one, recs), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	m, err := ReadFiles(paths, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Records) != len(c.Records) || len(m.Interfaces) != len(c.Interfaces) {
		t.Fatalf("merged %d frames on %d interfaces, want %d on %d", len(m.Records), len(m.Interfaces), len(c.Records), len(c.Interfaces))
	}
	for i := 1; i < len(m.Records); i++ {
		if m.Records[i].Time.Before(m.Records[i-1].Time) || m.Records[i].N != i+1 {
			t.Fatalf("merged frame %d out of order or misnumbered", i+1)
		}
	}
	if vs := Check(m, CheckOptions{}); len(vs) != 0 {
		t.Fatalf("%d violations on the merged capture, first %v", len(vs), vs[0])
	}
	res, err := Simulate(m, SimOptions{Node: 2, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	res.WriteLines(&got)
	for _, d := range run.got[1] {
		fmt.Fprintf(&want, "%d\t%s\n", d.From, d.Data)
	}
	if got.String() != want.String() {
		t.Fatalf("member 2's re-run on the merged files delivers differently (%d vs %d bytes)", got.Len(), want.Len())
	}
	if _, err := ReadFiles(append(paths, filepath.Join(dir, "missing.pcapng")), ReadOptions{}); err == nil || !strings.Contains(err.Error(), "missing.pcapng") {
		t.Fatalf("a missing file: %v", err)
	}
}

// Merge never reorders a file's frames: frames a ring took from two CPUs
// at once can be stamped out of order, and a re-run must step them in the
// order the node handled them (TestSimulateNetns re-ran in time order and
// delivered across senders in another order than live, 2 runs in 4).
// Across files the earliest next frame comes first.
func TestMergeKeepsFileOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	rec := func(us int, s string) Record { return Record{Time: at(us), Data: []byte(s)} }
	a := &Capture{Path: "a", Interfaces: []Interface{{}}, Records: []Record{rec(1, "a1"), rec(3, "a3"), rec(2, "a2")}}
	b := &Capture{Path: "b", Interfaces: []Interface{{}}, Records: []Record{rec(2, "b2"), rec(4, "b4")}}
	m := Merge([]*Capture{a, b})
	var got []string
	for i, r := range m.Records {
		got = append(got, fmt.Sprintf("%s@if%d#%d", r.Data, r.Iface, r.N))
		if r.N != i+1 {
			t.Errorf("record %d numbered %d", i, r.N)
		}
	}
	if want := "a1@if0#1 b2@if1#2 a3@if0#3 a2@if0#4 b4@if1#5"; strings.Join(got, " ") != want {
		t.Fatalf("merged %q, want %q", strings.Join(got, " "), want)
	}
}
