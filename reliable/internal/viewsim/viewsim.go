// Package viewsim is the churn simulation of groups with views, shared by
// the membership core's tests (reliable/view: FIFO, virtual synchrony) and
// the ordering layer's (reliable/vtotal: Agreed and Safe): processes found
// a group, others join it later, members crash (some restart with a new
// incarnation), leave, or stop hearing one another for a while, on a
// segment that loses, duplicates and reorders frames; every member streams
// messages and datagrams all along, on virtual time (testnet).
package viewsim

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rbcast/rbcast/internal/seeds"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/reliable/vtotal"
	"github.com/rbcast/rbcast/testnet"
)

// The checkers: view agreement (one member list per view id), FIFO and
// exactly once per sender incarnation across views, nothing delivered
// from before a joiner's first view, datagrams intact, in their sender's
// view and at most once, and at the end every live process in one view
// with every message of every live sender delivered; then per level:
// virtual synchrony (FIFO: members that move from a view to the next
// together delivered the same messages in it), the same order (Agreed:
// the same sequence, their own included), and uniformity (Safe: what a
// process delivered before it failed, every process that completed the
// view delivered at the same place).
//
// The simulation (before it moved here from reliable/view): processes found a group, others join it later, members
// crash (and some restart with a new incarnation), leave, on a segment
// that loses, duplicates and reorders frames; every member streams
// messages all along. The checkers: view agreement (one member list per
// view id), virtual synchrony (members that move from a view to the next
// together delivered the same messages in it), FIFO and exactly once per
// sender incarnation across views, nothing delivered from before a
// joiner's first view, and at the end every live process in one view with
// every message of every live sender delivered.

const simGroup = 77

var debug = os.Getenv("VIEW_DEBUG") != ""

// PoisonFreed has every vtotal core of the simulations made from now on
// fill the buffers going back to its pool with 0xEE (vtotal's
// Core.PoisonFreed), so that the checkers see a message whose buffer was
// freed too early as corrupt. Set by the tests of package vtotal; not for
// parallel tests.
var PoisonFreed bool

// churnEnd: joins, crashes, restarts and leaves happen before it; then
// every live process sends its marker.
const churnEnd = 1500 * time.Millisecond

// msg is a message's identity, inside its payload: the sender process's
// MAC and incarnation and its counter.
type msgID struct {
	mac [6]byte
	inc uint32
	n   uint32
}

func encodeMsg(id msgID, pad int) []byte {
	b := make([]byte, 14+pad)
	copy(b, id.mac[:])
	binary.BigEndian.PutUint32(b[6:], id.inc)
	binary.BigEndian.PutUint32(b[10:], id.n)
	for i := range pad {
		b[14+i] = byte(id.n) + byte(i)
	}
	return b
}

func decodeMsg(b []byte) (msgID, bool) {
	if len(b) < 14 {
		return msgID{}, false
	}
	var id msgID
	copy(id.mac[:], b)
	id.inc, id.n = binary.BigEndian.Uint32(b[6:]), binary.BigEndian.Uint32(b[10:])
	for i := range len(b) - 14 {
		if b[14+i] != byte(id.n)+byte(i) {
			return msgID{}, false
		}
	}
	return id, true
}

type process struct {
	run  *simRun
	ep   *testnet.Endpoint
	mac  [6]byte
	inc  uint32
	core *view.Core
	top  core.Core    // what the stepper drives: the membership core, or vtotal over it
	vt   *vtotal.Core // top, under Agreed and Safe; nil under FIFO
	st   *core.Stepper
	lend simLender // the link's loans of received frames
	clk  wall.Clock
	rx   []link.Frame
	rng  *rand.Rand
	// levels draws each message's level (simRun.mix), apart from rng so
	// that the draws there keep their seeds.
	levels *rand.Rand

	view      uint32             // the view installed here (0: none yet)
	firstView uint32             // the first view it joined
	era       int                // the group's life it joined (simRun.era)
	inView    map[uint32][]msgID // delivered in each view
	views     []uint32           // views installed, in order
	sent      uint32             // messages proposed
	budget    uint32             // messages to send during the churn
	// exitAt (scenario.exit): from then on the process sends its
	// remaining budget and leaves right after its last message.
	exitAt time.Time
	// cutAt and cut (scenario.cutLeaver): once the process has sent
	// cutAt messages of its budget, exit calls cut (which cuts it off
	// from members) before it proposes more or leaves.
	cutAt   uint32
	cut     func()
	cutFrom []*process // the processes cut off from it (cut), if any
	// removedIn: per view, the members its core removed there (failed
	// or stalled).
	removedIn map[uint32][]frame.MemberID
	markerAt  time.Time // then one more, once the churn is over
	nextAt    time.Time
	next      map[[10]byte]uint32 // per sender incarnation: next counter expected
	dead      bool
	leaving   bool // Leave called
	left      bool
	err       error
	dgSent    uint32         // datagrams sent
	dgGot     map[msgID]bool // datagrams delivered here

	// batch: the process reads its frames at most this often, so that
	// they come in batches, as a runtime that reads the link in bursts
	// steps them (one Ready for many frames).
	batch  time.Duration
	readAt time.Time

	// drop, when set, discards received frames it returns true for
	// (targeted loss, for scenarios the random loss reaches rarely).
	drop func(f []byte) bool
	// asleep: the process is not stepped (a process starved of CPU): what
	// arrives waits in its endpoint's queue, and it sends nothing, until
	// the test wakes it (wake). sleepAfter, when set, puts it to sleep
	// right after it sends a frame it returns true for.
	asleep     bool
	sleepAfter func(v frame.View) bool

	lastNow time.Time // livelock detection: steps within 1 ms
	spins   int
	steps   int
	types   map[frame.Type]int // sent, for VIEW_DEBUG
	// kinds, when set, counts the FIFO messages of the Data frames it
	// sends (retransmissions aside) by their first byte: vtotal's kind.
	kinds map[byte]int

	// holdRng, heldID and releaseAt: the hold under way (churnHold;
	// heldID NoMember when none).
	holdRng   *rand.Rand
	heldID    frame.MemberID
	releaseAt time.Time

	// handed: the deliveries of the last Ready and a copy of each, held
	// against them until the core's next Step or Tick: a delivery stays
	// unchanged until then (core.Delivery), whatever the process
	// proposes meanwhile.
	handed []handedOut
}

type handedOut struct{ data, copy []byte }

// checkHanded checks that the last Ready's deliveries are intact; the
// core's next Step or Tick follows.
// memberID is p's id in its view (NoMember when not in it).
func (p *process) memberID() frame.MemberID {
	for _, m := range p.core.View().Members {
		if m.MAC == p.mac && m.Incarnation == p.inc {
			return m.ID
		}
	}
	return frame.NoMember
}

func (p *process) checkHanded() {
	for _, h := range p.handed {
		if !bytes.Equal(h.data, h.copy) {
			p.run.fail("process %x.%d: a message delivered in view %d changed before the next Step or Tick: % x, delivered as % x",
				p.mac, p.inc, p.view, h.data[:min(16, len(h.data))], h.copy[:min(16, len(h.copy))])
			break
		}
	}
	clear(p.handed)
	p.handed = p.handed[:0]
}

type eraView struct {
	era int
	id  uint32
}

type simRun struct {
	t     testing.TB
	seed  uint64
	net   *testnet.Network
	procs []*process
	views map[eraView][]frame.MemberInfo // agreed view lists
	// leaveHeard (leaveUnheard scenarios): a member other than the one
	// that drops them received a Leave frame of the leaver.
	leaveHeard bool
	// era counts the group's lives: when every process that had a view
	// is gone, a process that starts later founds a new group, whose
	// view ids start again at 1.
	era    int
	failed error
	start  time.Time
	// dgView is the view each datagram was sent in; dgDelivered counts
	// deliveries of datagrams.
	dgView      map[msgID]uint32
	dgDelivered int
	window      int
	batch       time.Duration
	level       Level
	// mix (Agreed, Safe): one message in mix, drawn per message, goes at
	// the other ordered level than the group's (vtotal's ProposeLevel);
	// 0: every message at the group's. safeSent names the Safe ones.
	mix      int
	safeSent map[msgID]bool
	// noPromptAnswer (a test's knob): under Agreed the PBP cores do not
	// answer at once a frame that asks (pbp.Config.AnswerAckRequests),
	// as before a Safe message in an Agreed group asked.
	noPromptAnswer bool
	// holds (scenario.holds): each process holds a member now and then
	// (HoldFrom) and releases it a little later.
	holds bool
	lost  string // how the primary component was lost (primaryLost)
	// cut: a leaver was cut off (scenario.cutLeaver; process.cutFrom).
	cut bool
}

func (r *simRun) fail(format string, args ...any) {
	if r.failed == nil {
		r.failed = fmt.Errorf(format, args...)
	}
}

