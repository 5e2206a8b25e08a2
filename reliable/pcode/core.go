package pcode

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// held is a message kept at a receiver: in a ready slot or in the early
// buffer (§5.4). A message not targeted here keeps no data: it only
// moves the personal counter when its turn comes.
type held struct {
	count   uint32
	step    uint64
	global  uint32
	target  bool
	retx    bool
	targets []byte
	data    []byte
}

// sent is a message kept by its sender until every member has it (P1's
// buffer of sent messages, §4).
type sent struct {
	count   uint32
	step    uint64
	global  uint32
	targets []byte
	data    []byte
}

type earlyKey struct {
	from   frame.MemberID
	stream frame.PcodeStream
	count  uint32
}

// stream is what a member keeps of one of another member's two streams
// to it: the broadcast stream (pcv, fig. 3) or its point-to-point one
// (§5.6).
type stream struct {
	last  uint32 // highest consecutive count accepted (pcv[q] for the broadcast stream)
	ready *held  // the ready slot (fig. 2)
	want  int    // requests pending for this stream
	top   uint32 // highest count known sent (§5.3)
	// gap: a count in (last, top] is neither here nor in the early
	// buffer, and a resend would find room (see Core.updateGap).
	gap bool
	// The NACK timer of this stream (§5.7): when the next NACK is due
	// (0: none needed), how many were sent for the present need, and
	// when the first was.
	nackAt    Time
	tries     int
	firstNack Time
}

// needs reports whether the stream waits for a message from its
// sender: a request finds its slot empty, or a gap is open.
func (s *stream) needs() bool { return s.requestNeed() || s.gap }

func (s *stream) requestNeed() bool { return s.want > 0 && s.ready == nil }

// peer is another member.
type peer struct {
	id        frame.MemberID
	mac       [6]byte
	inc       uint32
	left      bool
	lastHeard Time
	in        [2]stream // its streams to us, by frame.PcodeStream
	gcv       uint32    // §5.2: the last GlobalCounter seen from it
	acked     uint32    // its pcv[self]: our broadcast messages it has
	// Our point-to-point stream to it: the last count sent, the last it
	// reported, and what it has not reported.
	pointSent, pointAcked uint32
	pointHist             []sent
	answered              Time // when a nack of its was last answered with a Status
}

// request is a pending request (fig. 2: "denote there is a pending
// request").
type request struct {
	from    frame.MemberID
	stream  frame.PcodeStream
	step    uint64
	targets []byte
}

// Core is a PCODE member: a deterministic state machine on the one core
// contract (reliable/core). Program calls arrive as ops through Propose.
type Core struct {
	cfg   settings
	hdr   frame.Header
	peers []peer
	index map[frame.MemberID]int

	started bool
	now     Time

	pc     uint32 // our PersonalCount (fig. 4)
	gc     uint32 // GlobalCounter (§5.1)
	hist   []sent // P1's buffer of sent broadcast-stream messages
	points int    // messages in every peer's pointHist
	// §5.1: original counters received above a gap, and the highest
	// progress (non-original counter) seen: both reveal a global gap.
	pending    []uint32
	progress   uint32
	globalAt   Time
	globalTry  int
	lastStatus uint32 // gc at our last Status (§5.5)

	ops   [][]byte // proposed, not yet executed (Propose never sends)
	reqs  []request
	early map[earlyKey]*held
	free  []*held

	srtt, rttvar Duration
	probeToken   uint32
	probeAt      Time // next probe allowed
	probeTries   int  // probes sent while one was due: the interval doubles
	probeSent    Time // when the outstanding probe went out (0: sampled)
	ackProgress  Time // when acks of ours last moved

	leaving, left, halted bool
	lingerUntil           Time                 // after our Leave or abort: until then, answer with it again
	abort                 frame.PcodeAbortBody // why the program stopped (sent or received)
	step                  uint64               // the last step executed, for aborts

	frames      [][]byte
	bufs        [][]byte
	used        int
	deliveries  []core.Delivery
	delivered   []*held
	events      []core.Event
	stats       Stats
	scratchAcks []uint32
}

// Stats are PCODE's own counters (core.Stats.Detail).
type Stats struct {
	Multicasts, Requests, Delivered               uint64
	DataSent, Resent, Duplicates, Early, Dropped  uint64
	NacksSent                                     [4]uint64 // by frame.NackKind
	NacksReceived, StatusSent, Probes, RTTSamples uint64
	// FlowBlocked and BufferFull count multicasts refused (ErrWindowFull)
	// for the flow window (§5.2) or a full buffer of sent messages (§4).
	FlowBlocked, BufferFull, BadFrames, Mismatches uint64
	SRTT, RTTVar                                   Duration
	GlobalCounter                                  uint32
	SendBuffer, EarlyBuffer                        int
}

var _ core.Core = (*Core)(nil)

// New returns the core of member cfg.Self.
func New(cfg Config) (*Core, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Core{cfg: s, index: map[frame.MemberID]int{}, early: map[earlyKey]*held{},
		srtt: s.InitialRTT, rttvar: s.InitialRTT / 2}
	c.hdr = frame.Header{Group: s.Group, Sender: s.Self, Incarnation: s.selfInc, AckBase: s.ackBase, Acks: make([]uint32, s.span)}
	for _, m := range s.Members {
		if m.ID == s.Self {
			continue
		}
		c.index[m.ID] = len(c.peers)
		c.peers = append(c.peers, peer{id: m.ID, mac: m.MAC, inc: m.Incarnation})
	}
	return c, nil
}

