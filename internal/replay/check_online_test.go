package replay

import (
	"bytes"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// scriptLink is a link.Link that plays a script: each step either sends a
// frame (the node's) or has the next Recv return one (a peer's).
type scriptLink struct {
	mac   net.HardwareAddr
	inbox []link.Frame
}

func (s *scriptLink) Send(frames [][]byte) (int, error) { return len(frames), nil }
func (s *scriptLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if len(s.inbox) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(frames, s.inbox)
	s.inbox = s.inbox[n:]
	return n, nil
}
func (s *scriptLink) MTU() int                       { return 1500 }
func (s *scriptLink) HardwareAddr() net.HardwareAddr { return s.mac }
func (s *scriptLink) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (s *scriptLink) Close() error                   { return nil }

// TestOnlineOfflineAgree: frames that break every invariant the checker
// knows pass a wrapped link with capture.Invariants (online) into a
// capture file that Check reads (offline); both report the same
// violations — kind, text, frames and time — because both are package
// invariant's checker fed the same frames.
func TestOnlineOfflineAgree(t *testing.T) {
	var online []Violation
	inv := capture.NewInvariants(0, func(v Violation) { online = append(online, v) })
	var file bytes.Buffer
	w, err := capture.NewWriter(&file, capture.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	self := [6]byte{2, 0, 0, 0, 0, 1}
	sl := &scriptLink{mac: net.HardwareAddr(self[:])}
	l, err := capture.Wrap(sl, w, capture.Options{Node: "1", Interface: "eth0", Invariants: inv, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(from frame.MemberID, h frame.Header, b frame.Body) []byte {
		h.Group, h.Sender, h.Incarnation = 7, from, 1
		out := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, byte(from)}, frame.EtherType)
		out, err := frame.Append(out, &h, b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	recv := func(f []byte) {
		now = now.Add(100 * time.Microsecond)
		sl.inbox = append(sl.inbox, link.Frame{Data: f, Time: now})
		if _, err := l.Recv(time.Time{}, make([]link.Frame, 4)); err != nil {
			t.Fatal(err)
		}
	}
	send := func(f []byte) {
		now = now.Add(100 * time.Microsecond)
		if _, err := l.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
	}
	data := func(from frame.MemberID, seq uint32, payload string) []byte {
		return mk(from, frame.Header{Seq: seq, AckBase: 1, Acks: []uint32{0, 0, 0}}, &frame.Payload{T: frame.Data, Data: []byte(payload)})
	}
	ack := func(acks ...uint32) []byte {
		return mk(1, frame.Header{Seq: 0, AckBase: 1, Acks: acks}, &frame.Empty{T: frame.Ack})
	}

	// PBP: member 2's seqs 0 and 2 arrive, 1 does not; member 1 acks all
	// three (delivery-order), then goes back (delivery-order); member 3
	// sends seq 0 twice with different payloads (seq-reuse).
	recv(data(2, 0, "zero"))
	recv(data(2, 2, "two"))
	send(ack(0, 3, 0))
	send(ack(0, 2, 0))
	recv(data(3, 0, "first"))
	recv(data(3, 0, "second"))
	// Seventeen Nacks from member 3 for one range of member 1's, 0.1 ms
	// apart (nack-storm).
	for i := range 17 {
		recv(mk(3, frame.Header{Seq: uint32(i), AckBase: 1, Acks: []uint32{0, 0, 1}}, &frame.NackBody{Target: 1, Ranges: []frame.Range{{First: 5, Last: 6}}}))
	}
	// The sequencer: global 10 bound to two requests (global-reuse), one
	// request numbered twice (sequenced-twice), a SeqData whose payload is
	// not its request's (global-reuse).
	u := frame.UID{Origin: 2, Incarnation: 1, Seq: 4}
	sh := frame.Header{Seq: 10, AckBase: 1, Acks: []uint32{10}}
	send(mk(1, sh, &frame.SeqDataBody{Epoch: 1, UID: u, Data: []byte("m")}))
	send(mk(1, sh, &frame.SeqAcceptBody{Epoch: 1, Entries: []frame.AcceptEntry{{Global: 10, UID: frame.UID{Origin: 3, Incarnation: 1, Seq: 4}}}}))
	sh.Seq = 11
	send(mk(1, sh, &frame.SeqDataBody{Epoch: 1, UID: u, Data: []byte("m")}))
	recv(mk(2, frame.Header{Seq: 4, AckBase: 1, Acks: []uint32{10}}, &frame.Payload{T: frame.SeqRequest, Data: []byte("not m")}))
	// A frame that fails its CRC (corrupt-frame).
	bad := data(2, 3, "three")
	bad[len(bad)-1] ^= 0xff
	recv(bad)

	l.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Parse("agree.pcapng", file.Bytes(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var offline []Violation
	for _, v := range Check(c, CheckOptions{}) {
		// Gaps never repaired by the end are the whole capture's to show.
		if v.Kind != invariant.KindGap && v.Kind != invariant.KindImplausible {
			offline = append(offline, v)
		}
	}
	want := []string{invariant.KindOrder, invariant.KindOrder, invariant.KindSeqReuse, invariant.KindNackStorm,
		invariant.KindGlobalReuse, invariant.KindSequencedTwice, invariant.KindGlobalReuse, invariant.KindCorrupt}
	var got []string
	for _, v := range online {
		got = append(got, v.Kind)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("online kinds %v, want %v:\n%v", got, want, online)
	}
	if len(offline) != len(online) {
		t.Fatalf("offline %d violations, online %d:\n%v\n%v", len(offline), len(online), offline, online)
	}
	for i := range online {
		a, b := online[i], offline[i]
		if a.String() != b.String() || !a.Time.Equal(b.Time) || !bytes.Equal(a.Frame, b.Frame) {
			t.Errorf("violation %d:\nonline  %v at %v\noffline %v at %v", i, a, a.Time, b, b.Time)
		}
	}
	for _, v := range online {
		t.Log(v)
	}
}