func (r *simRun) newProcess(ep *testnet.Endpoint, inc uint32, found int, budget uint32) *process {
	p := &process{run: r, ep: ep, mac: [6]byte(ep.HardwareAddr()), inc: inc, rx: make([]link.Frame, 256), batch: r.batch, heldID: frame.NoMember,
		rng: rand.New(rand.NewPCG(r.seed, uint64(inc))), levels: rand.New(rand.NewPCG(r.seed^0x1e7e1, uint64(inc))), inView: map[uint32][]msgID{}, next: map[[10]byte]uint32{}, dgGot: map[msgID]bool{}, budget: budget, types: map[frame.Type]int{}}
	p.clk = wall.Clock{Epoch: r.start}
	window := r.window
	c, err := view.New(view.Config{
		Group: simGroup, MAC: p.mac, Incarnation: inc, Nonce: uint64(inc) * 7919, Requested: frame.NoMember,
		ConfigHash: 1, MTU: 1500, Found: found, MaxMembers: 16, Window: window,
		Retry: 20 * clock.Millisecond, FailureTimeout: 400 * clock.Millisecond,
		MaxMessage: 200, MaxQueue: 64, Primary: r.level != FIFO, Delivers: func(t frame.Type) bool { return t == frame.Data },
		Start: func(v view.View, self frame.MemberID) (view.Inner, error) {
			return pbp.New(pbp.Config{Group: simGroup, Self: self, Members: v.Members, ViewID: v.ID, Retain: true, PromptAcks: r.level == Safe,
				AnswerAckRequests: r.level == Agreed && !r.noPromptAnswer,
				Window:            window, MaxPayload: 200, HeartbeatInterval: 20 * clock.Millisecond, FailureTimeout: 400 * clock.Millisecond})
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	c.CheckCache()
	p.core, p.top = c, c
	switch r.level {
	case Agreed, Safe:
		v := vtotal.New(c)
		if r.level == Safe {
			v = vtotal.NewSafe(c)
		}
		v.PoisonFreed(PoisonFreed)
		v.VerifySkips(true)
		p.top, p.vt = v, v
	}
	p.st = core.NewStepper(p.top, simGroup, frame.EtherType)
	// Lent frames asked back soon, later, or never: the copy on
	// pressure, and bytes kept for as long as the cores like.
	p.lend = simLender{bound: []uint64{8, 64, 1 << 40}[r.seed%3], held: map[core.Loan]*simLoan{}}
	p.markerAt = r.start.Add(churnEnd)
	ep.Bind(p)
	return p
}

func (p *process) Step(now time.Time) time.Time {
	if p.asleep {
		return time.Time{}
	}
	t := p.clk.Core(now)
	p.steps++
	if now.Sub(p.lastNow) < time.Millisecond {
		p.spins++
		if p.spins == 10000 {
			panic(fmt.Sprintf("livelock: process %x.%d stepped 10000 times within 1 ms at t=%v; deadline %v, core deadline %d, now %d; %s",
				p.mac, p.inc, now.Sub(p.run.start), p.clk.Wall(p.st.Deadline()).Sub(p.run.start), p.top.Deadline(), t, p.core.DebugState()))
		}
	} else {
		p.lastNow, p.spins = now, 0
	}
	if p.batch > 0 {
		if now.Before(p.readAt) {
			return p.readAt
		}
		p.readAt = now.Add(p.batch)
	}
	for {
		p.checkHanded() // before Recv: a delivery may alias a frame
		n, _ := p.ep.Recv(time.Time{}, p.rx)
		p.lend.release()
		for _, f := range p.rx[:n] {
			if p.drop != nil && p.drop(f.Data) {
				continue
			}
			b, loan := p.lend.lend(f.Data)
			p.st.StepLent(t, b, false, loan)
		}
		p.st.Tick(t)
		if p.run.holds {
			p.churnHold(now, t)
		}
		if p.batch == 0 {
			p.propose(now, t)
		} // else flush proposes between Ready and Advance
		p.flush(now, t)
		p.lend.settle(p.run, p.st)
		if err := p.core.CacheErr(); err != nil {
			p.run.fail("process %x.%d: %v", p.mac, p.inc, err)
		}
		if p.vt != nil && p.vt.Err() != nil {
			p.run.fail("process %x.%d: %v", p.mac, p.inc, p.vt.Err())
		}
		if p.asleep {
			return time.Time{}
		}
		if n == 0 {
			break
		}
	}
	d := p.clk.Wall(p.st.Deadline())
	next := p.nextAt
	if next.Before(now) {
		next = now
	}
	if p.sent == p.budget && next.Before(p.markerAt) {
		next = p.markerAt
	}
	if !p.exitAt.IsZero() {
		next = p.nextAt
		if next.Before(p.exitAt) {
			next = p.exitAt
		}
		if p.leaving {
			next = time.Time{}
		}
		if next.Before(now) && !next.IsZero() {
			next = now
		}
	}
	if p.sent <= p.budget && p.view != 0 && !p.left && !next.IsZero() && (d.IsZero() || next.Before(d)) {
		d = next
	}
	if p.heldID != frame.NoMember && (d.IsZero() || p.releaseAt.Before(d)) {
		d = p.releaseAt
	}
	return d
}

// churnHold (scenario.holds): now and then the process holds another
// member of its view (HoldFrom, bounded at 100 ms: a quarter of the
// failure timeout, as the runtime's) and releases it 0–80 ms later,
// whatever changes of the view happen meanwhile; the checkers then say
// whether the holds broke virtual synchrony, FIFO or exactly once.
func (p *process) churnHold(now time.Time, t clock.Time) {
	if p.holdRng == nil {
		p.holdRng = rand.New(rand.NewPCG(p.run.seed^0x401d, uint64(p.inc)))
	}
	if p.heldID != frame.NoMember {
		if !now.Before(p.releaseAt) {
			p.st.ReleaseFrom(p.heldID)
			p.heldID = frame.NoMember
		}
		return
	}
	if !p.core.Installed() || p.holdRng.IntN(20) != 0 {
		return
	}
	ms := p.core.View().Members
	m := ms[p.holdRng.IntN(len(ms))]
	if m.MAC == p.mac && m.Incarnation == p.inc {
		return
	}
	if p.st.HoldFrom(m.ID, t.Add(100*clock.Millisecond)) {
		p.heldID, p.releaseAt = m.ID, now.Add(time.Duration(p.holdRng.IntN(80))*time.Millisecond)
	}
}

// wake ends a sleep: the process reads what waited meanwhile, oldest
// first, and runs its timers.
func (p *process) wake() {
	p.asleep = false
	p.ep.Bind(p) // steps it at once
}

func (p *process) propose(now time.Time, t clock.Time) {
	if p.view == 0 || p.left || now.Before(p.nextAt) {
		return
	}
	if !p.exitAt.IsZero() {
		p.exit(now, t)
		return
	}
	limit := p.budget
	if !now.Before(p.markerAt) && p.run.settled(p) {
		// The marker: sent in the last view (every live process in it),
		// so every live process must deliver every other's.
		limit = p.budget + 1
	}
	for burst := 1 + p.rng.IntN(4); burst > 0 && p.sent < limit; burst-- {
		err := p.proposeNext(t)
		if err == core.ErrWindowFull || err == pbp.ErrFrozen {
			break
		}
		if err != nil {
			break // left or removed: the checks look at it
		}
		p.sent++
	}
	if p.rng.IntN(3) == 0 && p.core.Installed() {
		// A datagram (the Unreliable level), numbered apart.
		id := msgID{p.mac, p.inc, dgFlag | p.dgSent}
		if p.st.ProposeUnreliable(t, encodeMsg(id, p.rng.IntN(60))) == nil {
			p.run.dgView[id] = p.core.View().ID
			p.dgSent++
		}
	}
	p.nextAt = now.Add(time.Duration(200+p.rng.IntN(800)) * time.Microsecond)
}

// proposeNext proposes the process's next message (p.sent), at the
// group's level or, one in simRun.mix, at the other ordered level.
func (p *process) proposeNext(t clock.Time) error {
	id := msgID{p.mac, p.inc, p.sent}
	m := encodeMsg(id, p.rng.IntN(60))
	r := p.run
	if r.mix == 0 || p.vt == nil {
		return p.st.Propose(t, m)
	}
	safe := (r.level == Safe) != (p.levels.IntN(r.mix) == 0)
	err := p.st.ProposeLevel(t, m, safe)
	if err == nil && safe {
		r.safeSent[id] = true
	}
	return err
}

// exit: from exitAt on, the process sends the rest of its budget and
// leaves in the turn of its last message.
func (p *process) exit(now time.Time, t clock.Time) {
	if now.Before(p.exitAt) || p.leaving {
		return
	}
	for burst := 1 + p.rng.IntN(4); burst > 0 && p.sent < p.budget; burst-- {
		if p.cut != nil && p.sent >= p.cutAt {
			break
		}
		if p.proposeNext(t) != nil {
			break
		}
		p.sent++
	}
	if p.cut != nil && p.sent >= p.cutAt {
		// Cut off before the frames of this turn go out: they, and what
		// follows, reach only the members not cut.
		p.cut()
		p.cut = nil
	}
	if p.sent == p.budget && p.core.Installed() {
		p.leaving = true
		p.top.Leave(t)
	}
	p.nextAt = now.Add(time.Duration(200+p.rng.IntN(800)) * time.Microsecond)
}

// dgFlag marks a datagram's counter in its msgID.
const dgFlag = 1 << 31

// datagram checks a datagram delivered here: intact, not its own, in the
// view it was sent in, at most once.
func (p *process) datagram(d core.Delivery) {
	id, ok := decodeMsg(d.Data)
	if !ok || id.n&dgFlag == 0 {
		p.run.fail("process %x.%d: delivered a corrupt datagram from %d: %x", p.mac, p.inc, d.From, d.Data)
		return
	}
	if id.mac == p.mac && id.inc == p.inc {
		p.run.fail("process %x.%d: delivered its own datagram %d", p.mac, p.inc, id.n&^dgFlag)
	}
	if w, sent := p.run.dgView[id]; !sent || w != p.view {
		p.run.fail("process %x.%d in view %d: delivered datagram %d of %x.%d sent in view %d (sent: %v)", p.mac, p.inc, p.view, id.n&^dgFlag, id.mac, id.inc, w, sent)
	}
	if p.dgGot[id] {
		p.run.fail("process %x.%d: delivered datagram %d of %x.%d twice", p.mac, p.inc, id.n&^dgFlag, id.mac, id.inc)
	}
	p.dgGot[id] = true
	p.run.dgDelivered++
}

func key10(mac [6]byte, inc uint32) [10]byte {
	var k [10]byte
	copy(k[:], mac[:])
	binary.BigEndian.PutUint32(k[6:], inc)
	return k
}

func describe(v frame.View) string {
	_, b := v.Decode()
	return fmt.Sprintf("%+v", b)
}

func (p *process) flush(now time.Time, t clock.Time) {
	rd := p.st.Ready()
	if p.batch > 0 {
		// As the runtime does: the application sends while a Ready's
		// output is handed out, before Advance.
		p.propose(now, t)
	}
	if len(rd.Frames) > 0 && !p.ep.Crashed() {
		p.ep.Send(rd.Frames)
		if p.sleepAfter != nil {
			for _, f := range rd.Frames {
				if v, err := frame.Parse(f[frame.EthernetHeaderLen:]); err == nil && p.sleepAfter(v) {
					p.asleep = true
				}
			}
		}
		if p.kinds != nil {
			for _, f := range rd.Frames {
				if v, err := frame.Parse(f[frame.EthernetHeaderLen:]); err == nil && v.Type() == frame.Data && v.Flags()&frame.FlagRetransmit == 0 {
					for ms := v.Messages(); ; {
						m, ok := ms.Next()
						if !ok {
							break
						}
						if len(m) > 0 {
							p.kinds[m[0]]++
						}
					}
				}
			}
		}
		if debug {
			for _, f := range rd.Frames {
				if v, err := frame.Parse(f[14:]); err == nil {
					p.types[v.Type()]++
					if v.Type() >= frame.ViewJoin && v.Type() != frame.ViewJoin {
						fmt.Fprintf(os.Stderr, "t=%v %x.%d sends %v to %x view %d: %s\n", p.run.net.Now().Sub(p.run.start), p.mac[5], p.inc, v.Type(), f[:6], v.ViewID(), describe(v))
					}
				}
			}
		}
	}
	for _, d := range rd.Deliveries {
		p.handed = append(p.handed, handedOut{d.Data, slices.Clone(d.Data)})
		if d.Unreliable {
			p.datagram(d)
			continue
		}
		id, ok := decodeMsg(d.Data)
		if !ok {
			p.run.fail("process %x.%d: delivered a corrupt message from %d: %x", p.mac, p.inc, d.From, d.Data)
			continue
		}
		if p.view == 0 {
			p.run.fail("process %x.%d: delivered %x.%d#%d before any view", p.mac, p.inc, id.mac, id.inc, id.n)
			continue
		}
		k := key10(id.mac, id.inc)
		want, seen := p.next[k]
		if !seen {
			// The first message of a sender seen here: a sender that
			// started before this process joined may be anywhere in its
			// stream, but never before this process's first view's
			// messages (checked by virtual synchrony against the others).
			want = id.n
		}
		if id.n != want {
			p.run.fail("process %x.%d in view %d: message %d of %x.%d, expected %d (FIFO, exactly once)", p.mac, p.inc, p.view, id.n, id.mac, id.inc, want)
		}
		p.next[k] = id.n + 1
		p.inView[p.view] = append(p.inView[p.view], id)
	}
	for _, ev := range rd.Events {
		if debug {
			fmt.Fprintf(os.Stderr, "t=%v %x.%d event %v\n", p.run.net.Now().Sub(p.run.start), p.mac[5], p.inc, ev)
		}
		switch ev.Kind {
		case core.ViewInstalled:
			v := ev.View
			if p.view == 0 && !p.run.anyInView() {
				p.run.era++
			}
			key := eraView{p.run.era, v.ID}
			if agreed, ok := p.run.views[key]; ok {
				if !slices.Equal(agreed, v.Members) {
					p.run.fail("view %d: process %x.%d installed %v, another %v", v.ID, p.mac, p.inc, v.Members, agreed)
				}
			} else {
				p.run.views[key] = slices.Clone(v.Members)
			}
			if p.firstView == 0 {
				p.firstView, p.era = v.ID, p.run.era
			}
			if os.Getenv("VIEW_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "t=%v %x.%d installs view %d %v\n", p.run.net.Now().Sub(p.run.start), p.mac[5], p.inc, v.ID, v.Members)
			}
			p.view = v.ID
			p.views = append(p.views, v.ID)
		case core.MemberFailed, core.MemberStalled:
			if p.removedIn == nil {
				p.removedIn = map[uint32][]frame.MemberID{}
			}
			p.removedIn[p.view] = append(p.removedIn[p.view], ev.Member)
		case core.SelfLeft:
			p.left = true
		case core.SelfRemoved:
			p.err = fmt.Errorf("removed: %s", ev.Reason)
			if err := p.core.Err(); errors.Is(err, view.ErrMinority) {
				p.err = fmt.Errorf("removed: %w", err) // its text says why
			}
		}
	}
	p.st.Advance()
}

// scenario is one seed's configuration.
type scenario struct {
	seed              uint64
	founders, joiners int
	crashes, restarts int
	leaves            int
	loss              float64
	dup, reorder      float64
	msgs              uint32
	batch             time.Duration // processes read frames at most this often (0: at once)
	level             Level         // Agreed or Safe drawn per seed for the ordered levels
	mix               int           // simRun.mix
	// deaf: for a while one member stops hearing another while both hear
	// everyone else (a one-way cut): each one's core removes the other,
	// the coordinator hears both, and only the members' reports
	// (ViewSuspect) change the view.
	deaf bool
	// exit: every founder leaves, a few milliseconds apart, at exitAt
	// after the start (a program whose processes all exit once done):
	// each at exitAt plus up to exitJitter, drawn per process (0: every
	// one at exitAt, the same instant).
	exit       bool
	exitAt     time.Duration
	exitJitter time.Duration
	// leaveAtChange: one member crashes at crashAt and another leaves
	// about when the others' cores fail it (the failure timeout later,
	// give or take a few milliseconds): its Leave and the change's
	// Prepare cross (issue 19). Nobody else may stop.
	leaveAtChange bool
	crashAt       time.Duration
	leaveAfter    time.Duration
	// leaveUnheard (with leaveAtChange): every Leave frame of the leaver
	// is lost on its way to the member that coordinates the change (the
	// lowest id of the others that live), or, with unheardAtMember, on
	// its way to the lowest of the others but that one instead.
	leaveUnheard    bool
	unheardAtMember bool
	// holds: processes hold one sender now and then (process.churnHold).
	holds bool
	// leavers (LeaverCutSeeds): that many founders (1 or 2), drawn, send
	// their budget from leaveAt on (the second leaveGap later) and leave
	// in the turn of their last message, as exit's do; the others stream
	// as in the churn.
	leavers  int
	leaveAt  time.Duration
	leaveGap time.Duration
	// cutLeaver (with leavers): the first leaver is cut off, every frame
	// both ways, from cutCount of the members live then (0: all the
	// others) once cutLeft messages of its budget remain unsent (0: in
	// the turn of its Leave, its last message with it); the cut heals
	// cutSpan later (0: never).
	cutLeaver bool
	cutLeft   int
	cutCount  int
	cutSpan   time.Duration
}

func (s scenario) String() string {
	str := fmt.Sprintf("seed=%d level=%v mix=%d founders=%d joiners=%d crashes=%d restarts=%d leaves=%d loss=%.3f dup=%.3f reorder=%.3f msgs=%d batch=%v deaf=%v exit=%v",
		s.seed, s.level, s.mix, s.founders, s.joiners, s.crashes, s.restarts, s.leaves, s.loss, s.dup, s.reorder, s.msgs, s.batch, s.deaf, s.exitAt)
	if s.exit {
		str += fmt.Sprintf(" exit-jitter=%v", s.exitJitter)
	}
	if s.holds {
		str += " holds=true"
	}
	if s.leavers > 0 {
		str += fmt.Sprintf(" leavers=%d leave-at=%v leave-gap=%v cut-leaver=%v", s.leavers, s.leaveAt, s.leaveGap, s.cutLeaver)
		if s.cutLeaver {
			str += fmt.Sprintf(" cut-left=%d cut-count=%d cut-span=%v", s.cutLeft, s.cutCount, s.cutSpan)
		}
	}
	if s.leaveAtChange {
		str += fmt.Sprintf(" crash=%v leave-after=%v leave-unheard=%v", s.crashAt, s.leaveAfter, s.leaveUnheard)
		if s.leaveUnheard {
			str += fmt.Sprintf(" unheard-at-member=%v", s.unheardAtMember)
		}
	}
	return str
}

func newScenario(seed uint64, level Level) scenario {
	r := rand.New(rand.NewPCG(seed, 0x71e5))
	s := scenario{seed: seed, founders: 1 + r.IntN(4), joiners: r.IntN(4), msgs: uint32(20 + r.IntN(80))}
	s.crashes = r.IntN(2)
	if s.crashes > 0 && r.IntN(2) == 0 {
		s.restarts = 1
	}
	if r.IntN(4) == 0 {
		s.leaves = 1
	}
	s.loss = []float64{0, 0, 0.01, 0.05, 0.1}[r.IntN(5)]
	if r.IntN(3) == 0 {
		s.dup = 0.02
	}
	if r.IntN(3) == 0 {
		s.reorder = 0.02
	}
	if r.IntN(3) == 0 {
		s.batch = time.Duration(1+r.IntN(5)) * time.Millisecond
	}
	s.level = level
	s.level = drawOrdered(r, level)
	s.deaf = r.IntN(4) == 0 // drawn last: the draws above keep their seeds
	if s.level != FIFO {
		s.mix = drawMix(seed)
	}
	return s
}

// drawMix is a seed's simRun.mix: a third of the seeds send every message
// at the group's level, a third one in two and a third one in eight at
// the other (drawn apart, so that the scenario's draws keep their seeds).
func drawMix(seed uint64) int {
	return []int{0, 2, 8}[rand.New(rand.NewPCG(seed, 0x1e7e1)).IntN(3)]
}

func runScenario(t testing.TB, s scenario) *simRun {
	net, err := testnet.New(s.seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun{t: t, seed: s.seed, net: net, views: map[eraView][]frame.MemberInfo{}, start: net.Now(), window: 16, batch: s.batch, dgView: map[msgID]uint32{}, level: s.level, mix: s.mix, safeSent: map[msgID]bool{}, holds: s.holds}
	imp := testnet.Impairment{Loss: s.loss, Duplicate: s.dup, Reorder: s.reorder, ReorderDelay: 300 * time.Microsecond}
	rng := rand.New(rand.NewPCG(s.seed, 0xbeef))
	var eps []*testnet.Endpoint
	attach := func() *testnet.Endpoint {
		ep, err := net.Attach(testnet.EndpointConfig{In: imp})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		return ep
	}
	inc := uint32(s.seed%1000)*100 + 1
	for range s.founders {
		r.procs = append(r.procs, r.newProcess(attach(), inc, s.founders, s.msgs))
		inc++
	}
	for i := range s.joiners {
		at := time.Duration(50+rng.IntN(400)) * time.Millisecond
		ep := attach()
		ep.Crash() // not yet started
		myInc := inc
		inc++
		net.AfterFunc(at+time.Duration(i)*time.Millisecond, func() {
			ep.Restart()
			r.procs = append(r.procs, r.newProcess(ep, myInc, 1, s.msgs))
		})
	}
	for range s.crashes {
		at := time.Duration(100+rng.IntN(600)) * time.Millisecond
		restart := s.restarts > 0
		myInc := inc
		inc++
		net.AfterFunc(at, func() {
			var live []*process
			for _, p := range r.procs {
				if !p.dead && !p.left && p.view != 0 {
					live = append(live, p)
				}
			}
			if len(live) < 2 {
				return
			}
			p := live[rng.IntN(len(live))]
			p.dead = true
			p.ep.Crash()
			if restart {
				net.AfterFunc(300*time.Millisecond, func() {
					p.ep.Restart()
					r.procs = append(r.procs, r.newProcess(p.ep, myInc, 1, s.msgs))
				})
			}
		})
	}
	for range s.leaves {
		at := time.Duration(200+rng.IntN(500)) * time.Millisecond
		net.AfterFunc(at, func() {
			for _, p := range r.procs {
				if !p.dead && !p.left && p.view != 0 && p.core.Installed() {
					p.top.Leave(p.clk.Core(net.Now()))
					p.ep.Bind(p) // step it now
					return
				}
			}
		})
	}
	if s.leaveAtChange {
		net.AfterFunc(s.crashAt, func() {
			var live []*process
			for _, p := range r.procs {
				if !p.dead && !p.left && p.err == nil && p.core.Installed() {
					live = append(live, p)
				}
			}
			if len(live) < 2 {
				return
			}
			x := rng.IntN(len(live))
			crashed := live[x]
			crashed.dead = true
			crashed.ep.Crash()
			leaver := live[(x+1+rng.IntN(len(live)-1))%len(live)]
			if s.leaveUnheard {
				var coord, member *process
				for _, p := range live {
					if p != crashed && p != leaver && (coord == nil || p.memberID() < coord.memberID()) {
						coord = p
					}
				}
				for _, p := range live {
					if p != crashed && p != leaver && p != coord && (member == nil || p.memberID() < member.memberID()) {
						member = p
					}
				}
				deaf := coord // the one that loses the Leave frames
				if s.unheardAtMember && member != nil {
					deaf = member
				}
				isLeave := func(f []byte) bool {
					v, err := frame.Parse(f[frame.EthernetHeaderLen:])
					return err == nil && v.Type() == frame.Leave && [6]byte(f[6:12]) == leaver.mac
				}
				for _, p := range live {
					switch {
					case p == deaf:
						p.drop = isLeave
					case p != crashed && p != leaver:
						p.drop = func(f []byte) bool {
							r.leaveHeard = r.leaveHeard || isLeave(f)
							return false
						}
					}
				}
			}
			net.AfterFunc(s.leaveAfter, func() {
				if !leaver.dead && !leaver.left && leaver.err == nil && leaver.core.Installed() {
					leaver.leaving = true
					leaver.top.Leave(leaver.clk.Core(net.Now()))
					leaver.ep.Bind(leaver) // step it now
				}
			})
		})
	}
	if s.exit {
		for _, p := range r.procs {
			var j time.Duration
			if s.exitJitter > 0 {
				j = time.Duration(rng.IntN(int(s.exitJitter/time.Microsecond))) * time.Microsecond
			}
			p.exitAt = p.run.start.Add(s.exitAt + j)
		}
	}
	if s.leavers > 0 {
		r.leaveCut(s)
	}
	if s.deaf {
		at := time.Duration(150+rng.IntN(500)) * time.Millisecond
		span := time.Duration(300+rng.IntN(700)) * time.Millisecond
		net.AfterFunc(at, func() {
			var live []*process
			for _, p := range r.procs {
				if !p.dead && !p.left && p.err == nil && p.core.Installed() {
					live = append(live, p)
				}
			}
			if len(live) < 3 {
				return
			}
			x := rng.IntN(len(live))
			y := (x + 1 + rng.IntN(len(live)-1)) % len(live)
			deaf, from := live[x].ep, live[y].ep
			deaf.Deafen(from, true)
			net.AfterFunc(span, func() { deaf.Deafen(from, false) })
		})
	}
	limit := net.Now().Add(20 * time.Second)
	for r.failed == nil && net.Now().Before(limit) && !r.done() {
		if debug {
			fmt.Fprintf(os.Stderr, "t=%v\n", net.Now().Sub(r.start))
			for _, p := range r.procs {
				fmt.Fprintf(os.Stderr, "  %x.%d steps=%d sent=%v\n", p.mac[5], p.inc, p.steps, p.types)
				p.steps, p.types = 0, map[frame.Type]int{}
			}
		}
		net.RunFor(10 * time.Millisecond)
	}
	return r
}

// leaveCut sets up LeaverCutSeeds' leavers (scenario.leavers) and the
// cut of the first (scenario.cutLeaver), with draws of its own.
func (r *simRun) leaveCut(s scenario) {
	rng := rand.New(rand.NewPCG(s.seed, 0xc07))
	founders := r.procs[:s.founders]
	first := rng.IntN(len(founders))
	ls := []*process{founders[first]}
	if s.leavers > 1 {
		ls = append(ls, founders[(first+1+rng.IntN(len(founders)-1))%len(founders)])
	}
	for i, l := range ls {
		l.exitAt = r.start.Add(s.leaveAt + time.Duration(i)*s.leaveGap)
	}
	if !s.cutLeaver {
		return
	}
	l := ls[0]
	l.cutAt = l.budget - uint32(min(s.cutLeft, int(l.budget)))
	l.cut = func() {
		var others []*process
		for _, q := range r.procs {
			if q != l && !q.dead && !q.left && q.err == nil {
				others = append(others, q)
			}
		}
		rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		if s.cutCount > 0 && s.cutCount < len(others) {
			others = others[:s.cutCount]
		}
		l.cutFrom = others
		r.cut = true
		for _, q := range others {
			l.ep.Deafen(q.ep, true)
			q.ep.Deafen(l.ep, true)
		}
		if s.cutSpan > 0 {
			r.net.AfterFunc(s.cutSpan, func() {
				for _, q := range others {
					l.ep.Deafen(q.ep, false)
					q.ep.Deafen(l.ep, false)
				}
			})
		}
	}
}

// primaryLost reports whether, under a primary component (Agreed, Safe),
// the group's last view lost its majority for good, and says how: no live
// process is in a view, and of the last view's members (those that left
// cleanly aside) no more than half are processes that installed it and
// did not crash. Then no member may form a next view (each stops with
// ErrMinority), and the processes still joining wait for ever: a lost
// primary is final (docs/membership.md, "Partitions");
// TestPrimaryLostRecognised makes one.
func (r *simRun) primaryLost() (string, bool) {
	if r.level == FIFO || r.anyInView() {
		return "", false
	}
	var last uint32
	found := false
	for k := range r.views {
		if k.era == r.era && (!found || frame.SeqLess(last, k.id)) {
			last, found = k.id, true
		}
	}
	if !found {
		return "", false
	}
	members := r.views[eraView{r.era, last}]
	var held, gone, left, joining []string
	for _, m := range members {
		var p *process
		for _, q := range r.procs {
			if q.mac == m.MAC && q.inc == m.Incarnation {
				p = q
			}
		}
		name := fmt.Sprintf("%d=%x.%d", m.ID, m.MAC[5], m.Incarnation)
		switch {
		case p == nil:
			joining = append(joining, name)
		case p.left:
			left = append(left, name)
		case p.dead:
			gone = append(gone, name)
		case slices.Contains(p.views, last):
			held = append(held, name)
		default:
			joining = append(joining, name)
		}
	}
	counted := len(members) - len(left)
	if 2*len(held) > counted {
		return "", false
	}
	var waiting []string
	for _, p := range r.live() {
		waiting = append(waiting, fmt.Sprintf("%x.%d", p.mac[5], p.inc))
	}
	return fmt.Sprintf("of the %d members of view %d (%d more left it cleanly), %d installed it and did not crash %v (crashed %v, never installed it %v), no majority; every member stopped, and the processes still joining %v cannot be admitted",
		counted, last, len(left), len(held), held, gone, joining, waiting), true
}

// settled reports whether every live process is in p's view.
func (r *simRun) settled(p *process) bool {
	live := r.live()
	for _, q := range live {
		if q.view != p.view {
			return false
		}
	}
	return len(r.views[eraView{r.era, p.view}]) == len(live)
}

// anyInView reports whether a live process has a view installed.
func (r *simRun) anyInView() bool {
	for _, p := range r.live() {
		if p.view != 0 {
			return true
		}
	}
	return false
}

// live are the processes that neither crashed nor left nor were removed.
func (r *simRun) live() []*process {
	var out []*process
	for _, p := range r.procs {
		if !p.dead && !p.left && p.err == nil {
			out = append(out, p)
		}
	}
	return out
}

// done: every live process is in one view with all live processes, and
// has every other live process's marker (its last message).
func (r *simRun) done() bool {
	live := r.live()
	if len(live) == 0 {
		// Every process left or crashed: the group ended. Joiners and
		// restarts come before churnEnd.
		return !r.net.Now().Before(r.start.Add(churnEnd))
	}
	v := live[0].view
	for _, p := range live {
		if p.view == 0 || p.view != v || p.sent <= p.budget {
			return false
		}
	}
	if len(r.views[eraView{r.era, v}]) != len(live) {
		return false
	}
	for _, p := range live {
		for _, q := range live {
			if (p != q || r.level != FIFO) && p.next[key10(q.mac, q.inc)] != q.budget+1 {
				return false
			}
		}
	}
	return true
}

func (r *simRun) verdict(s scenario) error {
	if r.failed != nil {
		return r.failed
	}
	if err := r.leaversDelivered(); err != nil {
		return err
	}
	if err := r.leaversHeldNothing(s); err != nil {
		return err
	}
	if !r.done() {
		if why, lost := r.primaryLost(); lost {
			// Not a failure: under a primary component no view may
			// follow, and the processes left cannot be admitted (the
			// application decides what comes next: rbcastd rejoins). The
			// checks of what was delivered still hold.
			r.lost = why
			r.t.Logf("seed %d: the primary component was lost: %s", s.seed, why)
			return r.agreed()
		}
		var b strings.Builder
		for _, p := range r.procs {
			fmt.Fprintf(&b, "\n  process %x.%d dead=%v left=%v err=%v view=%d views=%v sent=%d/%d installed=%v stats=%+v", p.mac, p.inc, p.dead, p.left, p.err, p.view, p.views, p.sent, p.budget, p.core.Installed(), p.core.Counters())
			for _, q := range r.live() {
				if q != p {
					fmt.Fprintf(&b, " from %x.%d: %d", q.mac[5], q.inc, p.next[key10(q.mac, q.inc)])
				}
			}
			if in, ok := p.core.Inner().(*pbp.Core); ok {
				fmt.Fprintf(&b, "\n    inner view %d: %+v\n    members %+v", in.ViewID(), in.Counters(), in.MemberStates())
				fmt.Fprintf(&b, "\n    %s", p.core.DebugState())
			}
		}
		return fmt.Errorf("not finished after 20 s of virtual time:%s", b.String())
	}
	switch r.level {
	case FIFO:
		return r.virtualSynchrony()
	default:
		return r.agreed()
	}
}

// leaversDelivered: a process that left cleanly (SelfLeft) had every
// message it sent delivered by every process that went on without it: one
// that was in the view the leaver joined in, and later installed a view
// without it, and neither crashed nor was removed. (Virtual synchrony does
// not see this: the leaver's last view change may be one the others never
// install.) Under Agreed and Safe that holds for a leaver cut off from
// members too (scenario.cutLeaver): members that go on are a majority, so
// a leaver that reaches no majority stops (ErrMinority) instead. Under
// FIFO, where every component goes on, a cut splits the group, and a
// leaver's SelfLeft speaks only for the members its core still ran the
// view with: in a run with a cut, a member not in the view the leaver
// left from, or one its core removed there, is not checked
// (otherComponent).
func (r *simRun) leaversDelivered() error {
	for _, l := range r.procs {
		if !l.left || l.dead || l.err != nil {
			continue
		}
		for _, q := range r.procs {
			if q == l || q.era != l.era || q.dead || q.err != nil || !r.wentOnWithout(q, l) {
				continue
			}
			if r.level == FIFO && r.cut && r.otherComponent(l, q) {
				continue
			}
			if got := q.next[key10(l.mac, l.inc)]; got != l.sent {
				return fmt.Errorf("leave: %x.%d left cleanly after sending %d messages; %x.%d, which went on without it (views %v), delivered %d of them",
					l.mac, l.inc, l.sent, q.mac, q.inc, q.views, got)
			}
		}
	}
	return nil
}

// completeHolder finds the holders a removal names: "could not complete
// view N from view B ...: no member relayed member m's a..b (holder h)".
var completeHolder = regexp.MustCompile(`could not complete view \d+ from view (\d+) .*`)
var holderOf = regexp.MustCompile(`\(holder (\d+)\)`)

// leaversHeldNothing: a clean leave never stops another process. In a
// program whose processes only exit (no crash, no cut) nobody is removed,
// nor where one member crashed and another left (leaveAtChange), even if
// every Leave frame was lost on its way to a member (a Flush says "left");
// in the churn, a member removed because a completion could not finish
// never names as the holder of what it missed a process that left
// cleanly (a leaver's last view change is one the others complete
// without it: its Leave out, it takes part in no change of that view).
func (r *simRun) leaversHeldNothing(s scenario) error {
	for _, p := range r.procs {
		if p.err == nil || p.dead {
			continue
		}
		if s.exit {
			return fmt.Errorf("leave: %x.%d stopped in a program whose processes only leave: %v", p.mac, p.inc, p.err)
		}
		if s.leaveAtChange && s.leaveUnheard && !r.leaveHeard && errors.Is(p.err, view.ErrMinority) {
			// No member that lives received a Leave frame of the leaver
			// (the random loss took the ones the scenario left): nobody
			// can tell the leave from a crash.
			continue
		}
		if s.leaveAtChange {
			return fmt.Errorf("leave: %x.%d stopped, where one member crashed and another left: %v", p.mac, p.inc, p.err)
		}
		m := completeHolder.FindStringSubmatch(p.err.Error())
		if m == nil {
			continue
		}
		base, _ := strconv.ParseUint(m[1], 10, 32)
		for _, h := range holderOf.FindAllStringSubmatch(p.err.Error(), -1) {
			id, _ := strconv.ParseUint(h[1], 10, 16)
			for _, mi := range r.views[eraView{p.era, uint32(base)}] {
				if uint64(mi.ID) != id {
					continue
				}
				for _, l := range r.procs {
					if l.mac == mi.MAC && l.inc == mi.Incarnation && l.left && !l.dead {
						if r.level == FIFO && r.cut && r.otherComponent(l, p) {
							continue // it left from its own component (leaversDelivered)
						}
						return fmt.Errorf("leave: %x.%d stopped, %x.%d's clean leave the cause: %v", p.mac, p.inc, l.mac, l.inc, p.err)
					}
				}
			}
		}
	}
	return nil
}

// otherComponent reports whether q is not in the view l left from, or
// is a member l's core removed (failed or stalled) there: under FIFO,
// where every component goes on, l's SelfLeft does not speak for q.
func (r *simRun) otherComponent(l, q *process) bool {
	i := slices.IndexFunc(r.views[eraView{l.era, l.view}], func(m frame.MemberInfo) bool { return m.MAC == q.mac && m.Incarnation == q.inc })
	return i < 0 || slices.Contains(l.removedIn[l.view], r.views[eraView{l.era, l.view}][i].ID)
}

// wentOnWithout reports whether q installed l's first view and, after a
// view with l, one without it.
func (r *simRun) wentOnWithout(q, l *process) bool {
	if !slices.Contains(q.views, l.firstView) {
		return false
	}
	with := false
	for _, v := range q.views {
		in := slices.ContainsFunc(r.views[eraView{q.era, v}], func(m frame.MemberInfo) bool { return m.MAC == l.mac && m.Incarnation == l.inc })
		if in {
			with = true
		} else if with {
			return true
		}
	}
	return false
}

// virtualSynchrony: processes that installed view v and then the same
// next view delivered the same messages in v.
func (r *simRun) virtualSynchrony() error {
	for _, p := range r.procs {
		for i := 0; i+1 < len(p.views); i++ {
			v, next := p.views[i], p.views[i+1]
			for _, q := range r.procs {
				if q == p || q.era != p.era {
					continue // a group founded again numbers its views afresh
				}
				j := slices.Index(q.views, v)
				if j < 0 || j+1 >= len(q.views) || q.views[j+1] != next {
					continue
				}
				// FIFO delivers no member its own messages: compare the
				// others'.
				if a, b := without(p.inView[v], p, q), without(q.inView[v], p, q); !sameIDs(a, b) {
					a, b := sortedIDs(a), sortedIDs(b)
					return fmt.Errorf("virtual synchrony: %x.%d and %x.%d moved from view %d to %d together, having delivered %d and %d messages in it (first difference %s)",
						p.mac, p.inc, q.mac, q.inc, v, next, len(a), len(b), firstDiff(a, b))
				}
			}
		}
	}
	return nil
}

// agreed: processes that installed view v and then the same next view
// delivered the same messages in v, in the same order, their own
// included; under Safe, what a process delivered in a view before it
// crashed or stopped, every process that completed the view delivered at
// the same place; and every live process the same in the last view.
func (r *simRun) agreed() error {
	for _, p := range r.procs {
		for i := 0; i+1 < len(p.views); i++ {
			v, next := p.views[i], p.views[i+1]
			for _, q := range r.procs {
				if q == p || q.era != p.era {
					continue // a group founded again numbers its views afresh
				}
				j := slices.Index(q.views, v)
				if j < 0 || j+1 >= len(q.views) || q.views[j+1] != next {
					continue
				}
				if a, b := p.inView[v], q.inView[v]; !slices.Equal(a, b) {
					return fmt.Errorf("agreed order: %x.%d and %x.%d moved from view %d to %d together, having delivered %d and %d messages in it (first difference %s)",
						p.mac, p.inc, q.mac, q.inc, v, next, len(a), len(b), firstDiff(idStrings(a), idStrings(b)))
				}
			}
		}
	}
	if err := r.onePrimary(); err != nil {
		return err
	}
	if err := r.safeUniform(); err != nil {
		return err
	}
	if r.level == Safe && r.mix == 0 {
		for _, p := range r.procs {
			if !p.dead && p.err == nil {
				continue
			}
			v := p.view
			mine := p.inView[v]
			for _, q := range r.procs {
				if q == p || q.era != p.era || !completed(q, v) {
					continue
				}
				theirs := q.inView[v]
				if len(mine) > len(theirs) || !slices.Equal(mine, theirs[:len(mine)]) {
					return fmt.Errorf("safe: %x.%d delivered %d messages in view %d before it failed; %x.%d, which completed the view, delivered %d (first difference %s)",
						p.mac, p.inc, len(mine), v, q.mac, q.inc, len(theirs), firstDiff(idStrings(mine), idStrings(theirs)))
				}
			}
		}
	}
	live := r.live()
	for _, p := range live {
		if a, b := p.inView[p.view], live[0].inView[p.view]; !slices.Equal(a, b) {
			return fmt.Errorf("agreed order: %x.%d and %x.%d in the last view %d delivered %d and %d messages (first difference %s)",
				p.mac, p.inc, live[0].mac, live[0].inc, p.view, len(a), len(b), firstDiff(idStrings(a), idStrings(b)))
		}
	}
	return nil
}

// safeUniform: what Safe message a process delivered in a view before it
// crashed or stopped, every process that completed the view delivered,
// and the messages both delivered came in the same order (with a mix of
// levels an Agreed message before a Safe one may be one the others
// skip: its sender failed with it).
func (r *simRun) safeUniform() error {
	if r.mix == 0 {
		return nil
	}
	for _, p := range r.procs {
		if !p.dead && p.err == nil {
			continue
		}
		v := p.view
		mine := p.inView[v]
		for _, q := range r.procs {
			if q == p || q.era != p.era || !completed(q, v) {
				continue
			}
			theirs := q.inView[v]
			in := make(map[msgID]bool, len(theirs))
			for _, id := range theirs {
				in[id] = true
			}
			var common []msgID
			for _, id := range mine {
				if in[id] {
					common = append(common, id)
				} else if r.safeSent[id] {
					return fmt.Errorf("safe: %x.%d delivered the Safe message %x.%d:%d in view %d before it failed; %x.%d, which completed the view, did not",
						p.mac, p.inc, id.mac, id.inc, id.n, v, q.mac, q.inc)
				}
			}
			mineIn := make(map[msgID]bool, len(common))
			for _, id := range common {
				mineIn[id] = true
			}
			var ours []msgID
			for _, id := range theirs {
				if mineIn[id] {
					ours = append(ours, id)
				}
			}
			if !slices.Equal(common, ours) {
				return fmt.Errorf("safe: %x.%d and %x.%d delivered the messages both delivered in view %d in another order (first difference %s)",
					p.mac, p.inc, q.mac, q.inc, v, firstDiff(idStrings(common), idStrings(ours)))
			}
		}
	}
	return nil
}

// onePrimary: under a primary component (Agreed, Safe) the views in which
// messages are delivered form one history: of the views formed from one
// view, at most one delivers anything or leads to a view that does. (Two
// that both do are a split brain: each side delivers an order the other
// never sees. The pairwise checks do not see it, as no process moves
// through both.) A view's base is the view a process moved to it from; a
// joiner's first view counts too, formed from the view another process
// moved to it from: a joiner that delivers in a view its base never
// accepted is one side of a split brain as well.
func (r *simRun) onePrimary() error {
	baseOf := map[eraView]uint32{}
	for _, p := range r.procs {
		for i := 0; i+1 < len(p.views); i++ {
			baseOf[eraView{p.era, p.views[i+1]}] = p.views[i]
		}
	}
	// branch: for a view, the view formed from it on the way to one that
	// delivered, and the process and view that show it.
	type shown struct {
		next, delivering uint32
		p                *process
	}
	branch := map[eraView]shown{}
	for _, p := range r.procs {
		for _, v := range p.views {
			if len(p.inView[v]) == 0 {
				continue
			}
			for next, seen := v, 0; seen < len(baseOf); seen++ {
				base, ok := baseOf[eraView{p.era, next}]
				if !ok {
					break
				}
				k := eraView{p.era, base}
				if other, ok := branch[k]; ok && other.next != next {
					return fmt.Errorf("primary component: views %#x and %#x were both formed from view %#x and both delivered messages or led to views that did (%x.%d delivered %d in %#x; %x.%d delivered %d in %#x)",
						other.next, next, base, other.p.mac, other.p.inc, len(other.p.inView[other.delivering]), other.delivering, p.mac, p.inc, len(p.inView[v]), v)
				} else if ok {
					break // the path below was walked already
				}
				branch[k] = shown{next: next, delivering: v, p: p}
				next = base
			}
		}
	}
	return nil
}

// completed reports whether q went through view v to a next one, or is
// live in it at the end.
func completed(q *process, v uint32) bool {
	i := slices.Index(q.views, v)
	if i < 0 {
		return false
	}
	return i+1 < len(q.views) || !q.dead && !q.left && q.err == nil
}

func idStrings(ids []msgID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("%x.%d#%d", id.mac, id.inc, id.n)
	}
	return out
}

func without(ids []msgID, ps ...*process) []msgID {
	var out []msgID
	for _, id := range ids {
		mine := false
		for _, p := range ps {
			mine = mine || id.mac == p.mac && id.inc == p.inc
		}
		if !mine {
			out = append(out, id)
		}
	}
	return out
}

// sameIDs reports whether a and b hold the same messages, in any order;
// it sorts both. The verdicts compare messages as msgIDs and format them
// (idStrings, sortedIDs) only to report a difference: formatting every
// view's messages at every check cost the simulations much of their time.
func sameIDs(a, b []msgID) bool {
	if len(a) != len(b) {
		return false
	}
	order := func(x, y msgID) int {
		if c := bytes.Compare(x.mac[:], y.mac[:]); c != 0 {
			return c
		}
		if c := cmp.Compare(x.inc, y.inc); c != 0 {
			return c
		}
		return cmp.Compare(x.n, y.n)
	}
	slices.SortFunc(a, order)
	slices.SortFunc(b, order)
	return slices.Equal(a, b)
}

func sortedIDs(ids []msgID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("%x.%d#%08d", id.mac, id.inc, id.n)
	}
	slices.Sort(out)
	return out
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " / " + b[i]
		}
	}
	if len(a) != len(b) {
		return "one is a prefix of the other"
	}
	return "none"
}

