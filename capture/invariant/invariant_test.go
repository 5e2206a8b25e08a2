package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// feed builds frames and checks them one by one, collecting violations.
type feed struct {
	t   *testing.T
	c   *Checker
	n   int
	got []Violation
}

func newFeed(t *testing.T, opts Options, ifaces ...string) *feed {
	f := &feed{t: t, c: New(opts)}
	for _, name := range ifaces {
		f.c.AddInterface(name)
	}
	return f
}

func (f *feed) frame(iface int, dir Dir, lost uint64, from frame.MemberID, h frame.Header, b frame.Body) {
	f.t.Helper()
	h.Group, h.Sender, h.Incarnation = 7, from, 1
	data := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, byte(from)}, frame.EtherType)
	data, err := frame.Append(data, &h, b)
	if err != nil {
		f.t.Fatal(err)
	}
	_, body, err := frame.SplitEthernet(data, frame.EtherType)
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := frame.Parse(body)
	if err != nil {
		f.t.Fatal(err)
	}
	f.n++
	f.got = append(f.got, f.c.Check(&Frame{N: f.n, Time: t0.Add(time.Duration(f.n) * time.Millisecond), Iface: iface, Dir: dir, Data: data, View: v, Lost: lost})...)
}

func (f *feed) data(iface int, lost uint64, from frame.MemberID, seq uint32) {
	f.frame(iface, DirIn, lost, from, frame.Header{Seq: seq, AckBase: 1, Acks: []uint32{0, 0}}, &frame.Payload{T: frame.Data, Data: []byte{byte(seq)}})
}

func (f *feed) ack(iface int, from frame.MemberID, acks ...uint32) {
	f.frame(iface, DirOut, 0, from, frame.Header{AckBase: 1, Acks: acks}, &frame.Empty{T: frame.Ack})
}

// TestCaptureLossNotJudged: an ack covering a seq the interface did not
// receive is a delivery-order violation — unless the capture lost frames
// of that interface before the ack, when the finding says so and is not
// judged; the other interface's is judged as before.
func TestCaptureLossNotJudged(t *testing.T) {
	f := newFeed(t, Options{}, "n1", "n3")
	for _, iface := range []int{0, 1} {
		f.data(iface, 0, 2, 0)
	}
	f.data(0, 1, 2, 2) // seq 1 lost by the capture of n1, before seq 2
	f.data(1, 0, 2, 2) // and by n3's node itself
	f.ack(0, 1, 0, 3)
	f.ack(1, 3, 0, 3, 0)
	if len(f.got) != 2 {
		t.Fatalf("violations %v, want one at each interface", f.got)
	}
	n1, n3 := f.got[0], f.got[1]
	if want := "delivery-order [frames 5]: at n1: member 1 acknowledges member 2 up to seq 2, so it delivered seq 1, which its interface had not received (not judged: the capture lost 1 frames of n1, the last just before frame 3; the missing one may be among them)"; n1.String() != want {
		t.Errorf("n1: %q\nwant %q", n1, want)
	}
	if n3.Doubt != "" || !strings.Contains(n3.Detail, "at n3: member 3 acknowledges member 2 up to seq 2, so it delivered seq 1") {
		t.Errorf("n3: %v, want a judged delivery-order violation", n3)
	}
	// The doubtful finding does not stop the check at n1: a later hole is
	// reported again (and is not judged either: the loss came before it).
	f.data(0, 0, 2, 3)
	f.data(0, 0, 2, 5)
	f.ack(0, 1, 0, 6)
	if len(f.got) != 3 || !strings.Contains(f.got[2].Detail, "delivered seq 4") || f.got[2].Doubt == "" {
		t.Fatalf("violations %v, want a third, not judged, naming seq 4", f.got)
	}
}

