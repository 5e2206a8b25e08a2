package reliable

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/view"
)

// stepFuzzOrders are the cores FuzzStep drives, each as member 1 of
// three.
var stepFuzzOrders = []Config{
	{Order: FIFO, Mode: PBP2},
	{Order: FIFO, Mode: PBP1},
	{Order: Total},
}

func stepFuzzCore(tb testing.TB, cfg Config, self frame.MemberID) *core.Stepper {
	tb.Helper()
	cfg.Group = 7
	for id := frame.MemberID(1); id <= 3; id++ {
		cfg.Members = append(cfg.Members, frame.MemberInfo{ID: id, MAC: [6]byte{2, 0, 0, 0, 0, byte(id)}, Incarnation: 1})
	}
	s, err := cfg.settings()
	if err != nil {
		tb.Fatal(err)
	}
	c, err := s.newCore(self, cfg.Members, 1500)
	if err != nil {
		tb.Fatal(err)
	}
	return core.NewStepper(c, cfg.Group, frame.EtherType)
}

// stepFuzzSeed is the frames members 2 and 3 send while each proposes a
// few messages and hears nothing: Data, acks, heartbeats, requests. Each
// is its length (u16), the milliseconds since the one before (u8) and
// its bytes after the Ethernet header.
func stepFuzzSeed(tb testing.TB, cfg Config) []byte {
	var seed []byte
	for self := frame.MemberID(2); self <= 3; self++ {
		s := stepFuzzCore(tb, cfg, self)
		for i := range 4 {
			now := clock.Time(0).Add(clock.Duration(i) * 50 * clock.Millisecond)
			_ = s.Propose(now, []byte{'m', byte(i)})
			s.Tick(now)
			for _, f := range s.Ready().Frames {
				body := f[frame.EthernetHeaderLen:]
				seed = binary.BigEndian.AppendUint16(seed, uint16(len(body)))
				seed = append(seed, 10)
				seed = append(seed, body...)
			}
			s.Advance()
		}
	}
	return seed
}

// FuzzStep steps each core (PBP2, PBP1, the sequencer) with arbitrary
// frames from the other members, as the runtime does (the Stepper
// parses them; the CRC is not checked, so that mutated frames reach the
// core), proposing and ticking between frames: no frame panics a core,
// every frame a core sends in answer parses, its CRC included, and what
// it delivers keeps stepWatch's order, whatever the frames claim.
// The input is a list of frames as stepFuzzSeed writes them; each comes
// from its header's sender's MAC.
func FuzzStep(f *testing.F) {
	for _, cfg := range stepFuzzOrders {
		f.Add(stepFuzzSeed(f, cfg))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, cfg := range stepFuzzOrders {
			s := stepFuzzCore(t, cfg, 1)
			w := stepWatch{total: cfg.Order == Total}
			now := clock.Time(0)
			for rest := in; len(rest) >= 3; {
				n, dt := int(binary.BigEndian.Uint16(rest)), rest[2]
				rest = rest[3:]
				n = min(n, len(rest))
				body := rest[:n]
				rest = rest[n:]
				now = now.Add(clock.Duration(dt) * clock.Millisecond)
				src := [6]byte{2, 0, 0, 0, 0, 2}
				if v, err := frame.ParseNoCRC(body); err == nil {
					src[5] = byte(v.Sender()) // the sender's MAC, as the members' list has it
				}
				eth := append(frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType), body...)
				_ = s.StepVerified(now, eth)
				w.step(t, s)
				w.propose(now, s)
				s.Tick(now)
				w.step(t, s)
			}
		}
	})
}

// stepWatch checks the deliveries of member 1 of a fixed group of three
// whatever it hears: each from a member of the group; the reliable ones
// of each member in the order they were sent, each once (FIFO: by the
// frame's sequence number and the message's place in its bundle); under
// the total order each at the next place of the order (a global number
// above the last); its own messages at most once, in the order it
// proposed them.
type stepWatch struct {
	total    bool
	proposed uint32 // own messages proposed: "own" and a number
	own      uint32 // the number of the last own message delivered
	last     [4]struct {
		seq   uint32
		index int
		any   bool
	}
	global    uint32
	anyGlobal bool
}

func (w *stepWatch) step(t *testing.T, s *core.Stepper) {
	t.Helper()
	for _, d := range s.Ready().Deliveries {
		if d.From < 1 || d.From > 3 {
			t.Fatalf("delivered a message from %d, not a member: %+v", d.From, d)
		}
		if d.Unreliable {
			continue
		}
		if len(d.Data) == 7 && string(d.Data[:3]) == "own" && d.From == 1 {
			if n := binary.BigEndian.Uint32(d.Data[3:]); n <= w.own || n > w.proposed {
				t.Fatalf("delivered own message %d after own message %d (%d proposed)", n, w.own, w.proposed)
			} else {
				w.own = n
			}
		}
		if w.total {
			if w.anyGlobal && !frame.SeqLess(w.global, d.Global) {
				t.Fatalf("delivered global %d (from %d) after global %d", d.Global, d.From, w.global)
			}
			w.global, w.anyGlobal = d.Global, true
			continue
		}
		l := &w.last[d.From]
		if l.any && !(frame.SeqLess(l.seq, d.Seq) || l.seq == d.Seq && d.Index > l.index) {
			t.Fatalf("delivered %d's message %d.%d after its %d.%d", d.From, d.Seq, d.Index, l.seq, l.index)
		}
		l.seq, l.index, l.any = d.Seq, d.Index, true
	}
	sentParse(t, s)
}