// Level is the delivery level a simulation runs.
type Level int

const (
	// FIFO: the membership core alone (reliable/view), checked for
	// virtual synchrony.
	FIFO Level = iota
	// Agreed: vtotal over the membership core, checked for one order.
	Agreed
	// Safe: vtotal's Safe level, checked for uniformity too.
	Safe
	// Ordered draws Agreed or Safe per seed.
	Ordered
)

func (l Level) String() string {
	return [...]string{"fifo", "agreed", "safe", "ordered"}[l]
}

// Seeds runs the churn simulation at level for $RBCAST_SEEDS seeds (1000
// by default, 100 with -short), each a parallel subtest; a failure names
// the seed, its scenario and the command that re-runs it (pkg is the
// calling test's package path, test its name).
func Seeds(t *testing.T, level Level, pkg, test string) {
	runSeeds(t, seedCount(t), pkg, test, func(seed uint64) scenario { return newScenario(seed, level) })
}

// HoldSeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with -short) of
// the churn simulation's FIFO scenarios with holds (scenario.holds):
// every process holds one member now and then, as dsm's wait condition
// does, across the scenario's joins, crashes, restarts and leaves.
func HoldSeeds(t *testing.T, pkg, test string) {
	runSeeds(t, seeds.Count(t, 300, 50), pkg, test, func(seed uint64) scenario {
		s := newScenario(seed, FIFO)
		s.holds = true
		return s
	})
}

