package capture

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/frame"
)

func invFrame(t *testing.T, h frame.Header, b frame.Body) []byte {
	t.Helper()
	out := frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType)
	out, err := frame.Append(out, &h, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInvariantsDumpRecorder: a sender reusing a sequence number, a
// sequencer binding one global to two requests and numbering one request
// twice are each reported once, with the frame; retransmissions with the
// same content are not; the first violation dumps the flight recorder
// with the frames that show it.
func TestInvariantsDumpRecorder(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorderForTest(1 << 16)
	dumped := make(chan string, 4)
	var got []Violation
	dump := rec.DumpOnViolation(dir, time.Hour, func(v Violation, path string, err error) {
		if err != nil {
			t.Error(err)
		}
		dumped <- path
	})
	inv := NewInvariants(8, func(v Violation) {
		got = append(got, v)
		dump(v)
	})
	l, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Node: "1", Recorder: rec, Invariants: inv})
	if err != nil {
		t.Fatal(err)
	}
	h := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 3, AckBase: 1, Acks: []uint32{4}}
	send := func(frames ...[]byte) {
		if _, err := l.Send(frames); err != nil {
			t.Fatal(err)
		}
	}
	data3 := invFrame(t, h, &frame.Payload{T: frame.Data, Data: []byte("three")})
	retx := h
	retx.Flags = frame.FlagRetransmit
	send(data3, invFrame(t, retx, &frame.Payload{T: frame.Data, Data: []byte("three")}))
	if len(got) != 0 {
		t.Fatalf("a retransmission with the same payload reported: %v", got)
	}
	send(invFrame(t, h, &frame.Payload{T: frame.Data, Data: []byte("not three")}))
	if want := "seq-reuse [frames 1,3]: member 1.1 seq 3: frame 3 carries 9 payload bytes that differ from the 5 of frame 1"; len(got) != 1 || got[0].String() != want {
		t.Fatalf("violations %v, want %q", got, want)
	}
	path := <-dumped
	c, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := pcapgo.NewNgReader(c, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 || !strings.HasPrefix(filepath.Base(path), "rbcast-invariant-seq-reuse-") {
		t.Fatalf("dump %s holds %d frames, want the 3 sent", path, n)
	}

	// The sequencer protocol.
	sh := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 100, AckBase: 1, Acks: []uint32{100}}
	u1 := frame.UID{Origin: 2, Incarnation: 5, Seq: 9}
	u2 := frame.UID{Origin: 3, Incarnation: 5, Seq: 9}
	send(invFrame(t, sh, &frame.SeqDataBody{Epoch: 1, UID: u1, Data: []byte("m")}))
	send(invFrame(t, sh, &frame.SeqAcceptBody{Epoch: 1, Entries: []frame.AcceptEntry{{Global: 100, UID: u2}}}))
	sh.Seq = 101
	send(invFrame(t, sh, &frame.SeqDataBody{Epoch: 1, UID: u1, Data: []byte("m")}))
	sh.Seq = 100
	send(invFrame(t, sh, &frame.SeqDataBody{Epoch: 2, UID: u2, Data: []byte("renumbered after an election")}))
	kinds := map[string]int{}
	for _, v := range got[1:] {
		kinds[v.Kind]++
	}
	if kinds["global-reuse"] != 1 || kinds["sequenced-twice"] != 1 || len(got) != 3 {
		t.Fatalf("violations %v, want one global-reuse and one sequenced-twice (another epoch may renumber)", got)
	}
	if c := inv.Counts(); c["seq-reuse"] != 1 || c["global-reuse"] != 1 || c["sequenced-twice"] != 1 {
		t.Fatalf("counts %v", c)
	}
	select {
	case p := <-dumped:
		t.Fatalf("a second dump %s within the minimum interval", p)
	default:
	}
	if !bytes.Equal(got[0].Frame[:6], frame.Broadcast[:]) {
		t.Error("violation frame is not the Ethernet frame")
	}
}

// TestInvariantsSeqMember: a SeqMember binds its global number like a
// SeqData: a SeqData on the same global, or another change, is a
// global-reuse; its retransmission is not, and neither is the same
// member removed, readmitted and removed again (three globals).
func TestInvariantsSeqMember(t *testing.T) {
	var got []Violation
	inv := NewInvariants(8, func(v Violation) { got = append(got, v) })
	l, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Invariants: inv})
	if err != nil {
		t.Fatal(err)
	}
	sh := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 200, AckBase: 1, Acks: []uint32{200}}
	send := func(h frame.Header, b frame.Body) {
		if _, err := l.Send([][]byte{invFrame(t, h, b)}); err != nil {
			t.Fatal(err)
		}
	}
	removed := &frame.SeqMemberBody{Epoch: 1, Change: frame.MemberRemoved, Reason: frame.ReasonSilent, Member: 3, Incarnation: 5}
	send(sh, removed)
	retx := sh
	retx.Flags = frame.FlagRetransmit
	send(retx, removed)
	sh.Seq = 201
	send(sh, &frame.SeqMemberBody{Epoch: 1, Change: frame.MemberReadmitted, Member: 3, Incarnation: 5})
	sh.Seq = 202
	send(sh, removed)
	if len(got) != 0 {
		t.Fatalf("a retransmission, or removed/readmitted/removed on three globals, reported: %v", got)
	}
	sh.Seq = 200
	send(sh, &frame.SeqDataBody{Epoch: 1, UID: frame.UID{Origin: 2, Incarnation: 5, Seq: 9}, Data: []byte("m")})
	sh.Seq = 201
	send(sh, removed)
	want := []string{
		"global-reuse [frames 1,5]: epoch 1 global 200: frame 1 binds it to the change of member 3.5, frame 5 to request 2.5#9",
		"global-reuse [frames 3,6]: epoch 1 global 201 (the change of member 3.5): frame 6 carries another change than frame 3",
	}
	if len(got) != len(want) {
		t.Fatalf("violations %v, want %q", got, want)
	}
	for i, v := range got {
		if v.String() != want[i] {
			t.Errorf("violation %d: %q, want %q", i, v, want[i])
		}
	}
}

// TestInvariantsWindow: bindings older than the window are forgotten, so
// memory stays bounded.
func TestInvariantsWindow(t *testing.T) {
	var got []Violation
	inv := NewInvariants(4, func(v Violation) { got = append(got, v) })
	l, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Invariants: inv})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range uint32(10) {
		h := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: seq, AckBase: 1, Acks: []uint32{seq + 1}}
		l.Send([][]byte{invFrame(t, h, &frame.Payload{T: frame.Data, Data: []byte{byte(seq)}})})
	}
	h := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 0, AckBase: 1, Acks: []uint32{1}}
	l.Send([][]byte{invFrame(t, h, &frame.Payload{T: frame.Data, Data: []byte("other")})})
	if len(got) != 0 {
		t.Fatalf("violations %v; seq 0 is out of the window, want none", got)
	}
	h = frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 9, AckBase: 1, Acks: []uint32{10}}
	l.Send([][]byte{invFrame(t, h, &frame.Payload{T: frame.Data, Data: []byte("other")})})
	if len(got) != 1 || got[0].Kind != "seq-reuse" {
		t.Fatalf("violations %v; seq 9 is in the window, want one seq-reuse", got)
	}
}