func (c *Core) peer(id frame.MemberID) *peer {
	if i, ok := c.index[id]; ok {
		return &c.peers[i]
	}
	return nil
}

func (c *Core) start(now Time) {
	c.now = now
	if c.started {
		return
	}
	c.started = true
	c.ackProgress = now
	for i := range c.peers {
		c.peers[i].lastHeard = now
	}
}

// Info reports what does not change.
func (c *Core) Info() core.Info {
	return core.Info{Self: c.cfg.Self, MaxMessage: c.MaxOp(),
		Delivers: func(t frame.Type) bool { return t == frame.PcodeData },
		InFlight: "multicasts not yet held by every member"}
}

// MaxOp is the largest op Propose accepts: a multicast of MaxMessage
// bytes to a full target set.
func (c *Core) MaxOp() int { return OpHeadLen + c.cfg.bitmap + c.cfg.maxPayload }

// MaxMessage is the largest message a multicast carries.
func (c *Core) MaxMessage() int { return c.cfg.maxPayload }

// ErrBadCall is wrapped by Propose's refusal of a call that no correct
// program makes (A1's syntax: a target set naming the caller or a
// stranger, a request from the caller itself).
var ErrBadCall = errors.New("pcode: call breaks the program's rules")

func badCall(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadCall}, args...)...)
}

// checkTargets checks a target set: members only, at least one.
func (c *Core) checkTargets(ts frame.Targets) error {
	n := 0
	for i, b := range ts {
		for bit := range 8 {
			if b&(1<<bit) == 0 {
				continue
			}
			id := frame.MemberID(8*i + bit)
			if id != c.cfg.Self && c.peer(id) == nil {
				return badCall("target %d is not a member", id)
			}
			n++
		}
	}
	if n == 0 {
		return badCall("empty target set")
	}
	return nil
}

// Propose queues one program call (an op, AppendOp). A multicast is
// refused with core.ErrWindowFull while Blocked.
func (c *Core) Propose(now Time, b []byte) error {
	switch {
	case c.halted:
		return core.ErrHalted
	case c.leaving:
		return core.ErrLeaving
	}
	if len(b) > c.MaxOp() {
		return &core.TooLargeError{Size: len(b), Max: c.MaxOp()}
	}
	op, err := ParseOp(b)
	if err != nil {
		return err
	}
	if err := c.checkTargets(op.Targets); err != nil {
		return err
	}
	switch op.Kind {
	case OpMulticast:
		if op.Targets.Has(c.cfg.Self) {
			return badCall("multicast at step %d names its sender %d among its targets", op.Step, c.cfg.Self)
		}
		if len(op.Data) > c.cfg.maxPayload {
			return &core.TooLargeError{Size: len(op.Data), Max: c.cfg.maxPayload}
		}
		if len(c.hist)+c.points+c.queuedMulticasts() >= c.cfg.SendBuffer {
			c.stats.BufferFull++
			return core.ErrWindowFull
		}
		if c.flowBlocked() {
			c.stats.FlowBlocked++
			return core.ErrWindowFull
		}
	case OpRequest:
		if op.Peer == c.cfg.Self || c.peer(op.Peer) == nil {
			return badCall("request at step %d from %d: not another member", op.Step, op.Peer)
		}
		if !op.Targets.Has(c.cfg.Self) || op.Targets.Has(op.Peer) {
			return badCall("request at step %d from %d: the target set must hold the requester %d and not the source", op.Step, op.Peer, c.cfg.Self)
		}
	}
	c.ops = append(c.ops, slices.Clone(b))
	if op.Kind == OpMulticast {
		c.stats.Multicasts++
	} else {
		c.stats.Requests++
	}
	return nil
}

// opRunnable reports whether the first queued call can run now.
func (c *Core) opRunnable() bool {
	if len(c.ops) == 0 {
		return false
	}
	if OpKind(c.ops[0][0]) == OpRequest {
		return true
	}
	return len(c.hist)+c.points < c.cfg.SendBuffer && !c.flowBlocked()
}

// queuedMulticasts counts the multicasts proposed and not yet sent.
func (c *Core) queuedMulticasts() int {
	n := 0
	for _, b := range c.ops {
		if OpKind(b[0]) == OpMulticast {
			n++
		}
	}
	return n
}

// Blocked reports whether a multicast would wait: P1's buffer is full
// (§4), or the GlobalCounter runs FLOW_WINDOW ahead (§5.2).
func (c *Core) Blocked() bool {
	return len(c.hist)+c.points+c.queuedMulticasts() >= c.cfg.SendBuffer || c.flowBlocked()
}

// flowBlocked: max(gcv) - min(gcv) > FLOW_WINDOW (§5.2), our own
// GlobalCounter being the max.
func (c *Core) flowBlocked() bool {
	for i := range c.peers {
		p := &c.peers[i]
		if !p.left && frame.SeqDiff(c.gc, p.gcv) > int32(c.cfg.FlowWindow) {
			return true
		}
	}
	return false
}

// Leave finishes: once every multicast is held by every member, the
// member announces its departure (frame.Leave) and is done.
func (c *Core) Leave(now Time) {
	c.start(now)
	if c.halted || c.left {
		return
	}
	c.leaving = true
	c.progressAll()
}