// runSeeds runs the scenarios of seeds 1 to n, each a parallel subtest
// checked by the churn simulation's checkers; a failure names the seed,
// its scenario and the command that re-runs it.
func runSeeds(t *testing.T, n int, pkg, test string, scenarioOf func(seed uint64) scenario) {
	runSeedsTally(t, n, pkg, test, scenarioOf, new(relayTally))
}

// tally sums what the runs of a seed loop did, for its log.
type tally interface {
	add(r *simRun)
	String() string
}

// runSeedsTally is runSeeds summing the runs into tally, logged at the end.
func runSeedsTally(t *testing.T, n int, pkg, test string, scenarioOf func(seed uint64) scenario, tally tally) {
	t.Cleanup(func() { t.Log(tally.String()) })
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := scenarioOf(seed)
			r := runScenario(t, s)
			tally.add(r)
			if err := r.verdict(s); err != nil {
				t.Fatalf("%v\nscenario: %v\nre-run: RBCAST_SEEDS=%d go test ./%s -run '^%s$/^seed=%d$' -v", err, s, seed, pkg, test, seed)
			}
		})
	}
}

// LossySeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with -short)
// of the churn simulation's scenarios (newScenario's draws) at heavy
// loss: 15, 20 or 30 % of the frames every process receives. The view
// changes' relays (a departing sender's last frames that only some
// survivors hold) are rare at light loss.
func LossySeeds(t *testing.T, level Level, pkg, test string) {
	runSeeds(t, seeds.Count(t, 300, 50), pkg, test, func(seed uint64) scenario { return lossyScenario(seed, level) })
}

