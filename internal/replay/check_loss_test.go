package replay

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/testnet"
)

// gate is a capture file whose writes block while it is held: a disk, or
// a writer goroutine starved of CPU, that cannot keep up for a while.
type gate struct {
	hold sync.Mutex
	buf  syncbuf.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	g.hold.Lock()
	g.hold.Unlock()
	return g.buf.Write(p)
}

// stalledCapture runs four PBP members under 10% receive loss, each
// sending k messages of 1200 bytes, all captured into one file (a 1 MiB
// queue) whose writes stall from round from to round to of sending (a
// round is 200 µs): the writer's queue overflows and drops frames, as it
// did on a 2-core machine capturing a four-daemon all-to-all. It returns
// the file, the Writer's stats and what the online checks (which see
// every frame, ahead of the queue) found. rec, if not nil, records the
// links too.
func stalledCapture(t *testing.T, seed uint64, k, from, to int, rec *capture.Recorder) ([]byte, capture.WriterStats, map[string]uint64) {
	t.Helper()
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	w, err := capture.NewWriter(g, capture.WriterOptions{QueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	inv := capture.NewInvariants(0, nil)
	const n = 4
	var eps []*testnet.Endpoint
	var members []frame.MemberInfo
	for range n {
		ep, err := net.Attach(testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.1}})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(len(eps)), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
	}
	var drivers []*reliable.Driver
	var links []*capture.Link
	for i, ep := range eps {
		l, err := capture.Wrap(ep, w, capture.Options{Node: fmt.Sprint(i + 1), Interface: fmt.Sprintf("sim%d", i+1), Clock: net.Now, Invariants: inv, Recorder: rec})
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
		d, err := reliable.NewDriver(l, reliable.Config{Group: 7, Members: members, Self: frame.MemberID(i + 1), Logger: quietLogger(),
			Deliver: func(frame.MemberID, []byte) {}}, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, d)
		ep.Bind(d)
	}
	next := make([]int, n)
	for round := 0; ; round++ {
		// Outside the stall the simulation waits for the writer each
		// round, so the stall's is the only hole.
		switch {
		case from < 0:
		case round == from:
			g.hold.Lock()
		case round == to:
			g.hold.Unlock()
			fallthrough
		case round < from || round > to:
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		busy := false
		for i, d := range drivers {
			for next[i] < k {
				msg := fmt.Appendf(nil, "message %d from member %d ", next[i], i+1)
				if err := d.Propose(net.Now(), append(msg, bytes.Repeat([]byte{'.'}, 1200-len(msg))...)); err != nil {
					if err != pbp.ErrWindowFull {
						t.Fatal(err)
					}
					break
				}
				next[i]++
			}
			busy = busy || next[i] < k
		}
		if !busy && round > to {
			break
		}
		if round > 100000 {
			t.Fatal("senders stuck")
		}
		net.RunFor(200 * time.Microsecond)
	}
	net.RunFor(300 * time.Millisecond)
	for _, l := range links {
		l.Close()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return g.buf.Bytes(), w.Stats(), inv.Counts()
}

// TestCheckCaptureLossNotJudged is the false alarm of a four-daemon
// all-to-all under loss (issue 17): "delivery-order … member 0
// acknowledges member 1 up to seq 21190, so it delivered seq 21158, which
// its interface had not received", on a run whose streams all arrived
// intact. The capture's writer queue had overflowed and dropped a run of
// received frames without a trace in the file, so the check took frames
// the node had received for frames it never got. Now the file says where
// frames are missing (epb_dropcount), and findings about a frame missing
// there are not judged.
func TestCheckCaptureLossNotJudged(t *testing.T) {
	data, st, online := stalledCapture(t, 5, 250, 10, 60, nil)
	if st.Dropped == 0 {
		t.Fatalf("writer stats %+v: the stalled file made the queue drop nothing", st)
	}
	if len(online) != 0 {
		t.Fatalf("the online checks, which see every frame, found %v", online)
	}
	c, err := Parse("stalled.pcapng", data, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lost uint64
	for _, intf := range c.Interfaces {
		lost += intf.CaptureLost
	}
	if lost != st.Dropped {
		t.Fatalf("the file accounts for %d lost frames (epb_dropcount), the Writer dropped %d", lost, st.Dropped)
	}

	// The file as the Writer wrote it before the fix: the same frames,
	// no drop counts. The check cries wolf.
	blind := *c
	blind.Records = clone(c)
	blind.Interfaces = append([]Interface(nil), c.Interfaces...)
	for i := range blind.Records {
		blind.Records[i].Lost = 0
	}
	for i := range blind.Interfaces {
		blind.Interfaces[i].CaptureLost = 0
	}
	before := Check(&blind, CheckOptions{})
	if k := kinds(before); len(k[invariant.KindOrder]) == 0 || Judged(before) == 0 {
		t.Fatalf("without drop counts: %d findings, none a delivery-order violation; the stall no longer reproduces the false alarm", len(before))
	}
	t.Logf("without drop counts (before the fix): %v", kinds(before)[invariant.KindOrder][0])

	// With them: nothing is judged a violation, and what was not judged
	// says why.
	vs := Check(c, CheckOptions{})
	if n := Judged(vs); n != 0 {
		t.Fatalf("%d violations on a correct run whose capture lost %d frames; first %v", n, lost, vs[0])
	}
	order := kinds(vs)[invariant.KindOrder]
	if len(order) == 0 || !strings.Contains(order[0].Doubt, "the capture lost") {
		t.Fatalf("delivery-order findings %v, want them not judged, naming the capture's loss", order)
	}
	var out bytes.Buffer
	if err := WriteViolations(&out, c, vs); err != nil {
		t.Fatal(err)
	}
	last := out.String()[strings.LastIndex(strings.TrimSuffix(out.String(), "\n"), "\n")+1:]
	if !strings.Contains(last, "no violation; the capture lost frames (") || !strings.Contains(last, "findings not judged") {
		t.Fatalf("check's last line %q, want no violation, the capture's loss and the findings not judged", last)
	}
	if !strings.HasPrefix(out.String(), "NOT JUDGED ") {
		t.Fatalf("check output starts %q, want NOT JUDGED findings only", out.String()[:min(80, out.Len())])
	}
	t.Logf("%d frames lost by the capture; %s%s", lost, order[0], last)
}

// TestCheckForeignCapturerDrops: a capture written by another tool
// (dumpcap, tcpdump) whose interface statistics count drops (isb_ifdrop)
// lost frames somewhere; a frame missing there is not judged. The same
// count on our own interface is the node's ring drops, which the node
// missed too: judged as before.
func TestCheckForeignCapturerDrops(t *testing.T) {
	_, c := goodCapture(t)
	// Drop every copy of one seq member 3 (interface 2) received.
	var seq uint32
	var sender frame.MemberID
	for _, r := range c.Records {
		if r.Iface == 2 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.Data && r.View.Retransmission() {
			seq, sender = r.View.Seq(), r.View.Sender()
			break
		}
	}
	var recs []Record
	for _, r := range clone(c) {
		if !(r.Iface == 2 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.Data && r.View.Sender() == sender && r.View.Seq() == seq) {
			recs = append(recs, r)
		}
	}
	for _, ours := range []bool{true, false} {
		cc := *c
		cc.Interfaces = append([]Interface(nil), c.Interfaces...)
		if !ours {
			for i := range cc.Interfaces {
				cc.Interfaces[i].Description = "eth0 as dumpcap saw it"
			}
		}
		data := ngBytes(t, &cc, recs, pcapgo.NgInterfaceStatistics{PacketsReceived: uint64(len(recs)), PacketsDropped: 3})
		got, err := Parse("drops.pcapng", data, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs := Check(got, CheckOptions{})
		k := kinds(vs)
		if len(k[invariant.KindGap]) == 0 || len(k[invariant.KindOrder]) == 0 {
			t.Fatalf("ours %v: findings %v, want an unrepaired gap and a delivery-order at n3", ours, vs)
		}
		if ours && Judged(vs) != len(vs) {
			t.Errorf("our own interface's isb_ifdrop (the node's ring drops) made findings not judged: %v", vs)
		}
		if !ours && (Judged(vs) != 0 || !strings.Contains(k[invariant.KindOrder][0].Doubt, "where is not known")) {
			t.Errorf("a foreign capturer's drops: %d of %d findings judged, want none: %v", Judged(vs), len(vs), k[invariant.KindOrder][0])
		}
	}
}

// TestCheckFlightRecorderDump: a flight-recorder dump begins mid-run, so
// frames a node received before its first frame are missing from it; its
// first frame of each interface says how many were evicted, and findings
// about missing frames are not judged. Cut at the same place without the
// counts, the capture shows what a dump showed before: false alarms.
func TestCheckFlightRecorderDump(t *testing.T) {
	rec, err := capture.NewRecorder(capture.MinQueueBytes * 4)
	if err != nil {
		t.Fatal(err)
	}
	stalledCapture(t, 7, 250, -1, -1, rec)
	if rec.Stats().Evicted == 0 {
		t.Fatalf("recorder %+v evicted nothing; the dump would hold the whole run", rec.Stats())
	}
	var dump bytes.Buffer
	if err := rec.Dump(&dump); err != nil {
		t.Fatal(err)
	}
	c, err := Parse("dump.pcapng", dump.Bytes(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blind := *c
	blind.Records = clone(c)
	for i := range blind.Records {
		blind.Records[i].Lost = 0
	}
	blind.Interfaces = append([]Interface(nil), c.Interfaces...)
	for i := range blind.Interfaces {
		blind.Interfaces[i].CaptureLost = 0
	}
	if Judged(Check(&blind, CheckOptions{})) == 0 {
		t.Fatal("the dump without eviction counts passes check; the test no longer shows what they are for")
	}
	vs := Check(c, CheckOptions{})
	if n := Judged(vs); n != 0 {
		t.Fatalf("%d violations in a dump of a correct run, first %v", n, vs[0])
	}
	t.Logf("%d frames held, %d evicted; %d findings not judged", rec.Stats().Frames, rec.Stats().Evicted, len(vs))
}