// Tick runs the timers due at now.
func (c *Core) Tick(now Time) {
	c.start(now)
	if c.halted || c.left {
		return
	}
	c.progressAll()
}

// Step handles one received frame.
func (c *Core) Step(now Time, src, dst [6]byte, v frame.View) error {
	c.start(now)
	if c.halted {
		return c.answerHalted(now, src, v)
	}
	if c.left {
		return core.ErrHalted
	}
	q := v.Sender()
	if q == c.cfg.Self {
		return errors.New("pcode: a frame with our own id")
	}
	p := c.peer(q)
	switch {
	case p == nil:
		c.stats.BadFrames++
		return fmt.Errorf("pcode: frame from %d, not a member", q)
	case v.Incarnation() != p.inc:
		c.stats.BadFrames++
		return fmt.Errorf("pcode: frame from %d of incarnation %d, want %d", q, v.Incarnation(), p.inc)
	case src != p.mac:
		c.stats.BadFrames++
		return fmt.Errorf("pcode: frame from %d with source MAC %x, want %x", q, src, p.mac)
	}
	switch v.Type() {
	case frame.PcodeData, frame.PcodeNack, frame.PcodeStatus, frame.PcodeAbort, frame.Leave:
	default:
		c.stats.BadFrames++
		return fmt.Errorf("pcode: %v frame from %d: not a PCODE frame", v.Type(), q)
	}
	p.lastHeard = now
	if c.lingerUntil != 0 {
		if v.Type() != frame.Leave && v.Type() != frame.PcodeAbort && (p.answered == 0 || now.Sub(p.answered) >= c.halfRTT()) {
			p.answered = now
			c.sendLeave(p.mac)
			c.lingerUntil = max(c.lingerUntil, now.Add(lingerQuiet*c.cfg.MaxTimer))
		}
		c.progressAll()
		return nil
	}
	if a, ok := v.AckFor(c.cfg.Self); ok && frame.SeqLess(p.acked, a) && !frame.SeqLess(c.pc, a) {
		p.acked = a
		c.ackProgress = now
		c.trim()
	}
	switch v.Type() {
	case frame.PcodeData:
		c.handleData(p, v)
	case frame.PcodeNack:
		c.handleNack(p, v)
	case frame.PcodeStatus:
		c.handleStatus(p, v)
	case frame.PcodeAbort:
		a := v.PcodeAbort()
		a.Text = slices.Clone(a.Text)
		c.abort = a
		c.halt(0, 0, fmt.Sprintf("member %d stopped the program at its step %d (%v): %s", q, a.Step, a.Reason, a.Text))
		return nil
	case frame.Leave:
		if !p.left {
			p.left = true
			c.trim()
			c.points -= len(p.pointHist)
			p.pointHist = nil
			c.events = append(c.events, core.Event{Kind: core.MemberLeft, Member: q, At: now, Delivered: p.in[0].last + 1})
		}
	}
	c.progressAll()
	return nil
}

// handleData is fig. 3's REGULAR case with §5.1's GlobalCounter and
// §5.4's early buffer.
func (c *Core) handleData(p *peer, v frame.View) {
	d := v.PcodeData()
	if frame.SeqLess(p.gcv, d.Global) {
		p.gcv = d.Global
	}
	// The GlobalCounter counts what reached us (§5.1): an original counter
	// moves it when received, in order or not, kept or not. Moving it only
	// when the message is taken would tie it to the ready slots, and so to
	// the program's requests: a member whose slot waits for a request that
	// waits for a flow-blocked sender would never catch up (§5.2).
	if d.Stream == frame.StreamPoint {
		c.noteProgress(d.Global)
	} else {
		c.noteOriginal(d.Global)
	}
	if d.Stream == frame.StreamPoint && !d.Targets.Has(c.cfg.Self) {
		c.stats.BadFrames++
		return
	}
	s := &p.in[d.Stream]
	count := v.Seq()
	if !frame.SeqLess(s.last, count) {
		c.stats.Duplicates++
		return
	}
	target := d.Targets.Has(c.cfg.Self)
	if frame.SeqLess(s.top, count) {
		s.top = count
	}
	if count == s.last+1 && (!target || s.ready == nil) {
		c.accept(p, d.Stream, c.hold(v.Seq(), d, target, v.Retransmission()))
		return
	}
	k := earlyKey{p.id, d.Stream, count}
	if c.cfg.EarlyBuffer == NoEarlyBuffer || len(c.early) >= c.cfg.EarlyBuffer || c.early[k] != nil {
		c.stats.Dropped++
		return
	}
	c.stats.Early++
	c.early[k] = c.hold(count, d, target, v.Retransmission())
}

// hold copies a received message into a pooled buffer.
func (c *Core) hold(count uint32, d frame.PcodeDataBody, target, retx bool) *held {
	var h *held
	if n := len(c.free); n > 0 {
		h, c.free = c.free[n-1], c.free[:n-1]
	} else {
		h = &held{}
	}
	h.count, h.step, h.global, h.target, h.retx = count, d.Step, d.Global, target, retx
	h.targets = append(h.targets[:0], d.Targets...)
	h.data = h.data[:0]
	if target {
		h.data = append(h.data, d.Data...)
	}
	return h
}