// LossySeed runs seed of LossySeeds alone.
func LossySeed(t *testing.T, level Level, seed uint64) {
	runOne(t, lossyScenario(seed, level), "")
}

func lossyScenario(seed uint64, level Level) scenario {
	s := newScenario(seed, level)
	s.loss = []float64{0.15, 0.2, 0.3}[seed%3]
	return s
}

// relayTally sums the view changes' relays over the seeds of a run:
// the views installed (per process), the frames relayed and the relayed
// frames received that their receiver did not need (view.Stats).
type relayTally struct{ views, relayed, unused, skipped atomic.Uint64 }

func (t *relayTally) add(r *simRun) {
	for _, p := range r.procs {
		st := p.core.Counters()
		t.views.Add(st.Views)
		t.relayed.Add(st.Relayed)
		t.unused.Add(st.RelaysUnused)
		t.skipped.Add(st.RelaysSkipped)
	}
}

func (t *relayTally) String() string {
	return fmt.Sprintf("relays: %d frames relayed, %d received unneeded, %d not relayed again so soon, over %d views installed (summed over the processes)",
		t.relayed.Load(), t.unused.Load(), t.skipped.Load(), t.views.Load())
}

// ExitSeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with -short) of
// a program whose processes all exit: two to four founders stream
// messages at 5 % loss and each leaves, a few milliseconds apart from the
// others, at a time drawn per seed. The checkers are the churn
// simulation's (leaversDelivered among them).
func ExitSeeds(t *testing.T, level Level, pkg, test string) {
	runSeeds(t, seeds.Count(t, 300, 50), pkg, test, func(seed uint64) scenario { return exitScenario(seed, level, exitJitter) })
}

