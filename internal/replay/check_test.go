package replay

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
)

// goodCapture runs the lossy simulation and reads its capture.
func goodCapture(t *testing.T) (*lossyRun, *Capture) {
	t.Helper()
	run := runLossy(t, filepath.Join(t.TempDir(), "good.pcapng"), 3, 4, 300, 0.05)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return run, c
}

// writeNg writes recs as a pcapng file with c's interfaces and the
// records' directions; frame numbers in it are the positions in recs.
func writeNg(t *testing.T, c *Capture, recs []Record) *Capture {
	t.Helper()
	out, err := Parse("broken.pcapng", ngBytes(t, c, recs), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ngBytes encodes recs as pcapng with c's interfaces and the records'
// directions, and stats (if given) as every interface's statistics.
func ngBytes(t testing.TB, c *Capture, recs []Record, stats ...pcapgo.NgInterfaceStatistics) []byte {
	t.Helper()
	var buf bytes.Buffer
	mk := func(i int) pcapgo.NgInterface {
		return pcapgo.NgInterface{Name: c.Interfaces[i].Name, Description: c.Interfaces[i].Description, LinkType: layers.LinkTypeEthernet, TimestampResolution: 9, SnapLength: 0}
	}
	w, err := pcapgo.NewNgWriterInterface(&buf, mk(0), pcapgo.NgWriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(c.Interfaces); i++ {
		if _, err := w.AddInterface(mk(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range recs {
		opts := pcapgo.NgPacketOptions{}
		switch r.Dir {
		case DirIn:
			opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}
		case DirOut:
			opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionOutbound}
		}
		ci := gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Data), Length: len(r.Data), InterfaceIndex: r.Iface}
		if err := w.WritePacketWithOptions(ci, r.Data, opts); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range stats {
		for i := range c.Interfaces {
			if err := w.WriteInterfaceStats(i, st); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func clone(c *Capture) []Record {
	out := make([]Record, len(c.Records))
	for i, r := range c.Records {
		r.Data = bytes.Clone(r.Data)
		out[i] = r
	}
	return out
}

// reencode decodes an Ethernet frame, lets edit change it, and encodes it
// again with a fresh CRC (frame.Append).
func reencode(t *testing.T, data []byte, edit func(h *frame.Header, b frame.Body) frame.Body) []byte {
	t.Helper()
	eth, body, err := frame.SplitEthernet(data, frame.EtherType)
	if err != nil {
		t.Fatal(err)
	}
	v, err := frame.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	h, b := v.Decode()
	b = edit(&h, b)
	out := frame.AppendEthernet(nil, eth.Dst(), eth.Src(), frame.EtherType)
	out, err = frame.Append(out, &h, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func kinds(vs []Violation) map[string][]Violation {
	m := map[string][]Violation{}
	for _, v := range vs {
		m[v.Kind] = append(m[v.Kind], v)
	}
	return m
}

func hasFrame(v Violation, n int) bool {
	for _, f := range v.Frames {
		if f == n {
			return true
		}
	}
	return false
}

func TestCheckPassesOnLossyRun(t *testing.T) {
	_, c := goodCapture(t)
	if vs := Check(c, CheckOptions{}); len(vs) != 0 {
		t.Fatalf("%d violations on a correct run, first %v", len(vs), vs[0])
	}
	var tl, sum, chk bytes.Buffer
	if err := WriteTimeline(&tl, c); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(tl.String(), "\n"); n != len(c.Records)+2 {
		t.Errorf("timeline has %d lines for %d frames", n, len(c.Records))
	}
	if strings.Contains(tl.String(), "ERROR") {
		t.Error("timeline shows decode errors on a clean capture")
	}
	if err := WriteSummary(&sum, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sender 1.1", "at n2", "repair latency", "nacked by member", "never repaired 0"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(sum.String(), "), never repaired") {
		t.Error("summary lists a gap never repaired")
	}
	WriteViolations(&chk, c, nil)
	if !strings.Contains(chk.String(), "all invariants hold") {
		t.Errorf("check output %q", chk.String())
	}
}

func TestCheckSeqReuse(t *testing.T) {
	_, c := goodCapture(t)
	recs := clone(c)
	// Member 1's first transmission of seq 20, on its own interface, with
	// a new payload: the receivers' copies now differ from it.
	target := -1
	for i, r := range recs {
		if r.View != nil && r.Dir == DirOut && r.View.Type() == frame.Data && r.View.Sender() == 1 && r.View.Seq() == 20 && !r.View.Retransmission() {
			target = i
			break
		}
	}
	if target < 0 {
		t.Fatal("no Data seq 20 from member 1")
	}
	recs[target].Data = reencode(t, recs[target].Data, func(h *frame.Header, b frame.Body) frame.Body {
		return &frame.Payload{T: frame.Data, Data: []byte("a different message under the same seq")}
	})
	bc := writeNg(t, c, recs)
	if bc.Records[target].Err != nil {
		t.Fatalf("rewritten frame does not decode: %v", bc.Records[target].Err)
	}
	vs := kinds(Check(bc, CheckOptions{}))["seq-reuse"]
	if len(vs) != 1 || !hasFrame(vs[0], target+1) || !strings.Contains(vs[0].Detail, "member 1.1 seq 20") {
		t.Fatalf("seq-reuse violations %v, want one naming frame %d and member 1.1 seq 20", vs, target+1)
	}
}

func TestCheckUnrepairedGap(t *testing.T) {
	_, c := goodCapture(t)
	// Find a seq member 3 (interface 2) received only by retransmission,
	// and drop every retransmission of it there.
	var seq uint32
	var sender frame.MemberID
	found := false
	for _, r := range c.Records {
		if r.Iface == 2 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.Data && r.View.Retransmission() {
			seq, sender, found = r.View.Seq(), r.View.Sender(), true
			break
		}
	}
	if !found {
		t.Fatal("member 3 received no retransmission; the loss rate no longer exercises repair")
	}
	var recs []Record
	for _, r := range clone(c) {
		if r.Iface == 2 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.Data && r.View.Sender() == sender && r.View.Seq() == seq {
			continue
		}
		recs = append(recs, r)
	}
	bc := writeNg(t, c, recs)
	k := kinds(Check(bc, CheckOptions{}))
	gaps := k["unrepaired-gap"]
	if len(gaps) != 1 || !strings.Contains(gaps[0].Detail, "at n3") || !strings.Contains(gaps[0].Detail, "member "+strconv.Itoa(int(sender))+".1") {
		t.Fatalf("unrepaired-gap violations %v, want one at n3 for member %d seq %d", gaps, sender, seq)
	}
	// Member 3 still acknowledged the seq (the live node did get it), so
	// the capture now shows it delivering what it never received.
	if len(k["delivery-order"]) == 0 {
		t.Error("no delivery-order violation for an ack covering a seq the interface never received")
	}
	t.Logf("%v\n%v", gaps[0], k["delivery-order"][0])
}

func TestCheckForeignGroupCorruptAndStorm(t *testing.T) {
	_, c := goodCapture(t)
	recs := clone(c)
	last := recs[len(recs)-1]
	mk := func(group uint32, body frame.Body, seq uint32) Record {
		b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 9}, frame.EtherType)
		b, err := frame.Append(b, &frame.Header{Group: group, Sender: 9, Incarnation: 1, Seq: seq}, body)
		if err != nil {
			t.Fatal(err)
		}
		return Record{Time: last.Time.Add(time.Millisecond), Iface: 0, Dir: DirIn, Data: b}
	}
	recs = append(recs, mk(99, &frame.Payload{T: frame.Data, Data: []byte("foreign")}, 0))
	foreign := len(recs)
	bad := mk(7, &frame.Empty{T: frame.Heartbeat}, 5)
	bad.Data[len(bad.Data)-1] ^= 0xff // break the CRC
	recs = append(recs, bad)
	corrupt := len(recs)
	for i := range 20 {
		r := mk(7, &frame.NackBody{Target: 1, Ranges: []frame.Range{{First: 3, Last: 4}}}, 0)
		r.Time = last.Time.Add(2*time.Millisecond + time.Duration(i)*100*time.Microsecond)
		r.Dir = DirOut
		recs = append(recs, r)
	}
	bc := writeNg(t, c, recs)
	k := kinds(Check(bc, CheckOptions{}))
	if v := k["foreign-group"]; len(v) != 1 || !hasFrame(v[0], foreign) {
		t.Errorf("foreign-group %v, want frame %d", v, foreign)
	}
	if v := k["corrupt-frame"]; len(v) != 1 || !hasFrame(v[0], corrupt) || !strings.Contains(v[0].Detail, "CRC32C") {
		t.Errorf("corrupt-frame %v, want frame %d with a CRC error", v, corrupt)
	}
	if v := k["nack-storm"]; len(v) != 1 || len(v[0].Frames) != invariant.DefaultNackStormCount+1 {
		t.Errorf("nack-storm %v, want one naming %d frames", v, invariant.DefaultNackStormCount+1)
	}
	g := uint32(7)
	if v := kinds(Check(bc, CheckOptions{Group: &g}))["foreign-group"]; len(v) != 1 {
		t.Errorf("with -group 7: foreign-group %v", v)
	}
	if v := kinds(Check(bc, CheckOptions{NackStormCount: 100}))["nack-storm"]; len(v) != 0 {
		t.Errorf("storm reported above a raised limit: %v", v)
	}
}

// writePcap writes Ethernet frames as tcpdump does (pcap, microseconds),
// each optionally with an 802.1Q tag.
func writePcap(t testing.TB, recs []*Record, vlan bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		data := r.Data
		if vlan {
			data = append(append(bytes.Clone(data[:12]), 0x81, 0x00, 0x00, 0x2a), data[12:]...)
		}
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(data), Length: len(data)}, data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestTcpdumpPcapAndVLAN(t *testing.T) {
	run, c := goodCapture(t)
	txs := Frames(c, false)
	for _, vlan := range []bool{false, true} {
		pc, err := Parse("tcpdump.pcap", writePcap(t, txs, vlan), ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pc.Format != "pcap" || len(pc.Records) != len(txs) || pc.HasDirection {
			t.Fatalf("vlan %v: format %s, %d records of %d, direction %v", vlan, pc.Format, len(pc.Records), len(txs), pc.HasDirection)
		}
		for _, r := range pc.Records {
			if r.Err != nil {
				t.Fatalf("vlan %v: frame %d: %v", vlan, r.N, r.Err)
			}
		}
		if vs := Check(pc, CheckOptions{}); len(vs) != 0 {
			t.Fatalf("vlan %v: %d violations, first %v", vlan, len(vs), vs[0])
		}
		var sum bytes.Buffer
		WriteSummary(&sum, pc)
		if !strings.Contains(sum.String(), "at capture") {
			t.Errorf("vlan %v: summary has no global receiver view", vlan)
		}
		// Member 2 re-run on everything the segment carried (no loss at
		// the capture point): it delivers every message, FIFO per sender.
		res, err := Simulate(pc, SimOptions{Node: 2, Members: run.members, Iface: -1, MTU: 1500})
		if err != nil {
			t.Fatal(err)
		}
		per := map[frame.MemberID][][]byte{}
		for _, d := range res.Deliveries {
			per[d.From] = append(per[d.From], d.Data)
		}
		live := map[frame.MemberID][][]byte{}
		for _, d := range run.got[1] {
			live[d.From] = append(live[d.From], d.Data)
		}
		for id, msgs := range live {
			if len(per[id]) != len(msgs) {
				t.Fatalf("vlan %v: re-run delivered %d from %d, live %d", vlan, len(per[id]), id, len(msgs))
			}
			for i := range msgs {
				if !bytes.Equal(per[id][i], msgs[i]) {
					t.Fatalf("vlan %v: message %d from %d differs", vlan, i, id)
				}
			}
		}
	}
}

func TestTruncatedCaptures(t *testing.T) {
	run, c := goodCapture(t)
	ng, err := os.ReadFile(run.path)
	if err != nil {
		t.Fatal(err)
	}
	pc := writePcap(t, Frames(c, false)[:50], false)
	rng := rand.New(rand.NewPCG(1, 2))
	for name, data := range map[string][]byte{"pcapng": ng, "pcap": pc} {
		for range 200 {
			cut := rng.IntN(len(data))
			_, err := Parse("cut."+name, data[:cut], ReadOptions{})
			if cut == 0 || err == nil {
				// A cut on a block boundary leaves a valid, shorter file.
				if err == nil && cut > 0 {
					continue
				}
			}
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "cut."+name) || !strings.Contains(err.Error(), "byte offset") {
				t.Fatalf("%s cut at %d: error %v, want a FormatError naming the file and offset", name, cut, err)
			}
			if fe.Offset < 0 || fe.Offset > int64(cut) {
				t.Fatalf("%s cut at %d: offset %d outside the file", name, cut, fe.Offset)
			}
		}
		// Partial keeps what came before the cut.
		cut := len(data) - 7
		pcut, err := Parse("cut."+name, data[:cut], ReadOptions{Partial: true})
		if err == nil || pcut == nil || len(pcut.Records) == 0 {
			t.Fatalf("%s: partial read gave %v records, error %v", name, pcut, err)
		}
	}
}

// TestCheckFilesGroup: file frames (rbcastd -files) in a group of their
// own beside the message group are no foreign-group, even when they
// outnumber the group's frames; -files-group holds them to one group.
func TestCheckFilesGroup(t *testing.T) {
	_, c := goodCapture(t)
	recs := clone(c)
	last := recs[len(recs)-1]
	group := recs[0].View.Group()
	files := group ^ 0x80000000
	mk := func(g uint32, id uint32) Record {
		b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 9}, frame.EtherType)
		b, err := frame.Append(b, &frame.Header{Group: g, Sender: 9, Incarnation: 1, Seq: id}, &frame.FileDataBody{ID: 1, Data: []byte("block")})
		if err != nil {
			t.Fatal(err)
		}
		return Record{Time: last.Time.Add(time.Millisecond), Iface: 0, Dir: DirIn, Data: b}
	}
	for i := range 2 * len(c.Records) {
		recs = append(recs, mk(files, uint32(i)))
	}
	bc := writeNg(t, c, recs)
	if v := kinds(Check(bc, CheckOptions{}))["foreign-group"]; len(v) != 0 {
		t.Errorf("file frames in a group of their own: foreign-group %v", v)
	}
	other := files + 1
	recs = append(recs, mk(other, 0))
	odd := len(recs)
	bc = writeNg(t, c, recs)
	if v := kinds(Check(bc, CheckOptions{}))["foreign-group"]; len(v) != 1 || !hasFrame(v[0], odd) || !strings.Contains(v[0].Detail, "the capture's most common group of file frames") {
		t.Errorf("a file frame of a third group: foreign-group %v, want frame %d", v, odd)
	}
	if v := kinds(Check(bc, CheckOptions{FilesGroup: &other}))["foreign-group"]; len(v) != 2*len(c.Records) || !strings.Contains(v[0].Detail, "the -files-group given") {
		t.Errorf("-files-group %d: %d foreign-group findings, want %d", other, len(v), 2*len(c.Records))
	}
}
