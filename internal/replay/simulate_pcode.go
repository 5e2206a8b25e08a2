package replay

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pcode"
)

// A PCODE member (reliable/pcode, Order PCODE) is driven by its program's
// calls, and a capture shows only some of them: a multicast by its first
// transmission (its step, target set and message), a request by the
// messages of other members targeted here (each is the one a request of
// the same step matched), a skip not at all. The re-run rebuilds the
// member's program from these — step by step, the multicasts in capture
// order then the requests by source, as package collective issues them —
// and runs it as a program that computes nothing between its calls (the
// benchmark drivers and the simulator's programs): a step with a multicast
// is proposed when the capture shows the multicast's first transmission,
// a step of requests only as soon as every earlier request was delivered,
// and the member leaves once its last call returned (if the capture shows
// its Leave). A program that computes between calls asked later than the
// re-run does: its request NACKs can then come later in the capture than
// in the re-run, which the first divergence names.

// isPcodeType reports whether t is a PCODE frame type (0x30–0x33).
func isPcodeType(t frame.Type) bool {
	switch t {
	case frame.PcodeData, frame.PcodeNack, frame.PcodeStatus, frame.PcodeAbort:
		return true
	}
	return false
}

// pcodeConfig is the PCODE core's configuration from the options.
func pcodeConfig(opts SimOptions, group uint32, members []frame.MemberInfo, mtu int) pcode.Config {
	return pcode.Config{
		Group: group, Self: opts.Node, Members: members, MTU: mtu, MaxPayload: opts.MaxPayload, EtherType: opts.EtherType,
		SendBuffer: opts.Window, EarlyBuffer: opts.EarlyBuffer, FlowWindow: opts.FlowWindow, StatusWindow: opts.StatusWindow,
		InitialRTT: pcode.Duration(opts.InitialRTT), MinTimer: pcode.Duration(opts.MinTimer), MaxTimer: pcode.Duration(opts.MaxTimer),
		FailureTimeout: pcode.Duration(opts.FailureTimeout),
	}
}

// pcodeStep is one step of the rebuilt program: this member's calls at it.
type pcodeStep struct {
	step   uint64
	mcasts []pcode.Op
	reqs   []pcode.Op
	// first is the capture's first transmission of one of its multicasts
	// (nil: a step of requests only).
	first *Record
}

// pcodeProgram runs the member's rebuilt program in a re-run.
type pcodeProgram struct {
	self      frame.MemberID
	etherType uint16
	rr        *rerun
	steps     []pcodeStep
	byStep    map[uint64]int
	next      int        // the next step to propose
	waiting   int        // requests proposed and not delivered yet
	delivered int        // deliveries seen so far (len(res.Deliveries) at the last look)
	reqs      []pcode.Op // the requests proposed and not delivered, oldest first
	// held: ops refused for a full buffer or flow window, retried each turn.
	held  [][]byte
	leave bool // the capture shows our Leave: leave when the program ends
	left  bool
	busy  bool // inside advance (collectAt calls back)
	// diverged counts the places the re-run left the capture; first is
	// the first one and the captured frame it names.
	diverged   int
	first      string
	firstFrame int
	// sentData finds the re-run's first transmissions by stream,
	// destination and count.
	sentData map[pcodeDataKey]int
	scanned  int // res.Sent scanned into sentData
}

type pcodeDataKey struct {
	stream frame.PcodeStream
	dst    [6]byte
	count  uint32
}