// exitJitter is how far apart ExitSeeds' processes leave: each at the
// seed's exit time plus up to this much, drawn per process.
const exitJitter = 4 * time.Millisecond

// ExitAtOnceSeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with
// -short) of ExitSeeds' program with every process leaving at the same
// instant (no jitter): the Leaves of all cross, and a member may lose
// every Leave frame of the coordinator it waits for (seed 19325).
func ExitAtOnceSeeds(t *testing.T, level Level, pkg, test string) {
	runSeeds(t, seeds.Count(t, 300, 50), pkg, test, func(seed uint64) scenario { return exitScenario(seed, level, 0) })
}

// ExitAtOnceSeed runs one seed of ExitAtOnceSeeds, whatever RBCAST_SEEDS
// says.
func ExitAtOnceSeed(t *testing.T, level Level, seed uint64) {
	runOne(t, exitScenario(seed, level, 0), "")
}

// LeaveAtChangeSeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with
// -short) of issue 19's leaver mid-change: of four or five founders
// streaming at 5 or 10 % loss, one crashes and another leaves about when
// the others' cores fail the crashed one, so that its Leave crosses the
// change's Prepare. Besides the churn simulation's checkers, nobody else
// may stop (four or five keep a majority with one crashed and one left).
func LeaveAtChangeSeeds(t *testing.T, level Level, pkg, test string) {
	n := seeds.Count(t, 300, 50)
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			LeaveAtChangeSeed(t, level, seed, fmt.Sprintf("re-run: RBCAST_SEEDS=%d go test ./%s -run '^%s$/^seed=%d$' -v", seed, pkg, test, seed))
		})
	}
}