// propose proposes member 1's next own message.
func (w *stepWatch) propose(now clock.Time, s *core.Stepper) {
	w.proposed++
	if s.Propose(now, binary.BigEndian.AppendUint32([]byte("own"), w.proposed)) != nil {
		w.proposed--
	}
}

// sentParse takes s's Ready and fails the test unless each frame it
// sends parses as a frame of group 7 with its CRC; then Advance.
func sentParse(t *testing.T, s *core.Stepper) {
	t.Helper()
	for _, f := range s.Ready().Frames {
		if _, err := frame.ParseGroup(f[frame.EthernetHeaderLen:], 7); err != nil {
			t.Fatalf("a frame the core sent does not parse: %v\n% x", err, f)
		}
	}
	s.Advance()
}

// stepViewsOrders are the levels FuzzStepViews drives a process of a
// group with views (Config.Views) at: FIFO, Agreed and Safe.
var stepViewsOrders = []Config{
	{Order: FIFO},
	{Order: Total},
	{Order: Total, Safe: true},
}

// stepViewsMAC is the address of process i (its incarnation is 1 and its
// Join nonce i, so that a process is a function of i).
func stepViewsMAC(i byte) [6]byte { return [6]byte{2, 0, 0, 0, 0, i} }

// stepViewsCore is process i of a group with views founded by three, at
// cfg's level, as Join builds it, on a stepper; and its membership core.
// Its timers are short, so that three found their view in 50 ms.
func stepViewsCore(tb testing.TB, cfg Config, i byte) (*core.Stepper, *view.Core) {
	tb.Helper()
	cfg.Group, cfg.Views, cfg.Size = 7, true, 3
	cfg.HeartbeatInterval, cfg.FailureTimeout, cfg.JoinRetry = 20*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	c, err := NewViewCore(cfg, ViewProcess{MAC: stepViewsMAC(i), MTU: 1500, Incarnation: 1, Nonce: uint64(i)})
	if err != nil {
		tb.Fatal(err)
	}
	return core.NewStepper(ViewLevel(cfg, c), cfg.Group, frame.EtherType), c
}

// stepViewsStart is when the processes start (the seeds were recorded
// from 1 ms; a start at 0 works too: TestViewsFoundFromTimeZero).
const stepViewsStart = clock.Time(clock.Millisecond)

// stepViewsSeed is what process 1 hears while processes 1, 2 and 3 found
// a view and each proposes a message every 10 ms, on a lossless segment
// in 1 ms steps: 150 ms, the view and a few of its messages. Each frame
// is its length (u16), the milliseconds since the one before (u8), its
// source's and its destination's last address byte (u8 each, 0 for
// broadcast) and its bytes after the Ethernet header. It fails unless
// process 1 installed the view and delivered the others' messages in it.
func stepViewsSeed(tb testing.TB, cfg Config) []byte {
	var ps []*core.Stepper
	var first *view.Core
	for i := byte(1); i <= 3; i++ {
		p, c := stepViewsCore(tb, cfg, i)
		ps = append(ps, p)
		if i == 1 {
			first = c
		}
	}
	var seed []byte
	heard := stepViewsStart
	delivered := map[byte]int{}
	for ms := range 150 {
		now := stepViewsStart.Add(clock.Duration(ms) * clock.Millisecond)
		var sent [][]byte
		for i, p := range ps {
			if ms%10 == i {
				_ = p.Propose(now, []byte{'m', byte(i), byte(ms / 10)})
			}
			p.Tick(now)
			rd := p.Ready()
			for _, f := range rd.Frames {
				sent = append(sent, slices.Clone(f))
			}
			if i == 0 {
				for _, d := range rd.Deliveries {
					if len(d.Data) == 3 && d.Data[0] == 'm' {
						delivered[d.Data[1]]++
					}
				}
			}
			p.Advance()
		}
		for _, f := range sent {
			e, _, err := frame.SplitEthernet(f, frame.EtherType)
			if err != nil {
				tb.Fatal(err)
			}
			for i, p := range ps {
				to := stepViewsMAC(byte(i + 1))
				if e.Src() == to || (e.Dst() != frame.Broadcast && e.Dst() != to) {
					continue
				}
				_ = p.Step(now, f)
				if i == 0 {
					body := f[frame.EthernetHeaderLen:]
					seed = binary.BigEndian.AppendUint16(seed, uint16(len(body)))
					seed = append(seed, byte(now.Sub(heard)/clock.Millisecond), e.Src()[5], 0)
					if e.Dst() != frame.Broadcast {
						seed[len(seed)-1] = e.Dst()[5]
					}
					seed = append(seed, body...)
					heard = now
				}
			}
		}
	}
	if !first.Installed() || delivered[1] < 5 || delivered[2] < 5 {
		tb.Fatalf("process 1 installed a view: %v; delivered the others' messages %v, want 5 or more of each", first.Installed(), delivered)
	}
	return seed
}