// accept takes the next message of p's stream st: the counter moves
// (fig. 3: pcv[q] = m.PersonalCount), and
// a message targeted here fills the ready slot; then the early buffer is
// searched for the next one (§5.4).
func (c *Core) accept(p *peer, st frame.PcodeStream, h *held) {
	s := &p.in[st]
	for {
		s.last = h.count
		if h.target {
			s.ready = h
		} else {
			c.free = append(c.free, h)
		}
		k := earlyKey{p.id, st, s.last + 1}
		next := c.early[k]
		if next == nil || next.target && s.ready != nil {
			return
		}
		delete(c.early, k)
		h = next
	}
}

// noteOriginal moves the GlobalCounter with an original counter g
// (§5.1): at once when it is the next, else it waits in pending.
func (c *Core) noteOriginal(g uint32) {
	switch {
	case !frame.SeqLess(c.gc, g):
	case g == c.gc+1:
		c.gc = g
		c.drain()
	default:
		i, found := slices.BinarySearchFunc(c.pending, g, func(a, b uint32) int { return int(frame.SeqDiff(a, b)) })
		if !found && len(c.pending) < 4*MaxBuffer {
			c.pending = slices.Insert(c.pending, i, g)
		}
	}
}

// drain moves the GlobalCounter over the originals that waited for it
// (§5.1: "whenever the GlobalCounter is updated we check this list").
func (c *Core) drain() {
	for len(c.pending) > 0 && !frame.SeqLess(c.gc+1, c.pending[0]) {
		if c.pending[0] == c.gc+1 {
			c.gc++
		}
		c.pending = c.pending[1:]
	}
}

// noteProgress records a non-original counter (PROGRESS, §5.2): it may
// not move the GlobalCounter, but one above it reveals a global gap.
func (c *Core) noteProgress(g uint32) {
	if frame.SeqLess(c.progress, g) {
		c.progress = g
	}
}

// globalGap reports whether the GlobalCounter has a gap (§5.3).
func (c *Core) globalGap() bool {
	return len(c.pending) > 0 || frame.SeqLess(c.gc, c.progress)
}

// handleNack resends (fig. 3's NACK case): what follows the nacker's
// LastRcvd, to the nacker. A global NACK names no sender: each member
// resends what follows the nacker's pcv of it (its ack vector). A nack
// finding nothing to resend is answered with a Status, so that the
// nacker knows this member lives and what it sent.
func (c *Core) handleNack(p *peer, v frame.View) {
	n := v.PcodeNack()
	c.stats.NacksReceived++
	if n.Kind != frame.NackGlobal && n.Target != c.cfg.Self {
		return
	}
	resent := 0
	switch {
	case n.Stream == frame.StreamPoint:
		for _, m := range p.pointHist {
			if frame.SeqLess(n.Last, m.count) {
				c.sendData(p.mac, m.count, frame.StreamPoint, m, frame.FlagRetransmit)
				resent++
			}
		}
	default:
		last := n.Last
		if n.Kind == frame.NackGlobal {
			a, ok := v.AckFor(c.cfg.Self)
			if !ok {
				return
			}
			last = a
		}
		for _, m := range c.hist {
			if frame.SeqLess(last, m.count) {
				c.sendData(p.mac, m.count, frame.StreamBroadcast, m, frame.FlagRetransmit)
				resent++
			}
		}
	}
	c.stats.Resent += uint64(resent)
	if resent == 0 && n.Kind == frame.NackRequest && n.Step != 0 && c.step > n.Step {
		// The nacker holds all we sent it on this stream, and our program
		// is past the request's step (strictly: a step's calls may run
		// as several ops, and a multicast of the step may still wait for
		// room behind a request of the same step): no message of ours
		// will ever match it. A1 is broken; waiting would hang the nacker forever, since
		// we answer its NACKs and so never look failed.
		sent := c.pc
		if n.Stream == frame.StreamPoint {
			sent = p.pointSent
		}
		if !frame.SeqLess(n.Last, sent) {
			c.stats.Mismatches++
			c.halt(frame.AbortMismatch, p.id, fmt.Sprintf("A1 violated: member %d requests from member %d at step %d on the %v stream, but this member's program is at step %d and sent it nothing more there",
				p.id, c.cfg.Self, n.Step, n.Stream, c.step))
			return
		}
	}
	if resent == 0 && n.Kind != frame.NackGlobal && (p.answered == 0 || c.now.Sub(p.answered) >= c.halfRTT()) {
		p.answered = c.now
		c.sendStatus(p.mac, 0, 0)
	}
}

// handleStatus takes P1's STATUS and §5.2's PROGRESS.
func (c *Core) handleStatus(p *peer, v frame.View) {
	g := v.PcodeStatusGlobal()
	if frame.SeqLess(p.gcv, g) {
		p.gcv = g
	}
	c.noteProgress(g)
	if s := &p.in[frame.StreamBroadcast]; frame.SeqLess(s.top, v.Seq()) {
		s.top = v.Seq()
	}
	pl := v.PcodeStatusPoint()
	if i := int(c.cfg.Self) - int(pl.Base()); i >= 0 && i < pl.Len() {
		c.pointAck(p, pl.At(i))
	}
	echo := v.PcodeStatusEcho()
	switch {
	case v.Flags()&frame.FlagAckRequest != 0:
		c.sendStatus(p.mac, 0, echo)
	case echo != 0 && echo == c.probeToken && c.probeSent != 0:
		c.sample(c.now.Sub(c.probeSent))
		c.probeSent = 0
	}
}