// TestReceivedBounded: with a window, what an interface received of a
// member its node never acknowledges is forgotten past the window, and
// seqs forgotten are not judged.
func TestReceivedBounded(t *testing.T) {
	f := newFeed(t, Options{Window: 16}, "n1")
	f.ack(0, 1, 0, 0)
	for q := range uint32(100) {
		f.data(0, 0, 2, q)
	}
	if r := f.c.received[recvKey{0, streamKey{2, 0}}]; len(r.seqs) > 16 || !r.forgot {
		t.Fatalf("%d seqs kept (forgot %v), want at most the window of 16", len(r.seqs), r.forgot)
	}
	f.ack(0, 1, 0, 100)
	if len(f.got) != 0 {
		t.Fatalf("violations %v about seqs the checker forgot", f.got)
	}
	if r := f.c.received[recvKey{0, streamKey{2, 0}}]; len(r.seqs) != 0 {
		t.Fatalf("%d seqs kept after the ack covered them all", len(r.seqs))
	}
}

// TestRequestAndSeqDataEitherOrder: a SeqData whose payload is not its
// request's is reported whichever of the two the capture holds first.
func TestRequestAndSeqDataEitherOrder(t *testing.T) {
	u := frame.UID{Origin: 2, Incarnation: 1, Seq: 4}
	request := func(f *feed) {
		f.frame(0, DirIn, 0, 2, frame.Header{Seq: 4, AckBase: 1, Acks: []uint32{10}}, &frame.Payload{T: frame.SeqRequest, Data: []byte("request")})
	}
	seqData := func(f *feed) {
		f.frame(0, DirOut, 0, 1, frame.Header{Seq: 10, AckBase: 1, Acks: []uint32{10}}, &frame.SeqDataBody{Epoch: 1, UID: u, Data: []byte("other")})
	}
	for name, order := range map[string][]func(*feed){"request first": {request, seqData}, "SeqData first": {seqData, request}} {
		f := newFeed(t, Options{}, "n1")
		for _, step := range order {
			step(f)
		}
		if len(f.got) != 1 || f.got[0].Kind != KindGlobalReuse || !strings.Contains(f.got[0].Detail, "numbers request 2.1#4 with a payload that differs from the request's") {
			t.Errorf("%s: violations %v, want one global-reuse", name, f.got)
		}
	}
}

// TestCheckAllocs: in steady state (windows full) checking a frame
// allocates nothing: Data received and acknowledged, SeqData numbered.
func TestCheckAllocs(t *testing.T) {
	f := newFeed(t, Options{Window: 1024}, "n1")
	var frames []Frame
	mk := func(dir Dir, from frame.MemberID, h frame.Header, b frame.Body) {
		h.Group, h.Sender, h.Incarnation = 7, from, 1
		data, err := frame.Append(frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, byte(from)}, frame.EtherType), &h, b)
		if err != nil {
			t.Fatal(err)
		}
		_, body, _ := frame.SplitEthernet(data, frame.EtherType)
		v, err := frame.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, Frame{Dir: dir, Data: data, View: v})
	}
	const n = 1 << 14
	for q := range uint32(n) {
		mk(DirIn, 2, frame.Header{Seq: q, AckBase: 1, Acks: []uint32{0, 0}}, &frame.Payload{T: frame.Data, Data: []byte{byte(q)}})
		mk(DirOut, 1, frame.Header{AckBase: 1, Acks: []uint32{0, q + 1}}, &frame.Empty{T: frame.Ack})
		mk(DirIn, 3, frame.Header{Seq: 100 + q, AckBase: 3, Acks: []uint32{100 + q}}, &frame.SeqDataBody{Epoch: 1, UID: frame.UID{Origin: 2, Incarnation: 1, Seq: q}, Data: []byte{byte(q)}})
	}
	i := 0
	step := func() {
		fr := frames[i%len(frames)]
		fr.Time = t0.Add(time.Duration(i) * time.Millisecond)
		if vs := f.c.Check(&fr); len(vs) != 0 {
			t.Fatal(vs)
		}
		i++
	}
	for range len(frames) / 2 {
		step() // fill the windows
	}
	if a := testing.AllocsPerRun(3000, step); a != 0 {
		t.Fatalf("%v allocations per frame checked, want 0", a)
	}
}