// FuzzStepViews is FuzzStep for a process of a group with views, at each
// level (FIFO, Agreed, Safe): arbitrary frames from the other processes,
// stepped as lent from the ring (the zero-copy path), ticking at the
// core's deadlines between frames and proposing and ticking after each;
// no frame panics the core, and every frame it sends parses, its CRC
// included. The input is a list of frames as stepViewsSeed writes them.
func FuzzStepViews(f *testing.F) {
	for _, cfg := range stepViewsOrders {
		f.Add(stepViewsSeed(f, cfg))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, cfg := range stepViewsOrders {
			stepViewsReplay(t, cfg, in)
		}
	})
}

// The seeds of FuzzStepViews bring process 1 into the view when replayed
// as the fuzzer does: the fuzzer starts from the view's normal state, not
// from a process left joining.
func TestStepViewsSeeds(t *testing.T) {
	for _, cfg := range stepViewsOrders {
		if c := stepViewsReplay(t, cfg, stepViewsSeed(t, cfg)); !c.Installed() {
			t.Errorf("%v (safe %v): process 1 installed no view from the seed: %s", cfg.Order, cfg.Safe, c.DebugState())
		}
	}
}

// viewsWatch checks what holds of process 1 whatever it hears: the
// views it installs only go forward, each names its members by id, once
// each, process 1 among them; it delivers its own messages (Agreed and
// Safe: the total order includes them) each at most once, in the order
// it proposed them.
type viewsWatch struct {
	view      uint32
	installed bool
	proposed  uint32 // own messages proposed: "own" and a number
	own       uint32 // the number of the last own message delivered
}

// step takes s's Ready as sentParse does, and checks c and the Ready.
func (w *viewsWatch) step(t *testing.T, s *core.Stepper, c *view.Core) {
	t.Helper()
	for _, d := range s.Ready().Deliveries {
		if len(d.Data) != 7 || string(d.Data[:3]) != "own" {
			continue
		}
		if n := binary.BigEndian.Uint32(d.Data[3:]); n <= w.own || n > w.proposed {
			t.Fatalf("delivered own message %d after own message %d (%d proposed)", n, w.own, w.proposed)
		} else {
			w.own = n
		}
	}
	sentParse(t, s)
	if !c.Installed() {
		return
	}
	v := c.View()
	if w.installed && frame.SeqLess(v.ID, w.view) {
		t.Fatalf("installed view %d after view %d", v.ID, w.view)
	}
	w.view, w.installed = v.ID, true
	self := 0
	for i, m := range v.Members {
		if i > 0 && m.ID <= v.Members[i-1].ID {
			t.Fatalf("view %d: members not by id, once each: %v", v.ID, v.Members)
		}
		if m.MAC == stepViewsMAC(1) && m.Incarnation == 1 {
			self++
		}
	}
	if self != 1 {
		t.Fatalf("view %d names process 1 %d times: %v", v.ID, self, v.Members)
	}
}

// propose proposes process 1's next own message.
func (w *viewsWatch) propose(now clock.Time, s *core.Stepper) {
	w.proposed++
	if s.Propose(now, binary.BigEndian.AppendUint32([]byte("own"), w.proposed)) != nil {
		w.proposed-- // refused: never delivered
	}
}

// stepViewsReplay steps process 1 at cfg's level with the frames in (as
// stepViewsSeed writes them), failing t if a frame it sends does not
// parse or viewsWatch's checks fail; its membership core.
func stepViewsReplay(t *testing.T, cfg Config, in []byte) *view.Core {
	s, c := stepViewsCore(t, cfg, 1)
	var w viewsWatch
	now, ticked := stepViewsStart, stepViewsStart
	s.Tick(now)
	w.step(t, s, c)
	loan := core.Loan(0)
	for rest := in; len(rest) >= 5; {
		n, dt, src, dst := int(binary.BigEndian.Uint16(rest)), rest[2], rest[3], rest[4]
		rest = rest[5:]
		n = min(n, len(rest))
		body := rest[:n]
		rest = rest[n:]
		now = now.Add(clock.Duration(dt) * clock.Millisecond)
		to := frame.Broadcast
		if dst != 0 {
			to = stepViewsMAC(dst)
		}
		eth := append(frame.AppendEthernet(nil, to, stepViewsMAC(src), frame.EtherType), body...)
		// The deadlines up to now first, as the runtime wakes for them
		// (a view is founded at one, between frames).
		for range 64 {
			d := s.Deadline()
			if d == 0 || d <= ticked || d > now {
				break
			}
			s.Tick(d)
			w.step(t, s, c)
			ticked = d
		}
		loan++
		_ = s.StepLent(now, eth, true, loan) // eth is never reused: the loan need not end
		w.step(t, s, c)
		w.propose(now, s)
		s.Tick(now)
		w.step(t, s, c)
		ticked = now
	}
	return c
}