func (c *Core) pointAck(p *peer, a uint32) {
	if !frame.SeqLess(p.pointAcked, a) || frame.SeqLess(p.pointSent, a) {
		return
	}
	p.pointAcked = a
	c.ackProgress = c.now
	n := 0
	for n < len(p.pointHist) && !frame.SeqLess(a, p.pointHist[n].count) {
		n++
	}
	c.points -= n
	p.pointHist = p.pointHist[n:]
}

// trim drops from P1's buffer what every member reported.
func (c *Core) trim() {
	low := c.pc
	for i := range c.peers {
		if p := &c.peers[i]; !p.left && frame.SeqLess(p.acked, low) {
			low = p.acked
		}
	}
	n := 0
	for n < len(c.hist) && !frame.SeqLess(low, c.hist[n].count) {
		n++
	}
	if n > 0 {
		c.hist = slices.Delete(c.hist, 0, n)
	}
}

// sample folds a round-trip measurement into srtt and rttvar (RFC 6298).
func (c *Core) sample(d Duration) {
	if d <= 0 {
		return
	}
	c.stats.RTTSamples++
	diff := c.srtt - d
	if diff < 0 {
		diff = -diff
	}
	c.rttvar = (3*c.rttvar + diff) / 4
	c.srtt = (7*c.srtt + d) / 8
}

func (c *Core) clamp(d Duration) Duration { return min(max(d, c.cfg.MinTimer), c.cfg.MaxTimer) }

// halfRTT is the first wait of a NACK (§5.7): a request or a gap waits
// this long for a message that may be in transit.
func (c *Core) halfRTT() Duration { return c.clamp(c.srtt / 2) }

// interval is the repeat of a NACK after tries unanswered ones.
func (c *Core) interval(tries int) Duration {
	return c.clamp((c.srtt + 4*c.rttvar) << min(tries, 3))
}

// progressAll runs the program's queued calls, delivers, and runs the
// timers: the main loop of fig. 2.
func (c *Core) progressAll() {
	c.runOps()
	if c.halted {
		return
	}
	c.deliver()
	if c.halted {
		return
	}
	c.timers()
}

// runOps executes queued calls in program order (A2).
func (c *Core) runOps() {
	for len(c.ops) > 0 && !c.halted {
		b := c.ops[0]
		op, _ := ParseOp(b) // checked by Propose
		if op.Kind == OpMulticast {
			if len(c.hist)+c.points >= c.cfg.SendBuffer || c.flowBlocked() {
				return
			}
			c.communicate(op)
		} else {
			st := streamOf(op.Targets)
			c.reqs = append(c.reqs, request{from: op.Peer, stream: st, step: op.Step, targets: slices.Clone([]byte(op.Targets))})
			p := c.peer(op.Peer)
			p.in[st].want++
		}
		c.step = op.Step
		c.ops = c.ops[1:]
	}
}

// streamOf is the stream a call with target set ts uses: point-to-point
// for one target (§5.6), else broadcast.
func streamOf(ts frame.Targets) frame.PcodeStream {
	if ts.Count() == 1 {
		return frame.StreamPoint
	}
	return frame.StreamBroadcast
}

// communicate is fig. 4: number the message, broadcast it, keep it.
func (c *Core) communicate(op Op) {
	m := sent{step: op.Step, targets: slices.Clone([]byte(op.Targets)), data: slices.Clone(op.Data)}
	if streamOf(op.Targets) == frame.StreamPoint {
		var p *peer
		for i := range c.peers {
			if op.Targets.Has(c.peers[i].id) {
				p = &c.peers[i]
			}
		}
		p.pointSent++
		m.count, m.global = p.pointSent, c.gc
		p.pointHist = append(p.pointHist, m)
		c.points++
		c.sendData(p.mac, m.count, frame.StreamPoint, m, 0)
	} else {
		c.pc++
		c.gc++
		m.count, m.global = c.pc, c.gc
		c.drain()
		c.hist = append(c.hist, m)
		c.sendData(c.cfg.Dst, m.count, frame.StreamBroadcast, m, 0)
	}
	if len(c.hist)+c.points == 1 {
		c.ackProgress = c.now
	}
	c.stats.DataSent++
}

// deliver hands out the messages of the pending requests in order
// (fig. 2), checking A1 on each.
func (c *Core) deliver() {
	for len(c.reqs) > 0 {
		r := c.reqs[0]
		p := c.peer(r.from)
		s := &p.in[r.stream]
		h := s.ready
		if h == nil {
			return
		}
		if h.step != r.step || !frame.Targets(h.targets).Equal(r.targets) {
			c.stats.Mismatches++
			c.halt(frame.AbortMismatch, r.from, fmt.Sprintf("A1 violated: the request at step %d from member %d to %s matched its message %d of step %d to %s",
				r.step, r.from, targetString(r.targets), h.count, h.step, targetString(h.targets)))
			return
		}
		if s.tries > 0 && h.retx && s.tries == 1 {
			c.sample(c.now.Sub(s.firstNack))
		}
		c.reqs = c.reqs[1:]
		s.want--
		s.ready = nil
		c.deliveries = append(c.deliveries, core.Delivery{From: r.from, Seq: h.count, Data: h.data})
		c.delivered = append(c.delivered, h)
		c.stats.Delivered++
		// The slot is free: the early buffer may fill it.
		if next := c.early[earlyKey{p.id, r.stream, s.last + 1}]; next != nil {
			delete(c.early, earlyKey{p.id, r.stream, s.last + 1})
			c.accept(p, r.stream, next)
		}
	}
}