// newPcodeProgram rebuilds member self's program from recs, the frames of
// its interface; dirOf tells sent from received.
func newPcodeProgram(rr *rerun, recs []*Record, self frame.MemberID, group uint32, etherType uint16, dirOf func(*Record) Dir) *pcodeProgram {
	p := &pcodeProgram{self: self, etherType: etherType, rr: rr, byStep: map[uint64]int{}, sentData: map[pcodeDataKey]int{}}
	// A message is its sender's, stream's and count's; our point-to-point
	// streams are one per target, so ours are told apart by destination.
	type msgKey struct {
		from   frame.MemberID
		stream frame.PcodeStream
		dst    [6]byte
		count  uint32
	}
	seen := map[msgKey]bool{}
	stepOf := func(s uint64) *pcodeStep {
		i, ok := p.byStep[s]
		if !ok {
			i = len(p.steps)
			p.byStep[s] = i
			p.steps = append(p.steps, pcodeStep{step: s})
		}
		return &p.steps[i]
	}
	for _, r := range recs {
		v := r.View
		if v == nil || v.Group() != group {
			continue
		}
		dir := dirOf(r)
		if dir == DirOut && v.Sender() == self && v.Type() == frame.Leave {
			p.leave = true
		}
		if v.Type() != frame.PcodeData {
			continue
		}
		d := v.PcodeData()
		k := msgKey{v.Sender(), d.Stream, [6]byte{}, v.Seq()}
		if dir == DirOut && d.Stream == frame.StreamPoint {
			k.dst = r.Dst
		}
		switch {
		case dir == DirOut && v.Sender() == self:
			if seen[k] {
				continue
			}
			seen[k] = true
			st := stepOf(d.Step)
			st.mcasts = append(st.mcasts, pcode.Op{Kind: pcode.OpMulticast, Step: d.Step, Targets: slices.Clone(d.Targets), Data: bytes.Clone(d.Data)})
			if st.first == nil {
				st.first = r
			}
		case dir == DirIn && v.Sender() != self && d.Targets.Has(self):
			if seen[k] {
				continue
			}
			seen[k] = true
			st := stepOf(d.Step)
			st.reqs = append(st.reqs, pcode.Op{Kind: pcode.OpRequest, Step: d.Step, Peer: v.Sender(), Targets: slices.Clone(d.Targets)})
		}
	}
	slices.SortFunc(p.steps, func(a, b pcodeStep) int {
		switch {
		case a.step < b.step:
			return -1
		case a.step > b.step:
			return 1
		}
		return 0
	})
	for i := range p.steps {
		p.byStep[p.steps[i].step] = i
		slices.SortStableFunc(p.steps[i].reqs, func(a, b pcode.Op) int { return int(a.Peer) - int(b.Peer) })
	}
	return p
}

// counts returns the program's calls: multicasts and requests.
func (p *pcodeProgram) counts() (mcasts, reqs int) {
	for _, s := range p.steps {
		mcasts += len(s.mcasts)
		reqs += len(s.reqs)
	}
	return mcasts, reqs
}

// maxPcodeDivergeNotes bounds the divergences noted one by one: past the
// first, most follow from it.
const maxPcodeDivergeNotes = 8

// diverge notes where the re-run leaves the capture, at captured frame n.
func (p *pcodeProgram) diverge(n int, format string, args ...any) {
	p.diverged++
	text := fmt.Sprintf("frame %d: ", n) + fmt.Sprintf(format, args...)
	if p.diverged == 1 {
		p.first, p.firstFrame = text, n
	}
	if p.diverged <= maxPcodeDivergeNotes {
		p.rr.note("%s (diverges)", text)
	}
}

// propose offers the core ops in order, holding back the rest when one
// is refused for room.
func (p *pcodeProgram) propose(t clock.Time, ops ...[]byte) {
	for i, b := range ops {
		if len(p.held) > 0 {
			p.held = append(p.held, ops[i:]...)
			return
		}
		p.rr.res.Proposed++
		if err := p.rr.st.Propose(t, b); err != nil {
			p.rr.res.Proposed--
			if errors.Is(err, core.ErrWindowFull) {
				p.held = append(p.held, ops[i:]...)
				return
			}
			op, _ := pcode.ParseOp(b)
			p.diverge(p.rr.cur, "Propose of our call at step %d failed: %v", op.Step, err)
		}
	}
}

// retry offers the held ops again.
func (p *pcodeProgram) retry(t clock.Time) bool {
	if len(p.held) == 0 {
		return false
	}
	ops := p.held
	p.held = nil
	n := p.rr.res.Proposed
	p.propose(t, ops...)
	return p.rr.res.Proposed > n
}

// proposeStep proposes the calls of step i.
func (p *pcodeProgram) proposeStep(t clock.Time, i int) {
	s := &p.steps[i]
	var ops [][]byte
	for _, op := range s.mcasts {
		ops = append(ops, pcode.AppendOp(nil, op))
	}
	for _, op := range s.reqs {
		ops = append(ops, pcode.AppendOp(nil, op))
	}
	p.propose(t, ops...)
	p.waiting += len(s.reqs)
	p.reqs = append(p.reqs, s.reqs...)
}

// took accounts for the deliveries since the last look: each is the
// message of the oldest request.
func (p *pcodeProgram) took() {
	n := len(p.rr.res.Deliveries) - p.delivered
	p.waiting -= n
	p.reqs = p.reqs[min(n, len(p.reqs)):]
	p.delivered = len(p.rr.res.Deliveries)
}