// LeaveAtChangeSeed runs one seed of LeaveAtChangeSeeds; rerun (if any)
// says how to run it again.
func LeaveAtChangeSeed(t *testing.T, level Level, seed uint64, rerun string) {
	runOne(t, leaveAtChangeScenario(seed, level), rerun)
}

func leaveAtChangeScenario(seed uint64, level Level) scenario {
	r := rand.New(rand.NewPCG(seed, 0x1eaf))
	s := scenario{seed: seed, founders: 4 + r.IntN(2), msgs: uint32(20 + r.IntN(60)), loss: []float64{0.05, 0.1}[r.IntN(2)], leaveAtChange: true, level: level}
	if r.IntN(2) == 0 {
		s.batch = time.Duration(1+r.IntN(4)) * time.Millisecond
	}
	s.crashAt = time.Duration(250+r.IntN(300)) * time.Millisecond
	s.leaveAfter = 400*time.Millisecond + time.Duration(r.IntN(8000)-4000)*time.Microsecond
	s.level = drawOrdered(r, level)
	return s
}

// LeaveAtCrashSeeds runs $RBCAST_SEEDS seeds (300 by default, 50 with
// -short) of issue 19's leave that meets a crash: as LeaveAtChangeSeeds,
// but the leave comes within 4 ms of the crash, and every Leave frame of
// the leaver is lost on its way to the member that coordinates the
// change or, in half the seeds, to another member. Nobody else may stop:
// a Flush tells the coordinator the leaver left, and it asks for the
// Flushes before it judges its majority; the coordinator's own Flush
// tells the other member, which waits for it, or for the commit, before
// it stops.
func LeaveAtCrashSeeds(t *testing.T, level Level, pkg, test string) {
	n := seeds.Count(t, 300, 50)
	for seed := uint64(1); seed <= uint64(n); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := leaveAtCrashScenario(seed, level)
			r := runScenario(t, s)
			if err := r.verdict(s); err != nil {
				t.Fatalf("%v\nscenario: %v\nre-run: RBCAST_SEEDS=%d go test ./%s -run '^%s$/^seed=%d$' -v", err, s, seed, pkg, test, seed)
			}
		})
	}
}