func targetString(ts []byte) string {
	var ids []int
	for i, b := range ts {
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				ids = append(ids, 8*i+bit)
			}
		}
	}
	return fmt.Sprint(ids)
}

// timers runs §5.7's NACK timers, the periodic STATUS (§5.5), the probe
// of a blocked sender, the departure, and the failure check.
func (c *Core) timers() {
	now := c.now
	for i := range c.peers {
		p := &c.peers[i]
		for st := range p.in {
			s := &p.in[st]
			c.updateGap(p, frame.PcodeStream(st))
			if !s.needs() {
				s.nackAt, s.tries = 0, 0
				continue
			}
			switch {
			case s.nackAt == 0:
				s.nackAt = now.Add(c.halfRTT())
			case s.nackAt <= now:
				kind := frame.NackPersonal
				var step uint64
				if s.want > 0 && s.ready == nil {
					kind = frame.NackRequest
					for _, r := range c.reqs {
						if r.from == p.id && r.stream == frame.PcodeStream(st) {
							step = r.step
							break
						}
					}
				}
				if s.tries == 0 {
					s.firstNack = now
				}
				c.sendNack(p.mac, &frame.PcodeNackBody{Kind: kind, Stream: frame.PcodeStream(st), Target: p.id, Last: s.last, Step: step})
				s.tries++
				s.nackAt = now.Add(c.interval(s.tries))
			}
		}
	}
	if !c.globalGap() {
		c.globalAt, c.globalTry = 0, 0
	} else if c.globalAt == 0 {
		c.globalAt = now.Add(c.halfRTT())
	} else if c.globalAt <= now {
		c.sendNack(c.cfg.Dst, &frame.PcodeNackBody{Kind: frame.NackGlobal, Target: frame.NoMember, Last: c.gc})
		c.globalTry++
		c.globalAt = now.Add(c.interval(c.globalTry))
	}
	if frame.SeqDiff(c.gc, c.lastStatus) > int32(c.cfg.StatusWindow) {
		c.sendStatus(c.cfg.Dst, 0, 0)
	}
	if !c.probeDue() {
		c.probeTries = 0
	} else if c.probeAt <= now {
		c.probeToken++
		if c.probeToken == 0 {
			c.probeToken = 1
		}
		c.probeSent = now
		c.stats.Probes++
		c.sendStatus(c.cfg.Dst, frame.FlagAckRequest, c.probeToken)
		c.probeTries++
		c.probeAt = now.Add(c.interval(c.probeTries))
	}
	if c.lingerUntil != 0 {
		if now >= c.lingerUntil {
			c.left = true
			c.events = append(c.events, core.Event{Kind: core.SelfLeft, Member: c.cfg.Self, At: now})
		}
		return
	}
	if c.leaving && len(c.ops) == 0 && len(c.hist) == 0 && c.points == 0 {
		// Every member holds what we sent. Announce the departure, and
		// linger a while answering whoever still speaks to us with the
		// Leave again: a lost Leave would leave a member waiting for our
		// acknowledgement or progress until it took us for failed.
		c.sendLeave(c.cfg.Dst)
		c.lingerUntil = now.Add(lingerQuiet * c.cfg.MaxTimer)
		return
	}
	for i := range c.peers {
		p := &c.peers[i]
		if c.awaits(p) && now.Sub(p.lastHeard) >= c.cfg.FailureTimeout {
			c.halt(frame.AbortSilent, p.id, fmt.Sprintf("member %d silent for %v while this member waits on it: one failure stops the program",
				p.id, now.Sub(p.lastHeard)))
			return
		}
	}
}

// updateGap decides whether p's stream st has a gap worth a NACK: a
// count in (last, top] that is neither accepted nor in the early buffer,
// while a resend of it would find room (the slot free for the next
// count, or room in the early buffer) — else the resend would be
// dropped again, and the request NACK fetches it when its turn comes.
func (c *Core) updateGap(p *peer, st frame.PcodeStream) {
	s := &p.in[st]
	s.gap = false
	if !frame.SeqLess(s.last, s.top) {
		return
	}
	room := c.cfg.EarlyBuffer != NoEarlyBuffer && len(c.early) < c.cfg.EarlyBuffer
	if s.ready != nil && !room {
		return
	}
	if !room && s.ready == nil {
		// Only the next count can be taken.
		s.gap = c.early[earlyKey{p.id, st, s.last + 1}] == nil
		return
	}
	if frame.SeqDiff(s.top, s.last) > int32(c.cfg.EarlyBuffer)+1 {
		s.gap = true
		return
	}
	for k := s.last + 1; !frame.SeqLess(s.top, k); k++ {
		if c.early[earlyKey{p.id, st, k}] == nil {
			s.gap = true
			return
		}
	}
}