// awaited describes the message the re-run's program waits for.
func (p *pcodeProgram) awaited() string {
	if len(p.reqs) == 0 {
		return "nothing"
	}
	r := p.reqs[0]
	s := fmt.Sprintf("member %d's message of step %d", r.Peer, r.Step)
	if len(p.reqs) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(p.reqs)-1)
	}
	return s
}

// advance runs the program as far as it goes at instant t without the
// capture: steps of requests only, once every earlier request was
// delivered, and the Leave at the end. It reports whether it proposed.
func (p *pcodeProgram) advance(t clock.Time) bool {
	p.took()
	did := p.retry(t)
	did = p.eager(t) || did
	if p.leave && !p.left && p.next == len(p.steps) && p.waiting <= 0 && len(p.held) == 0 {
		p.left = true
		p.rr.st.Leave(t)
		p.rr.note("the program's last call returned at %v: the re-run leaves there, as the capture's Leave shows the member did", p.rr.clk.Wall(t).Sub(p.rr.start))
		did = true
	}
	return did
}

// eager proposes the steps that come next while every earlier request
// was delivered: steps of requests only, and steps whose multicast the
// capture shows sent at this instant (the program reached them in the
// turn that delivered the last message, as a call after Recv does).
func (p *pcodeProgram) eager(t clock.Time) bool {
	did := false
	for p.waiting <= 0 && p.next < len(p.steps) && len(p.held) == 0 {
		if f := p.steps[p.next].first; f != nil && p.rr.clk.Core(f.Time) > t {
			break
		}
		p.proposeStep(t, p.next)
		p.next++
		did = true
	}
	return did
}

// after is the re-run's hook after each turn (rerun.after): the program
// goes on where the turn's deliveries let it, in another turn at the
// same instant, as a program's call after Recv returns does.
func (p *pcodeProgram) after(t clock.Time) {
	if p.busy {
		return
	}
	p.busy = true
	defer func() { p.busy = false }()
	for p.advance(t) {
		p.rr.cur = 0
		p.rr.st.Tick(t)
		p.rr.collectAt(t)
	}
}

// proposes reports whether the member's sent frame r shows the program
// reaching a step (rerun.proposes): a first transmission of a multicast
// of a step not yet proposed.
func (p *pcodeProgram) proposes(r *Record) bool {
	v := r.View
	if v == nil || v.Type() != frame.PcodeData || v.Sender() != p.self || v.Retransmission() {
		return false
	}
	i, ok := p.byStep[v.PcodeData().Step]
	return ok && i >= p.next
}

// out handles one frame the member sent: a multicast's first
// transmission proposes its step (and any earlier ones the re-run has
// not reached: the capture says the live program did), then the re-run's
// frame is compared with it.
func (p *pcodeProgram) out(r *Record, t clock.Time) {
	v := r.View
	if v.Type() != frame.PcodeData || v.Retransmission() {
		return
	}
	d := v.PcodeData()
	if i, ok := p.byStep[d.Step]; ok && i >= p.next {
		p.busy = true
		p.took()
		if p.waiting > 0 {
			p.diverge(r.N, "our multicast of step %d was sent while the re-run still waits for %s", d.Step, p.awaited())
		}
		p.retry(t)
		for ; p.next <= i; p.next++ {
			p.proposeStep(t, p.next)
		}
		p.eager(t)
		p.rr.cur = r.N
		p.rr.st.Tick(t)
		p.rr.collectAt(t)
		p.busy = false
		p.after(t)
	}
	p.verify(r)
}

// verify compares the member's captured first transmission r with the
// re-run's of the same stream, destination and count, byte for byte.
func (p *pcodeProgram) verify(r *Record) {
	sent := p.rr.res.Sent
	for ; p.scanned < len(sent); p.scanned++ {
		eth, body, err := frame.SplitEthernet(sent[p.scanned].Data, p.etherType)
		if err != nil {
			continue
		}
		w, err := frame.Parse(body)
		if err != nil || w.Type() != frame.PcodeData || w.Retransmission() {
			continue
		}
		k := pcodeDataKey{w.PcodeData().Stream, eth.Dst(), w.Seq()}
		if _, ok := p.sentData[k]; !ok {
			p.sentData[k] = p.scanned
		}
	}
	v := r.View
	d := v.PcodeData()
	k := pcodeDataKey{d.Stream, r.Dst, v.Seq()}
	i, ok := p.sentData[k]
	if !ok {
		p.diverge(r.N, "captured our PcodeData count %d %v step %d, the re-run has not sent it", v.Seq(), d.Stream, d.Step)
		return
	}
	if !bytes.Equal(sent[i].Data, r.Data) {
		p.diverge(r.N, "captured our PcodeData count %d %v: %s", v.Seq(), d.Stream, pcodeDiff(sent[i].Data, r.Data, p.etherType))
	}
}