func leaveAtCrashScenario(seed uint64, level Level) scenario {
	r := rand.New(rand.NewPCG(seed, 0xc7a5))
	s := scenario{seed: seed, founders: 4 + r.IntN(2), msgs: uint32(20 + r.IntN(60)), loss: []float64{0.05, 0.1}[r.IntN(2)], leaveAtChange: true, leaveUnheard: true, level: level}
	if r.IntN(2) == 0 {
		s.batch = time.Duration(1+r.IntN(4)) * time.Millisecond
	}
	s.crashAt = time.Duration(250+r.IntN(300)) * time.Millisecond
	s.leaveAfter = time.Duration(r.IntN(4000)) * time.Microsecond
	s.level = drawOrdered(r, level)
	s.unheardAtMember = r.IntN(2) == 0 // drawn last: the draws above keep their seeds
	return s
}

// LeaverCutSeeds runs $RBCAST_SEEDS seeds (200 by default, 50 with
// -short) of a leaver cut off at its Leave: of three to five founders
// (and up to one joiner) streaming at up to 5 % loss, one (or two, a few
// milliseconds apart) sends its budget at a time drawn per seed and
// leaves in the turn of its last message; in three seeds of four the
// first is cut off, every frame both ways, from all the other members or
// some of them, in the turn of its Leave or a few messages before, for
// good or for a while. The checkers are the churn simulation's:
// leaversDelivered says that a leaver reporting SelfLeft had its messages
// delivered by every member that went on (under FIFO, in its component).
// The log sums the cut leavers' outcomes.
func LeaverCutSeeds(t *testing.T, level Level, pkg, test string) {
	runSeedsTally(t, seeds.Count(t, 200, 50), pkg, test, func(seed uint64) scenario { return leaverCutScenario(seed, level) }, new(cutTally))
}

// LeaverCutSeed runs one seed of LeaverCutSeeds, whatever RBCAST_SEEDS
// says.
func LeaverCutSeed(t *testing.T, level Level, seed uint64) {
	runOne(t, leaverCutScenario(seed, level), "")
}

func leaverCutScenario(seed uint64, level Level) scenario {
	r := rand.New(rand.NewPCG(seed, 0x1c07))
	s := scenario{seed: seed, founders: 3 + r.IntN(3), joiners: r.IntN(2), msgs: uint32(10 + r.IntN(50)), loss: []float64{0, 0.01, 0.05}[r.IntN(3)], level: level}
	if r.IntN(3) == 0 {
		s.dup, s.reorder = 0.02, 0.02
	}
	if r.IntN(3) == 0 {
		s.batch = time.Duration(1+r.IntN(4)) * time.Millisecond
	}
	s.leavers = 1 + r.IntN(2)
	s.leaveAt = time.Duration(200+r.IntN(400)) * time.Millisecond
	s.leaveGap = time.Duration(r.IntN(10000)-5000) * time.Microsecond
	s.cutLeaver = r.IntN(4) != 0
	s.cutLeft = []int{0, 0, 1, 3}[r.IntN(4)]
	if r.IntN(2) == 0 {
		s.cutCount = 1 + r.IntN(s.founders-1) // some of the others (all, when it draws as many)
	}
	if r.IntN(2) == 0 {
		s.cutSpan = time.Duration(100+r.IntN(700)) * time.Millisecond
	}
	s.level = drawOrdered(r, level)
	if s.level != FIFO {
		s.mix = drawMix(seed)
	}
	return s
}

// cutTally sums LeaverCutSeeds' outcomes for the cut leavers: left
// cleanly, stopped (and how), and the seeds where a member that went on
// lacked some of a cut leaver's messages (the case the judgment is for).
type cutTally struct{ cut, left, minority, other, lacked atomic.Uint64 }

func (t *cutTally) add(r *simRun) {
	for _, l := range r.procs {
		if l.cutFrom == nil {
			continue
		}
		t.cut.Add(1)
		switch {
		case l.left:
			t.left.Add(1)
		case errors.Is(l.err, view.ErrMinority):
			t.minority.Add(1)
		default:
			t.other.Add(1)
		}
		for _, q := range r.procs {
			if q != l && q.era == l.era && !q.dead && q.err == nil && r.wentOnWithout(q, l) && q.next[key10(l.mac, l.inc)] != l.sent {
				t.lacked.Add(1)
				break
			}
		}
	}
}

func (t *cutTally) String() string {
	return fmt.Sprintf("cut leavers: %d; %d left cleanly, %d stopped with ErrMinority, %d otherwise; in %d a member that went on lacked some of its messages",
		t.cut.Load(), t.left.Load(), t.minority.Load(), t.other.Load(), t.lacked.Load())
}

// ExitSeed runs one seed of ExitSeeds, whatever RBCAST_SEEDS says.
func ExitSeed(t *testing.T, level Level, seed uint64) {
	runOne(t, exitScenario(seed, level, exitJitter), "")
}

func exitScenario(seed uint64, level Level, jitter time.Duration) scenario {
	r := rand.New(rand.NewPCG(seed, 0xe417))
	s := scenario{seed: seed, founders: 2 + r.IntN(3), msgs: uint32(5 + r.IntN(40)), loss: 0.05, exit: true, exitJitter: jitter, level: level}
	s.exitAt = time.Duration(220+r.IntN(200)) * time.Millisecond
	s.level = drawOrdered(r, level)
	return s
}

// Seed runs one seed of the simulation at level, whatever RBCAST_SEEDS
// says: a regression seed found beyond the default count.
func Seed(t *testing.T, level Level, seed uint64) {
	runOne(t, newScenario(seed, level), "")
}

// runOne runs scenario s alone and fails t with its verdict, the
// scenario and rerun (how to run it again; may be empty).
func runOne(t *testing.T, s scenario, rerun string) {
	t.Helper()
	if err := runScenario(t, s).verdict(s); err != nil {
		t.Fatalf("%v\nscenario: %v\n%s", err, s, rerun)
	}
}

func seedCount(t *testing.T) int { return seeds.Count(t, 1000, 100) }

// drawOrdered is level, or for Ordered one of Agreed and Safe drawn from
// r (one draw, so that the draws after it keep their seeds).
func drawOrdered(r *rand.Rand, level Level) Level {
	if level != Ordered {
		return level
	}
	if r.IntN(2) == 0 {
		return Safe
	}
	return Agreed
}