// probeDue: our multicasts wait for members' STATUS — the buffer or the
// flow window is full, we are leaving, or their acks stalled — so we ask
// every member for one.
func (c *Core) probeDue() bool {
	if c.flowBlocked() {
		return true
	}
	if len(c.hist) == 0 && c.points == 0 {
		return false
	}
	return c.leaving || len(c.hist)+c.points >= c.cfg.SendBuffer || c.now.Sub(c.ackProgress) >= 4*c.interval(0)
}

// awaits reports whether this member waits on p: for a message, for its
// STATUS, or for its PROGRESS.
func (c *Core) awaits(p *peer) bool {
	if p.in[0].needs() || p.in[1].needs() {
		return true
	}
	if p.left {
		return false
	}
	return frame.SeqLess(p.acked, c.pc) || len(p.pointHist) > 0 ||
		frame.SeqDiff(c.gc, p.gcv) > int32(c.cfg.FlowWindow)
}

// halt stops the program here: an Abort to every member (unless reason
// is 0: it came from one), a MemberFailed for a silent member, and
// SelfRemoved with the error.
func (c *Core) halt(reason frame.AbortReason, about frame.MemberID, text string) {
	if c.halted {
		return
	}
	c.halted = true
	if p := c.peer(about); reason == frame.AbortSilent && p != nil {
		c.events = append(c.events, core.Event{Kind: core.MemberFailed, Member: about, At: c.now, Delivered: p.in[0].last + 1, Reason: text})
	}
	if reason != 0 {
		c.abort = frame.PcodeAbortBody{Reason: reason, Member: about, Step: c.step, Text: []byte(text)}
		c.hdr.Seq = c.pc
		c.emit(c.cfg.Dst, &c.abort)
	}
	c.events = append(c.events, core.Event{Kind: core.SelfRemoved, Member: c.cfg.Self, At: c.now, Reason: text})
	// Linger, answering whoever still speaks to us with the abort: a lost
	// abort would leave a member waiting on us until it took us for
	// failed, and report the wrong member.
	c.lingerUntil = c.now.Add(lingerQuiet * c.cfg.MaxTimer)
}

// answerHalted is Step after the program stopped here: a frame from a
// member is answered with the abort (the one this member sent, or the
// one it received), at most once per half round trip per member, while
// the core lingers.
func (c *Core) answerHalted(now Time, src [6]byte, v frame.View) error {
	p := c.peer(v.Sender())
	if p == nil || src != p.mac || v.Type() == frame.PcodeAbort || now >= c.lingerUntil {
		return core.ErrHalted
	}
	if p.answered == 0 || now.Sub(p.answered) >= c.halfRTT() {
		p.answered = now
		c.hdr.Seq = c.pc
		c.emit(p.mac, &c.abort)
		c.lingerUntil = max(c.lingerUntil, now.Add(lingerQuiet*c.cfg.MaxTimer))
	}
	return nil
}

// sendData sends message m of a stream to dst.
func (c *Core) sendData(dst [6]byte, count uint32, st frame.PcodeStream, m sent, flags frame.Flags) {
	c.hdr.Seq = count
	c.hdr.Flags = flags
	c.emit(dst, &frame.PcodeDataBody{Step: m.step, Global: m.global, Stream: st, Targets: m.targets, Data: m.data})
	c.hdr.Flags = 0
}

// lingerQuiet is how many MaxTimers a departed member lingers after the
// last frame it answered: a member waiting on it probes at least every
// MaxTimer, so several lost round trips in a row are needed to miss it.
const lingerQuiet = 8

// sendLeave announces our departure (frame.Leave, Seq the next count).
func (c *Core) sendLeave(dst [6]byte) {
	c.hdr.Seq = c.pc + 1
	c.emit(dst, &frame.Empty{T: frame.Leave})
}

// sendNack is fig. 5's IssueNack with the kind of §5.7.
func (c *Core) sendNack(dst [6]byte, n *frame.PcodeNackBody) {
	c.stats.NacksSent[n.Kind]++
	c.hdr.Seq = c.gc
	c.emit(dst, n)
}

// sendStatus sends STATUS with PROGRESS (§5.5) to dst.
func (c *Core) sendStatus(dst [6]byte, flags frame.Flags, echo uint32) {
	c.stats.StatusSent++
	c.hdr.Seq = c.pc
	c.hdr.Flags = flags
	pts := c.scratchAcks[:0]
	for _, m := range c.cfg.Members {
		if p := c.peer(m.ID); p != nil {
			pts = append(pts, p.in[frame.StreamPoint].last)
		} else {
			pts = append(pts, 0)
		}
	}
	c.scratchAcks = pts
	c.emit(dst, &frame.PcodeStatusBody{Global: c.gc, Echo: echo, PointBase: c.cfg.ackBase, Point: pointSpan(pts, c.cfg)})
	c.hdr.Flags = 0
	if dst == c.cfg.Dst {
		c.lastStatus = c.gc
	}
}

// pointSpan lays the members' point counters out by id from ackBase.
func pointSpan(byMember []uint32, s settings) []uint32 {
	out := make([]uint32, s.span)
	for i, m := range s.Members {
		out[int(m.ID)-int(s.ackBase)] = byMember[i]
	}
	return out
}

// SkipCRC leaves every frame's CRC to the link (core.CRCSkipper).
func (c *Core) SkipCRC() { c.hdr.SkipCRC = true }