// pcodeDiff says how the re-run's frame a differs from the captured b.
func pcodeDiff(a, b []byte, etherType uint16) string {
	_, ab, err1 := frame.SplitEthernet(a, etherType)
	_, bb, err2 := frame.SplitEthernet(b, etherType)
	if err1 != nil || err2 != nil {
		return "the frames differ"
	}
	va, err1 := frame.Parse(ab)
	vb, err2 := frame.Parse(bb)
	if err1 != nil || err2 != nil {
		return "the frames differ"
	}
	return fmt.Sprintf("re-run %s, captured %s", describe(va), describe(vb))
}

// describe is a frame's type, seq and details.
func describe(v frame.View) string {
	return fmt.Sprintf("%v seq %d %s", v.Type(), v.Seq(), Details(v))
}

// firstDivergence compares every frame the re-run sent with those the
// capture shows the member sent, in order, and describes the first
// difference ("" if none) and the captured frame where it is (past the
// last: its number + 1).
func firstDivergence(res *SimResult, out []*Record, etherType uint16, start time.Time) (string, int) {
	rel := func(t time.Time) float64 { return t.Sub(start).Seconds() }
	for k := range max(len(out), len(res.Sent)) {
		switch {
		case k >= len(out):
			last := 0
			if len(out) > 0 {
				last = out[len(out)-1].N
			}
			return fmt.Sprintf("the re-run sent %d frames, the capture shows %d: its frame %d at %.6f s (%s) is not in the capture",
				len(res.Sent), len(out), k+1, rel(res.Sent[k].At), describeFrame(res.Sent[k].Data, etherType)), last + 1
		case k >= len(res.Sent):
			return fmt.Sprintf("the re-run sent %d frames, the capture shows %d: captured frame %d at %.6f s (%s) is not in the re-run",
				len(res.Sent), len(out), out[k].N, rel(out[k].Time), describeFrame(out[k].Data, etherType)), out[k].N
		case !bytes.Equal(out[k].Data, res.Sent[k].Data):
			return fmt.Sprintf("sent frame %d: captured frame %d at %.6f s to %v is %s; the re-run's at %.6f s to %v is %s",
				k+1, out[k].N, rel(out[k].Time), net.HardwareAddr(out[k].Data[:6]), describeFrame(out[k].Data, etherType),
				rel(res.Sent[k].At), net.HardwareAddr(res.Sent[k].Data[:6]), describeFrame(res.Sent[k].Data, etherType)), out[k].N
		}
	}
	return "", 0
}

// finish notes how the re-run compares with the capture: the first
// divergence, of the program or of the frames sent, whichever the
// capture shows first.
func (p *pcodeProgram) finish(out []*Record, start time.Time) {
	res := p.rr.res
	sentDiv, n := firstDivergence(res, out, p.etherType, start)
	if p.diverged > maxPcodeDivergeNotes {
		p.rr.note("%d more divergences not listed", p.diverged-maxPcodeDivergeNotes)
	}
	switch {
	case p.first != "" && (sentDiv == "" || p.firstFrame <= n):
		res.Divergence = p.first
	case sentDiv != "":
		res.Divergence = sentDiv
	}
	if sentDiv != "" {
		p.rr.note("first difference in the frames sent: %s", sentDiv)
	} else {
		p.rr.note("the re-run sent exactly the %d frames the capture shows the member sent", len(out))
	}
	if res.Divergence != "" {
		p.rr.note("first divergence: %s", res.Divergence)
	}
	if p.next < len(p.steps) || p.waiting > 0 {
		p.rr.note("the program did not finish in the re-run: %d of %d steps proposed, waiting for %s", p.next, len(p.steps), p.awaited())
	}
}

func describeFrame(b []byte, etherType uint16) string {
	_, body, err := frame.SplitEthernet(b, etherType)
	if err != nil {
		return err.Error()
	}
	v, err := frame.Parse(body)
	if err != nil {
		return err.Error()
	}
	return describe(v)
}
