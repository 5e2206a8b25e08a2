package pbp

import (
	"bytes"
	"slices"
	"testing"
	"unsafe"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// stepLent steps f as a frame whose bytes the link lends under loan, and
// returns its bytes.
func stepLent(t *testing.T, c *Core, now Time, f in, loan core.Loan) frame.View {
	t.Helper()
	src, v := f.view(t)
	if err := c.StepLent(now, src, frame.Broadcast, v, loan); err != nil {
		t.Fatal(err)
	}
	return v
}

// inside reports whether b lies in v's bytes.
func inside(b []byte, v frame.View) bool {
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return len(b) > 0 && p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(v))
}

// A frame retained for a view change (Retain) whose bytes the link lends
// is kept where it lies, not copied: the same bytes are delivered and
// retained, Loans reports the loan taken, and it goes back when the
// slot takes another frame, when a frame need not be kept, or when the
// link wants it (Reclaim: copied first, the bytes unchanged). A frame
// stepped without a loan is copied as before, and a layer cannot pin
// lent bytes.
func TestRetainLentFrames(t *testing.T) {
	cfg := testConfig(PBP2, 2, 3)
	cfg.Retain, cfg.Window = true, 4
	c := newCore(t, cfg)
	v100 := stepLent(t, c, t0+1, in{sender: 0, seq: 100, body: data("m100")}, 7)
	rd := c.Ready()
	if len(rd.Deliveries) != 1 || !inside(rd.Deliveries[0].Data, v100) || string(rd.Deliveries[0].Data) != "m100" {
		t.Fatalf("deliveries %+v, want m100 from the lent bytes", rd.Deliveries)
	}
	c.Advance()
	if kept, _, ok := c.Retained(0, 100); !ok || !inside(kept, v100) {
		t.Fatalf("Retained(100) = %q, %v; want the lent bytes", kept, ok)
	}
	if c.Pin(0, 100, rd.Deliveries[0].Data) {
		t.Fatal("Pin of a message in lent bytes succeeded; the layer must copy it")
	}
	taken, returned := c.Loans(nil, nil)
	if !slices.Equal(taken, []core.Loan{7}) || len(returned) != 0 {
		t.Fatalf("Loans: taken %v, returned %v; want [7], []", taken, returned)
	}
	// Not lent: copied.
	step(t, c, t0+2, in{sender: 0, seq: 101, body: data("m101")})
	ready(t, c)
	if kept, _, ok := c.Retained(0, 101); !ok || string(kept) != "m101" {
		t.Fatalf("Retained(101) = %q, %v; want m101", kept, ok)
	}
	// Member 1 acknowledged 102 before it comes: not kept, its loan
	// returned in the same Step.
	step(t, c, t0+3, in{sender: 1, seq: 100, acks: []uint32{103, 100, 100}, body: &frame.Empty{T: frame.Ack}})
	stepLent(t, c, t0+3, in{sender: 0, seq: 102, body: data("m102")}, 8)
	ready(t, c)
	if taken, returned = c.Loans(nil, nil); len(taken) != 0 || len(returned) != 0 {
		t.Fatalf("a frame not kept: Loans taken %v, returned %v; want none", taken, returned)
	}
	v103 := stepLent(t, c, t0+4, in{sender: 0, seq: 103, body: data("m103")}, 9)
	ready(t, c)
	// The link wants loans before 9 back: 100's bytes are copied, then
	// overwritten by the link; 103's stay lent.
	c.Reclaim(9, false)
	if taken, returned = c.Loans(nil, nil); !slices.Equal(taken, []core.Loan{9}) || !slices.Equal(returned, []core.Loan{7}) {
		t.Fatalf("Reclaim(9): Loans taken %v, returned %v; want [9], [7]", taken, returned)
	}
	for i := range v100 {
		v100[i] = 0xee
	}
	if kept, _, ok := c.Retained(0, 100); !ok || string(kept) != "m100" || inside(kept, v100) {
		t.Fatalf("Retained(100) after Reclaim = %q, %v; want m100, copied", kept, ok)
	}
	if kept, _, ok := c.Retained(0, 103); !ok || !inside(kept, v103) {
		t.Fatalf("Retained(103) = %q, %v; want it in its lent bytes", kept, ok)
	}
	if st := c.Counters(); st.KeptLent != 2 || st.LoansReclaimed != 1 {
		t.Fatalf("KeptLent %d, LoansReclaimed %d; want 2, 1", st.KeptLent, st.LoansReclaimed)
	}
	// 107 takes 103's slot (Window 4): 103's loan goes back.
	for s := uint32(104); s <= 107; s++ {
		stepLent(t, c, t0+5, in{sender: 0, seq: s, body: data("m")}, core.Loan(10+s-104))
	}
	ready(t, c)
	taken, returned = c.Loans(nil, nil)
	if !slices.Contains(returned, 9) || len(taken) != 4 {
		t.Fatalf("slot of 103 reused: Loans taken %v, returned %v; want 4 taken, 9 returned", taken, returned)
	}
	// A core that runs no more drops what it keeps under loans.
	c.Reclaim(core.AllLoans, true)
	if _, returned = c.Loans(nil, nil); len(returned) != 4 {
		t.Fatalf("Reclaim(all, forget) returned %v, want the 4 loans held", returned)
	}
	if kept, _, ok := c.Retained(0, 107); ok {
		t.Fatalf("Retained(107) = %q after the core dropped its loans", kept)
	}
}

// A relayed frame (ViewRelay) is retained from the relay's bytes: under
// the relay's loan when it lies in them, and copied when the core steps
// it from bytes of its own.
func TestRetainLentRelay(t *testing.T) {
	cfg := testConfig(PBP2, 2, 3)
	cfg.Retain, cfg.Relay = true, true
	c := newCore(t, cfg)
	_, inner := in{sender: 0, seq: 100, body: data("relayed")}.view(t)
	v := stepLent(t, c, t0+1, in{sender: 1, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.ViewRelayBody{Frame: inner}}, 5)
	_, ds, _ := ready(t, c)
	if len(ds) != 1 || string(ds[0].Data) != "relayed" {
		t.Fatalf("deliveries %+v, want the relayed message", ds)
	}
	kept, _, ok := c.Retained(0, 100)
	if !ok || !bytes.Equal(kept, []byte("relayed")) {
		t.Fatalf("Retained(100) = %q, %v; want relayed", kept, ok)
	}
	if taken, _ := c.Loans(nil, nil); !inside(kept, v) || !slices.Equal(taken, []core.Loan{5}) {
		t.Fatalf("retained in the relay's bytes: %v, loans taken %v; want true, [5]", inside(kept, v), taken)
	}
	// The same relay stepped from a copy while another frame's loan is
	// set (a layer that stepped bytes of its own under StepLent): the
	// relayed frame is not in the lent bytes, so it is copied.
	c = newCore(t, cfg)
	src, v := in{sender: 1, seq: 99, acks: []uint32{100, 100, 100}, body: &frame.ViewRelayBody{Frame: inner}}.view(t)
	c.loan, c.loanView = 6, frame.View(bytes.Clone(v))
	if err := c.Step(t0+1, src, frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
	c.loan, c.loanView = core.NoLoan, nil
	ready(t, c)
	if taken, _ := c.Loans(nil, nil); len(taken) != 0 {
		t.Fatalf("bytes outside the lent frame kept under its loan: taken %v", taken)
	}
	if kept, _, ok := c.Retained(0, 100); !ok || string(kept) != "relayed" || inside(kept, v) {
		t.Fatalf("Retained(100) = %q, %v; want a copy of relayed", kept, ok)
	}
}