// emit encodes c.hdr (with our pcv as the ack vector) and body into a
// frame for the next Ready.
func (c *Core) emit(dst [6]byte, body frame.Body) {
	for i := range c.hdr.Acks {
		c.hdr.Acks[i] = 0
	}
	for i := range c.peers {
		c.hdr.Acks[int(c.peers[i].id)-int(c.cfg.ackBase)] = c.peers[i].in[frame.StreamBroadcast].last
	}
	c.hdr.Acks[int(c.cfg.Self)-int(c.cfg.ackBase)] = c.pc
	if c.used == len(c.bufs) {
		c.bufs = append(c.bufs, make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU))
	}
	b := frame.AppendEthernet(c.bufs[c.used][:0], dst, c.cfg.selfMAC, c.cfg.EtherType)
	b, err := frame.Append(b, &c.hdr, body)
	if err != nil {
		return
	}
	c.bufs[c.used] = b
	c.used++
	c.frames = append(c.frames, b)
}

// Ready returns the frames, deliveries and events of the last inputs.
func (c *Core) Ready() core.Ready {
	return core.Ready{Frames: c.frames, Deliveries: c.deliveries, Events: c.events}
}

// Advance says the last Ready was carried out.
func (c *Core) Advance() {
	c.frames, c.used = c.frames[:0], 0
	clear(c.deliveries)
	c.deliveries = c.deliveries[:0]
	c.free = append(c.free, c.delivered...)
	clear(c.delivered)
	c.delivered = c.delivered[:0]
	c.events = c.events[:0]
}

// Deadline is when Tick must next run.
func (c *Core) Deadline() Time {
	if c.halted && c.now < c.lingerUntil {
		return c.lingerUntil
	}
	if !c.started || c.halted || c.left {
		return 0
	}
	var d Time
	at := func(t Time) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if c.lingerUntil != 0 {
		return c.lingerUntil
	}
	if c.opRunnable() || c.leaving && len(c.ops) == 0 && len(c.hist) == 0 && c.points == 0 {
		at(c.now)
	}
	for i := range c.peers {
		p := &c.peers[i]
		for st := range p.in {
			s := &p.in[st]
			if s.needs() {
				if s.nackAt == 0 {
					at(c.now)
				}
				at(s.nackAt)
			}
		}
		if c.awaits(p) {
			at(p.lastHeard.Add(c.cfg.FailureTimeout))
		}
	}
	if c.globalGap() {
		at(max(c.globalAt, c.now))
	}
	if c.probeDue() {
		at(max(c.probeAt, c.now))
	} else if len(c.hist) > 0 || c.points > 0 {
		at(c.ackProgress.Add(4 * c.interval(0)))
	}
	return d
}

// Done reports whether the member left or halted, its last frames out.
func (c *Core) Done() bool {
	return (c.left || c.halted && c.now >= c.lingerUntil) && len(c.frames) == 0
}

// Stats returns the counters.
func (c *Core) Stats() core.Stats {
	s := c.stats
	s.SRTT, s.RTTVar, s.GlobalCounter = c.srtt, c.rttvar, c.gc
	s.SendBuffer, s.EarlyBuffer = len(c.hist)+c.points, len(c.early)
	var nacks uint64
	for _, n := range s.NacksSent {
		nacks += n
	}
	return core.Stats{Proposed: s.Multicasts + s.Requests, Delivered: s.Delivered, Sent: s.DataSent, Retransmitted: s.Resent,
		RepairRequests: nacks, RepairRequestsReceived: s.NacksReceived, Window: c.cfg.SendBuffer,
		InFlight: len(c.hist) + c.points, Pending: len(c.ops), Unsettled: len(c.hist) + c.points, Detail: s}
}

// Members returns every member as seen here.
func (c *Core) Members() []core.Member {
	out := make([]core.Member, 0, len(c.peers)+1)
	for _, m := range c.cfg.Members {
		if m.ID == c.cfg.Self {
			out = append(out, core.Member{ID: m.ID, Self: true, Live: !c.halted && !c.left})
			continue
		}
		p := c.peer(m.ID)
		out = append(out, core.Member{ID: m.ID, Live: !p.left, Repairing: p.in[0].needs() || p.in[1].needs()})
	}
	return out
}

// Repair says whether a frame from from fills a gap here.
func (c *Core) Repair(from frame.MemberID) (frame.MemberID, bool) {
	p := c.peer(from)
	return from, p != nil && (p.in[0].needs() || p.in[1].needs())
}

// Halted returns why the program stopped here, if it did.
func (c *Core) Halted() bool { return c.halted }

// debug describes the core's state for test failures.
func (c *Core) debug() string {
	var b []byte
	b = fmt.Appendf(b, "pc=%d gc=%d pending=%v progress=%d globalAt=%d hist=%d points=%d ops=%d reqs=%d early=%d leaving=%v blocked=%v probeDue=%v probeAt=%d",
		c.pc, c.gc, c.pending, c.progress, c.globalAt, len(c.hist), c.points, len(c.ops), len(c.reqs), len(c.early), c.leaving, c.Blocked(), c.probeDue(), c.probeAt)
	for i := range c.peers {
		p := &c.peers[i]
		b = fmt.Appendf(b, "\n    peer %d: acked=%d gcv=%d left=%v heard=%d in=%+v", p.id, p.acked, p.gcv, p.left, p.lastHeard, p.in)
	}
	return string(b)
}
