package files

import (
	"errors"
	"fmt"
	"hash"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// The sender's side: a file is queued, offered and multicast once (its
// pass), ended with the snapshot of its receivers, repaired to whoever
// lacks blocks, judged, and closed (docs/protocols.md, "Files (IBRMP)",
// Sender, per file).

// outFile is a file this member sends.
type outFile struct {
	meta   Meta
	src    Source
	to     []frame.MemberID
	blocks uint32
	next   uint32 // the next block of the pass
	// base is where its pass begins in the sender's count of pass
	// blocks (Core.passed): block b of it is pass block base+b.
	base uint64

	passing bool // offered, pass under way
	ended   bool // pass over, snapshot taken (§III.D)
	judged  bool // verdict reported

	rcv []*receiver // by id

	endedAt, judgedAt Time
	endStamp          uint32 // the first FileEnd's stamp
	endAt             Time   // next FileEnd
	endEvery          Duration
	lastRequest       Time
	// The window probe: since when the pass waits for the median
	// receiver, and when the last probe went.
	blockedSince, probeAt Time
	// passAt is when the pass began; slowSince, since when the pass
	// waits for a receiver behind the median (0: it does not), and
	// slowHeld how long it waited so before (windowOpen).
	passAt, slowSince Time
	slowHeld          Duration
	// marks[k] is when the pass sent block k·markEvery (repair.go).
	marks []Time

	// offerHash is the hash the offers carry: Outgoing's, or zeros when
	// the pass hashes the file (h: blocks 0..hashed-1 are in it, as the
	// pass reads them) and FileEnd carries meta.Hash, set as the pass
	// ends.
	offerHash [frame.FileHashLen]byte
	h         hash.Hash
	hashed    uint32

	// ahead[ai:] are the frames of the pass's blocks from aheadFirst on,
	// read as a run (read.go): each block's body at aheadAt, the rest of
	// the frame written when it goes.
	ahead      [][]byte
	ai         int
	aheadFirst uint32
	aheadAt    int

	// allHold: every receiver of the snapshot the pass would take now
	// has reported every block held, and no other receiver heard from
	// lacks any (held.go): the pass sends no more blocks, only hashes the
	// rest. aliveAt is when the offer last went again while it does.
	allHold bool
	aliveAt Time
}

// receiver is what a sender knows of one receiver of one file: its last
// report (a state report, §III.B.2, replacing what was known before), the
// repairs still to send it, and those in flight.
type receiver struct {
	id    frame.MemberID
	mac   [6]byte
	inc   uint32 // its incarnation, as of its last report
	snap  bool   // in the snapshot taken before the first FileEnd
	heard Time   // its last report (0: never)
	seq   uint32 // its last report's number
	state frame.FileState
	cause Cause // with FileFailed

	held, top uint32
	todo      []frame.Range // missing blocks from its last report
	ti        int           // where the repair scan is in todo
	cur       uint32        // and the block within todo[ti]
	credit    int           // repair frames it takes until its next report (§III.C)
	sent      map[uint32]sentAt
	offerAt   Time // the offer last sent to it alone
	// rack is, per path (to the group, to it alone), the latest send
	// time of a block its reports show held (repair.go): a block sent
	// on that path before it and still missing was lost. rackRTT is the
	// round trip, to the report, of the latest of them, per path.
	rack    [2]Time
	rackRTT [2]Duration
}

type goneKey struct {
	member frame.MemberID
	id     uint32
}

// Send queues a file; it goes out of later Readys (Send, like Propose,
// produces no output) and its verdict comes out of Reports. It returns
// the file's id.
func (c *Core) Send(now Time, o Outgoing) (uint32, error) {
	c.start(now)
	switch {
	case c.leaving:
		return 0, fmt.Errorf("files: send %q: %w", o.Name, errLeaving)
	case o.Source == nil:
		return 0, fmt.Errorf("files: send %q: no source", o.Name)
	case o.Name == "" || len(o.Name) > frame.MaxFileName:
		return 0, fmt.Errorf("files: send: a name of %d bytes (want 1..%d)", len(o.Name), frame.MaxFileName)
	case frame.FileBlocks(o.Size, uint32(c.cfg.BlockSize)) > 0xffffffff:
		return 0, fmt.Errorf("files: send %q: %d bytes are more than 2³² blocks of %d", o.Name, o.Size, c.cfg.BlockSize)
	}
	for i := range len(o.Name) {
		if o.Name[i] == 0 {
			return 0, fmt.Errorf("files: send %q: a NUL byte in the name", o.Name)
		}
	}
	if c.nextID == 0 {
		return 0, fmt.Errorf("files: send %q: 2³²−1 files sent in this incarnation; restart to send more", o.Name)
	}
	if o.HashAlg == 0 {
		o.HashAlg = frame.FileHashSHA256
	}
	h, err := NewHash(o.HashAlg)
	if err != nil {
		return 0, fmt.Errorf("files: send %q: %w", o.Name, err)
	}
	m := Meta{Sender: c.cfg.Self, Incarnation: c.cfg.selfInc, ID: c.nextID, Name: o.Name, Size: o.Size, BlockSize: uint32(c.cfg.BlockSize), Hash: o.Hash, HashAlg: o.HashAlg}
	c.nextID++
	f := &outFile{meta: m, src: o.Source, to: slices.Clone(o.To), blocks: m.Blocks(), offerHash: o.Hash}
	if o.Hash == ([frame.FileHashLen]byte{}) {
		f.h = h
	}
	slices.Sort(f.to)
	f.to = slices.Compact(f.to)
	c.queue = append(c.queue, f)
	return m.ID, nil
}

var errLeaving = errors.New("the member is leaving")

func (c *Core) openFile(id uint32) *outFile {
	i, ok := slices.BinarySearchFunc(c.open, id, func(f *outFile, id uint32) int { return cmpU32(f.meta.ID, id) })
	if !ok {
		return nil
	}
	return c.open[i]
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// receiver returns f's record of member id, making one (with mac) if
// there is none.
func (f *outFile) receiver(id frame.MemberID, mac [6]byte) *receiver {
	i, ok := slices.BinarySearchFunc(f.rcv, id, func(r *receiver, id frame.MemberID) int { return int(r.id) - int(id) })
	if ok {
		if mac != ([6]byte{}) {
			f.rcv[i].mac = mac
		}
		return f.rcv[i]
	}
	r := &receiver{id: id, mac: mac, sent: map[uint32]sentAt{}}
	f.rcv = slices.Insert(f.rcv, i, r)
	return r
}

// allMissing names every receiver of the snapshot f would take as
// lacking the file for cause (a file given up before its verdict).
func (f *outFile) allMissing(c *Core, cause Cause) []Miss {
	var ms []Miss
	for _, id := range c.snapshotIDs(f) {
		ms = append(ms, Miss{Member: id, Cause: cause, Blocks: f.blocks})
	}
	return ms
}

// snapshotIDs is who f waits for (§III.D): its To, or every member but
// this one.
func (c *Core) snapshotIDs(f *outFile) []frame.MemberID {
	if f.to != nil {
		return slices.DeleteFunc(slices.Clone(f.to), func(id frame.MemberID) bool { return id == c.cfg.Self })
	}
	ids := make([]frame.MemberID, 0, len(c.members))
	for _, m := range c.members {
		if m.ID != c.cfg.Self {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// stepSender takes a receiver's report (FileStatus, §III.B.2).
func (c *Core) stepSender(now Time, src [6]byte, v frame.View) error {
	st := v.FileStatus()
	c.stats.ReportsReceived++
	if st.Incarnation != c.cfg.selfInc {
		// A report on a file of this member's previous run: that transfer
		// ends at the receiver when it finds this member silent on it.
		return nil
	}
	f := c.openFile(st.ID)
	if f == nil {
		c.answerGone(v.Sender(), src, st.ID)
		return nil
	}
	r := f.receiver(v.Sender(), src)
	if r.heard != 0 && r.inc == v.Incarnation() && frame.SeqLess(v.Seq(), r.seq) {
		return nil // an older report, overtaken
	}
	sameRun := r.heard != 0 && r.inc == v.Incarnation()
	if r.inc != v.Incarnation() {
		r.inc, r.rack, r.rackRTT = v.Incarnation(), [2]Time{}, [2]Duration{}
		clear(r.sent)
	}
	if r.heard == 0 {
		// Its first report on f: the queues to it are what they were
		// for the files before, so its repair timer starts from the
		// round trip measured there (its first report may come after
		// the pass ended; with no round trip the tail still in flight
		// would be repaired at once: issue 20, fig. 5b).
		r.rackRTT = c.latestRTT(f, r.id, r.inc)
	}
	r.seq, r.heard = v.Seq(), now
	f.lastRequest = now
	c.sampleRTT(now, st.Echo, st.Delay)
	if r.state == frame.FileFailed && r.cause == CauseOldHashAlg && v.Flags()&frame.FlagHashAlg == 0 {
		return nil // named too old (below): it was sent a FileGone
	}
	if sameRun && r.state == frame.FileFailed && r.cause == CauseOldReceiver {
		// Named too old: its fetch of every block again is not served
		// (it would fail again); the file's FileGone ends it.
		return nil
	}
	if f.meta.HashAlg != frame.FileHashSHA256 && v.Flags()&frame.FlagHashAlg == 0 {
		// Every receiver that reads the offer's algorithm byte flags
		// its reports so; one that does not is an rbcastd from before
		// the byte, which drops the offer (too long for it) and asks
		// for it for as long as the file is open. It is named at its
		// first report, and its transfer ended with a FileGone.
		r.state, r.cause, r.todo = frame.FileFailed, CauseOldHashAlg, nil
		clear(r.sent)
		c.stats.OldReceivers++
		c.stats.GoneSent++
		c.send(r.mac, 0, 0, &frame.FileGoneBody{ID: f.meta.ID, Reason: frame.FileAborted})
		c.checkHold(f)
		c.judge(now, f)
		c.pump(now)
		return nil
	}
	if sameRun && st.State == frame.FileReceiving && st.Held == 0 && r.held > 0 && f.offerHash == ([frame.FileHashLen]byte{}) &&
		st.Echo != 0 && (!f.ended || int32(st.Echo-f.endStamp) < 0) {
		// No block held after it reported some, and a stamp older than
		// FileEnd's: it emptied its copy after a hash mismatch it judged
		// before FileEnd, against the offer's zeros, which only an
		// rbcastd from before offers without a hash does (this version
		// judges only with FileEnd's hash, and echoes its stamp). It
		// would fetch every block again and fail again: it is named an
		// old receiver now, at its first mismatch, not after a second
		// copy of the file.
		r.state, r.cause, r.todo = frame.FileFailed, CauseOldReceiver, nil
		clear(r.sent)
		c.stats.OldReceivers++
		c.checkHold(f)
		c.judge(now, f)
		c.pump(now)
		return nil
	}
	if r.state == frame.FileDone || r.state == frame.FileFailed && r.cause != CauseSilent {
		// A receiver that finished stays finished: a restarted one
		// reports from its sink, which committed the file.
		if st.State != frame.FileNeedOffer && st.State != frame.FileReceiving {
			return nil
		}
	}
	r.state = st.State
	switch st.State {
	case frame.FileNeedOffer:
		// BOF_REQUEST: the offer again, to it alone.
		if r.offerAt == 0 || now.Sub(r.offerAt) >= c.rto() {
			r.offerAt = now
			c.sendOffer(now, f, r.mac, frame.FlagRetransmit)
		}
	case frame.FileReceiving:
		prevTop := r.top
		r.held, r.top, r.credit = st.Held, st.Top, int(st.Credit)
		r.todo = r.todo[:0]
		rl := v.FileMissing()
		for i := range rl.Len() {
			r.todo = append(r.todo, rl.At(i))
		}
		// What the report shows held: below its top, up to where its
		// list of missing ranges ends if the list is full.
		cover := st.Top
		if rl.Len() >= c.cfg.maxRanges && rl.Len() > 0 {
			cover = min(cover, rl.At(rl.Len()-1).Last+1)
		}
		c.delivered(now, f, r, prevTop, cover)
		if f.ended && st.Top < f.blocks && (len(r.todo) < c.cfg.maxRanges) {
			// It has not seen the pass end: the tail after its top is
			// missing too.
			r.todo = append(r.todo, frame.Range{First: st.Top, Last: f.blocks - 1})
		}
		r.ti, r.cur = 0, 0
		if len(r.todo) > 0 {
			r.cur = r.todo[0].First
		}
	case frame.FileDone:
		r.held, r.top, r.todo = f.blocks, f.blocks, nil
		clear(r.sent)
	case frame.FileFailed:
		r.cause, r.todo = Cause(st.Reason), nil
		clear(r.sent)
		if r.cause == CauseHash && f.offerHash == ([frame.FileHashLen]byte{}) && (!f.ended || int32(st.Echo-f.endStamp) < 0) {
			// A receiver that knows offers without a hash judges the
			// file only with FileEnd's hash, and echoes that FileEnd's
			// stamp or a later one; one that echoes an earlier stamp
			// judged it against the offer's zeros: an rbcastd from
			// before them, which drops FileEnd (its hash makes it
			// longer than that version decodes) and can never store the
			// file. The verdict says so instead of "hash mismatch".
			r.cause = CauseOldReceiver
			c.stats.OldReceivers++
		}
	}
	c.checkHold(f)
	c.judge(now, f)
	c.pump(now)
	return nil
}

// latestRTT is the round trips per path measured on member id, of
// incarnation inc, in the open file other than f that heard from it
// last (zero if none).
func (c *Core) latestRTT(f *outFile, id frame.MemberID, inc uint32) [2]Duration {
	var rtt [2]Duration
	var at Time
	for _, g := range c.open {
		if g == f {
			continue
		}
		i, ok := slices.BinarySearchFunc(g.rcv, id, func(r *receiver, id frame.MemberID) int { return int(r.id) - int(id) })
		if !ok {
			continue
		}
		if q := g.rcv[i]; q.inc == inc && q.heard > at && q.rackRTT != ([2]Duration{}) {
			rtt, at = q.rackRTT, q.heard
		}
	}
	return rtt
}

// answerGone answers a report on a file that is not open: once per
// receiver and file (§III.E's selective FILE_TIMEOUT).
func (c *Core) answerGone(member frame.MemberID, mac [6]byte, id uint32) {
	k := goneKey{member, id}
	if c.gone[k] {
		return
	}
	if len(c.gone) >= 4096 {
		clear(c.gone)
	}
	c.gone[k] = true
	reason, ok := c.aborted[id]
	switch {
	case ok:
	case id < c.nextID && !c.queued(id):
		reason = frame.FileClosed
	default:
		reason = frame.FileUnknown
	}
	c.stats.GoneSent++
	c.send(mac, 0, 0, &frame.FileGoneBody{ID: id, Reason: reason})
}

func (c *Core) queued(id uint32) bool {
	for _, f := range c.queue {
		if f.meta.ID == id {
			return true
		}
	}
	return false
}

// tickSender runs the sender's timers, starts passes and runs the pacer.
func (c *Core) tickSender(now Time) {
	for i := 0; i < len(c.open); i++ {
		f := c.open[i]
		if f.ended && !f.judged {
			for _, r := range f.rcv {
				if r.snap && r.state != frame.FileDone && r.state != frame.FileFailed && now.Sub(max(r.heard, f.endedAt)) >= c.cfg.FailureTimeout {
					r.state, r.cause = frame.FileFailed, CauseSilent
				}
			}
			c.judge(now, f)
		}
		if f.judged && now.Sub(max(f.lastRequest, f.judgedAt)) >= c.cfg.FileTimeout {
			c.close(f)
			i--
			continue
		}
		if f.ended && now >= f.endAt {
			c.sendEnd(now, f)
		}
	}
	c.pump(now)
	c.maybeLeft(now)
}

func (c *Core) senderDeadlines(at func(Time)) {
	for _, f := range c.open {
		if f.ended {
			at(f.endAt)
		}
		if f.ended && !f.judged {
			for _, r := range f.rcv {
				if r.snap && r.state != frame.FileDone && r.state != frame.FileFailed {
					at(max(r.heard, f.endedAt).Add(c.cfg.FailureTimeout))
				}
			}
		}
		if f.judged {
			at(max(f.lastRequest, f.judgedAt).Add(c.cfg.FileTimeout))
		}
		if d := f.probeDue(c.rto()); d > c.now {
			at(d) // one due now waits for the pacer (pump)
		}
		if d := c.slowWaitEnds(f); d != 0 {
			at(max(d, c.now))
		}
	}
	if len(c.queue) > 0 && c.passing() == nil && c.slotFree() {
		at(c.now)
	}
}

// slotFree: a queued file's pass may start, MaxOpen files being open at
// most (a judged one closes to make room). While every slot holds a file
// not judged yet, a report or a timer judges one first: a deadline of now
// meanwhile would have the runtime spin, its link's read timing out
// before it reads the reports that judge them.
func (c *Core) slotFree() bool {
	return len(c.open) < c.cfg.MaxOpen || slices.ContainsFunc(c.open, func(f *outFile) bool { return f.judged })
}

// passing is the file whose pass is under way (one at a time), or nil.
func (c *Core) passing() *outFile {
	for _, f := range c.open {
		if !f.ended {
			return f
		}
	}
	return nil
}

// startPass opens the next queued file if no pass is under way and a
// slot is free (closing the oldest judged file if need be).
func (c *Core) startPass(now Time) *outFile {
	if f := c.passing(); f != nil || len(c.queue) == 0 {
		return f
	}
	if !c.slotFree() {
		return nil
	}
	if len(c.open) >= c.cfg.MaxOpen {
		c.close(c.open[slices.IndexFunc(c.open, func(f *outFile) bool { return f.judged })])
	}
	f := c.queue[0]
	c.queue = c.queue[1:]
	c.open = append(c.open, f) // ids grow, so open stays sorted
	f.passing, f.lastRequest, f.passAt, f.base = true, now, now, c.passed
	c.sendOffer(now, f, c.cfg.Dst, 0)
	if f.blocks == 0 {
		c.endPass(now, f)
	}
	return c.passing()
}

// endPass takes the snapshot (§III.D) and sends the first FileEnd.
func (c *Core) endPass(now Time, f *outFile) {
	if f.h != nil {
		if err := c.hashRest(f); err != nil {
			c.abort(now, f, err)
			return
		}
	}
	c.freeAhead(f)
	c.passed = f.base + uint64(f.next)
	f.ended, f.passing, f.endedAt, f.blockedSince = true, false, now, 0
	f.endSlowWait(now)
	f.endStamp = stamp(now)
	for _, id := range c.snapshotIDs(f) {
		var mac [6]byte
		if m, ok := c.member(id); ok {
			mac = m.MAC
		}
		f.receiver(id, mac).snap = true
	}
	for _, r := range f.rcv {
		if r.state == frame.FileReceiving && r.top < f.blocks {
			r.todo = append(r.todo, frame.Range{First: r.top, Last: f.blocks - 1})
			if len(r.todo) == 1 {
				r.ti, r.cur = 0, r.top
			}
		}
	}
	f.endAt, f.endEvery = now, c.clamp(2*c.srtt)
	c.judge(now, f)
	c.sendEnd(now, f)
}

// hashRest ends the hash of a file whose pass hashed it: the blocks the
// pass read in order are in it; any other (none, unless the pass skipped
// one) are read now. meta.Hash is the file's hash from then on.
func (c *Core) hashRest(f *outFile) error {
	if err := c.hashTo(f, f.blocks); err != nil {
		return err
	}
	f.meta.Hash = [frame.FileHashLen]byte(f.h.Sum(nil))
	f.h = nil
	return nil
}

// judge reports f's verdict once every receiver of its snapshot is done
// or failed.
func (c *Core) judge(now Time, f *outFile) {
	if !f.ended || f.judged {
		return
	}
	var done []frame.MemberID
	var missing []Miss
	for _, r := range f.rcv {
		if !r.snap {
			continue
		}
		switch r.state {
		case frame.FileDone:
			done = append(done, r.id)
		case frame.FileFailed:
			missing = append(missing, Miss{Member: r.id, Cause: r.cause, Held: r.held, Blocks: f.blocks})
		default:
			return
		}
	}
	f.judged, f.judgedAt = true, now
	c.stats.FilesSent++
	c.report(Report{Kind: Verdict, At: now, Meta: f.meta, Done: done, Missing: missing})
	c.maybeLeft(now)
}

// close closes f: its source is released, and a later report on it gets
// FileGone (§III.E).
func (c *Core) close(f *outFile) {
	i := slices.Index(c.open, f)
	if i < 0 {
		return
	}
	c.open = slices.Delete(c.open, i, i+1)
	if f.passing {
		c.passed = f.base + uint64(f.next) // aborted mid-pass
	}
	c.freeAhead(f)
	f.src.Close()
}

// abort gives f up after its source failed: FileGone to the group, and
// a verdict naming every receiver.
func (c *Core) abort(now Time, f *outFile, err error) {
	c.stats.FilesAborted++
	c.aborted[f.meta.ID] = frame.FileAborted
	c.send(c.cfg.Dst, 0, 0, &frame.FileGoneBody{ID: f.meta.ID, Reason: frame.FileAborted})
	if !f.judged {
		f.judged = true
		c.report(Report{Kind: Verdict, At: now, Meta: f.meta, Missing: f.allMissing(c, CauseAborted),
			Err: fmt.Errorf("files: reading %q: %w", f.meta.Name, err)})
	}
	c.close(f)
	c.maybeLeft(now)
}

func (c *Core) sendOffer(now Time, f *outFile, dst [6]byte, flags frame.Flags) {
	c.stats.OffersSent++
	c.send(dst, 0, flags, &frame.FileOfferBody{ID: f.meta.ID, Size: f.meta.Size, BlockSize: f.meta.BlockSize,
		Stamp: stamp(now), Hash: f.offerHash, Name: []byte(f.meta.Name), Alg: f.meta.HashAlg})
}

// sendEnd sends f's FileEnd (IBRMP's EOF, sent until the file closes so
// that a receiver that lost the pass's tail, or joined late, learns it
// ended) and schedules the next: its interval doubles from 2·srtt up to
// MaxTimer while members are awaited, up to Announce after the verdict.
func (c *Core) sendEnd(now Time, f *outFile) {
	var awaited []frame.MemberID
	room := (frame.MaxPayload(c.cfg.MTU, 0, 0) - 18 - frame.FileHashLen) / 2
	for _, r := range f.rcv {
		if r.snap && r.state != frame.FileDone && r.state != frame.FileFailed && len(awaited) < room {
			awaited = append(awaited, r.id)
		}
	}
	c.stats.EndsSent++
	e := &frame.FileEndBody{ID: f.meta.ID, Blocks: f.blocks, SRTT: uint32(c.srtt / Microsecond), Stamp: stamp(now), Awaited: awaited}
	if f.offerHash == ([frame.FileHashLen]byte{}) {
		e.Hash = f.meta.Hash // the offer left it out
	}
	c.send(c.cfg.Dst, 0, 0, e)
	limit := c.cfg.MaxTimer
	if f.judged {
		limit = c.cfg.Announce
	}
	f.endAt = now.Add(f.endEvery)
	f.endEvery = min(2*f.endEvery, limit)
}

// pump is the pacer (§III.C, and where this does better than IBRMP: one
// loop for the pass, the repairs and the probes). It sends while the
// token bucket holds a frame: repairs first when the pass is blocked or
// over, or while they are within their share of the pass; else the next
// block of the pass, while the window allows it.
func (c *Core) pump(now Time) {
	c.paceAt = 0
	cost := int64(c.frameBytes())
	if elapsed := min(now.Sub(c.refill), Second); elapsed > 0 {
		// Whole bytes only: the remainder of the time stays for the next
		// refill, so frequent steps do not starve the bucket.
		add := int64(elapsed) * c.cfg.Rate / int64(Second)
		c.tokens += add
		c.refill = c.refill.Add(Duration(add * int64(Second) / c.cfg.Rate))
	}
	if limit := int64(c.cfg.Burst) * cost; c.tokens >= limit {
		c.tokens, c.refill = limit, now
	}
	shareCap := int64(c.cfg.Burst) * cost
	c.winFor = nil // reports may have come: count the window again
	defer func() {
		c.winFor = nil
		c.hashSoon(now)
	}()
	skipped := false
	for {
		pass := c.startPass(now)
		if pass != nil && pass.allHold {
			if !skipped {
				skipped = true // one chunk of hashing per step
				if c.skipPass(now, pass) {
					continue // the pass ended (or the file was aborted)
				}
			}
			pass = nil // hashing: only repairs of other files meanwhile
		}
		open := pass != nil && c.windowOpen(now, pass)
		if c.tokens < cost {
			if open || c.repairsWaiting() || pass != nil && pass.probeDue(c.rto()) != 0 && pass.probeDue(c.rto()) <= now {
				c.paceAt = c.refill.Add(Duration(((cost-c.tokens)*int64(Second) + c.cfg.Rate - 1) / c.cfg.Rate))
				c.paceAt = max(c.paceAt, now+1)
			}
			return
		}
		if (!open || c.share > 0 || c.cfg.RepairPercent == 100) && c.repairOne(now, open) {
			continue
		}
		if open {
			n := c.sendBlock(now, pass, pass.next, c.cfg.Dst, 0)
			if n == 0 {
				continue // the file was aborted
			}
			pass.mark(now)
			pass.next++
			c.stats.BlocksSent++
			if p := int64(c.cfg.RepairPercent); p < 100 {
				c.share = min(c.share+int64(n)*p/(100-p), shareCap)
			}
			if pass.next == pass.blocks {
				c.endPass(now, pass)
			}
			continue
		}
		if pass != nil {
			c.probe(now, pass)
		}
		return
	}
}

// windowOpen reports whether f's pass may send its next block: it may
// run Window blocks ahead of the ⌈n/2⌉-th most advanced of the receivers
// heard recently (the median, not the slowest: §III.C's credits without
// tying everyone to the slowest receiver), and Window blocks ahead of the
// slowest of them while the pass has waited for receivers behind the
// median for at most SlowPercent of its time besides (slowWaitLeft). A
// receiver that processes frames slower than the others (a busy CPU, a
// slow disk) then takes the pass from its ring as the others do, instead
// of overflowing its ring and having every block it lost repaired; one
// that stays slow holds the others back by SlowPercent at most, and then
// catches up by repair.
//
// The window spans files: blocks are counted over the sender's passes
// (outFile.base), and a receiver not heard on f yet counts at its
// position in the files before (positions). A file shorter than the
// window would otherwise go out whole, whatever its receivers hold, and
// a run of them fill the link's queues without bound, until a
// receiver's first report on a file came after its pass ended (issue
// 20, fig. 5b).
func (c *Core) windowOpen(now Time, f *outFile) bool {
	if c.winFor != f {
		c.positions(now, f)
	}
	tops := c.winTop
	if len(tops) == 0 {
		f.blockedSince = 0
		f.endSlowWait(now)
		return true
	}
	q := tops[len(tops)-(len(tops)+1)/2]
	next, window := f.base+uint64(f.next), uint64(c.cfg.Window)
	switch {
	case next >= q+window:
		f.endSlowWait(now) // the median holds the pass: no slow wait
	case next >= tops[0]+window && c.slowWaitLeft(now, f) > 0:
		if f.slowSince == 0 {
			f.slowSince = now
		}
	default:
		f.endSlowWait(now)
		f.blockedSince = 0
		return true
	}
	if f.blockedSince == 0 {
		f.blockedSince = now
		c.stats.WindowStalls++
	}
	return false
}

// memberPos is a receiver's position in the sender's count of pass
// blocks (positions); set: f's record of it decides (it was heard on
// f); ok: it counts.
type memberPos struct {
	id      frame.MemberID
	pos     uint64
	set, ok bool
}

// positions counts, for f's pass, the positions of the receivers the
// window waits for into c.winTop, sorted, once per pump call (a report
// steps the pump). A receiver heard on f recently counts at its top in
// f, unless it asks for f's offer (it lost it, or waits for room:
// MaxReceiving; it takes no block of the pass, is repaired all it lacks
// once it takes the offer, and does not hold the pass back meanwhile)
// or failed. One not heard on f yet, a receiver of f, counts at its
// furthest position in the other open files heard recently: its report
// on f is still on its way, behind the blocks in the link's queues.
func (c *Core) positions(now Time, f *outFile) {
	ps := c.winPos[:0]
	recent := func(r *receiver) bool { return r.heard != 0 && now.Sub(r.heard) < c.cfg.FailureTimeout }
	for _, r := range f.rcv { // by id: ps stays sorted
		if r.heard == 0 {
			continue
		}
		p := memberPos{id: r.id, set: true}
		if recent(r) && r.state != frame.FileFailed && r.state != frame.FileNeedOffer {
			p.pos, p.ok = f.base+uint64(r.top), true
			if r.state == frame.FileDone {
				p.pos = f.base + uint64(f.blocks)
			}
		}
		ps = append(ps, p)
	}
	for _, g := range c.open {
		if g == f {
			continue
		}
		for _, r := range g.rcv {
			if !recent(r) || r.state != frame.FileReceiving && r.state != frame.FileDone {
				continue
			}
			if _, ok := slices.BinarySearch(f.to, r.id); f.to != nil && !ok {
				continue // not a receiver of f
			}
			top := r.top
			if r.state == frame.FileDone {
				top = g.blocks
			}
			pos := g.base + uint64(min(top, g.next))
			i, ok := slices.BinarySearchFunc(ps, r.id, func(p memberPos, id frame.MemberID) int { return int(p.id) - int(id) })
			switch {
			case !ok:
				ps = slices.Insert(ps, i, memberPos{id: r.id, pos: pos, ok: true})
			case !ps[i].set:
				ps[i].pos = max(ps[i].pos, pos)
			}
		}
	}
	tops := c.winTop[:0]
	for _, p := range ps {
		if p.ok {
			tops = append(tops, p.pos)
		}
	}
	slices.Sort(tops)
	c.winPos, c.winTop, c.winFor = ps[:0], tops, f
}

// slowWaitLeft is how much longer f's pass may wait for receivers behind
// the median: SlowPercent of the pass's time not spent so, plus a
// MaxTimer, less the time spent so.
func (c *Core) slowWaitLeft(now Time, f *outFile) Duration {
	held := f.slowHeld
	if f.slowSince != 0 {
		held += now.Sub(f.slowSince)
	}
	own := now.Sub(f.passAt) - held
	return Duration(int64(own)*int64(c.cfg.SlowPercent)/100) + c.cfg.MaxTimer - held
}

// slowWaitEnds is when f's wait for a receiver behind the median runs out
// of its share (0: it does not wait): the pass's own time does not grow
// while it waits, so the share is fixed.
func (c *Core) slowWaitEnds(f *outFile) Time {
	if f.slowSince == 0 {
		return 0
	}
	return f.slowSince.Add(c.slowWaitLeft(f.slowSince, f))
}

// endSlowWait ends f's wait for a receiver behind the median, if any.
func (f *outFile) endSlowWait(now Time) {
	if f.slowSince != 0 {
		f.slowHeld += now.Sub(f.slowSince)
		f.slowSince = 0
	}
}

// probe sends the pass's last block again to the group when the window
// has been closed for a repair timeout: the receivers that lost the
// blocks after their reported position learn that they exist (a tail
// loss probe), report them missing, and the window opens.
func (c *Core) probe(now Time, f *outFile) {
	if d := f.probeDue(c.rto()); d == 0 || d > now {
		return
	}
	f.probeAt = now
	if c.sendBlock(now, f, f.next-1, c.cfg.Dst, frame.FlagRetransmit) > 0 {
		c.stats.BlocksRepaired++
	}
}

// probeDue is when f's next window probe is due (0: none).
func (f *outFile) probeDue(rto Duration) Time {
	if f.blockedSince == 0 || f.next == 0 {
		return 0
	}
	return max(f.blockedSince, f.probeAt).Add(rto)
}

func (c *Core) repairsWaiting() bool {
	for _, f := range c.open {
		for _, r := range f.rcv {
			if r.state == frame.FileReceiving && r.credit > 0 && r.ti < len(r.todo) {
				return true
			}
		}
	}
	return false
}

// repairOne sends one repair, if any is due: the lowest block the next
// receiver in turn lacks, not sent to it within a repair timeout, within
// its credit. A block that other receivers lack too goes to the group
// once; else to the receiver's MAC alone.
func (c *Core) repairOne(now Time, passing bool) bool {
	rto := c.repairTimers()
	for _, f := range c.open {
		n := len(f.rcv)
		for k := range n {
			r := f.rcv[(c.rotate+k)%n]
			b, ok := r.nextRepair(now, f, rto)
			if !ok {
				continue
			}
			if s, ok := r.sent[b]; ok {
				c.stats.RepairsAgain++
				if s.at.Add(rto.reorder) >= r.rack[s.path()] {
					c.stats.RepairsTimedOut++
				}
			}
			to := append(c.scratchTo[:0], r)
			defer func() { c.scratchTo = to[:0] }()
			for _, q := range f.rcv {
				if q != r && q.wants(now, f, b, rto) {
					to = append(to, q)
				}
			}
			dst := r.mac
			if len(to) > 1 || dst == ([6]byte{}) {
				dst = c.cfg.Dst
			}
			sz := c.sendBlock(now, f, b, dst, frame.FlagRetransmit)
			if sz == 0 {
				return true // aborted
			}
			for _, q := range to {
				_, again := q.sent[b]
				q.sent[b] = sentAt{at: now, again: again, alone: dst != c.cfg.Dst}
				q.credit--
			}
			if passing {
				c.share -= int64(sz)
			}
			c.rotate++
			c.stats.BlocksRepaired++
			if len(to) > 1 {
				c.stats.RepairsToGroup++
			}
			return true
		}
	}
	return false
}

// nextRepair is the next block of r's todo to send it, advancing its
// scan.
func (r *receiver) nextRepair(now Time, f *outFile, rto repairTimers) (uint32, bool) {
	if r.state != frame.FileReceiving || r.credit <= 0 {
		return 0, false
	}
	for r.ti < len(r.todo) {
		rg := r.todo[r.ti]
		if r.cur < rg.First {
			r.cur = rg.First
		}
		for ; r.cur <= rg.Last; r.cur++ {
			b := r.cur
			if b >= f.blocks || !f.ended && b >= f.next {
				r.ti = len(r.todo) // not multicast yet: nothing above it is missing
				return 0, false
			}
			if !r.due(now, f, b, rto) {
				continue
			}
			r.cur++
			if r.cur > rg.Last {
				r.ti++
			}
			return b, true
		}
		r.ti++
	}
	return 0, false
}

// wants reports whether r lacks b, and it is due to r (a group repair
// serves it too).
func (r *receiver) wants(now Time, f *outFile, b uint32, rto repairTimers) bool {
	if r.state != frame.FileReceiving || r.credit <= 0 {
		return false
	}
	_, ok := slices.BinarySearchFunc(r.todo, b, func(rg frame.Range, b uint32) int {
		switch {
		case rg.Last < b:
			return -1
		case rg.First > b:
			return 1
		}
		return 0
	})
	return ok && r.due(now, f, b, rto)
}

// sendBlock sends block b of f to dst, read by the source straight into
// the frame (frame.Placed; blockFrame); it returns the frame's length,
// or 0 if the source failed and the file was aborted.
func (c *Core) sendBlock(now Time, f *outFile, b uint32, dst [6]byte, flags frame.Flags) int {
	h := c.header(b, flags)
	buf, err := c.blockFrame(f, b, dst, &h, f.passing && flags == 0 && dst == c.cfg.Dst && b == f.next)
	if err != nil {
		c.abort(now, f, err)
		return 0
	}
	n := f.meta.BlockLen(b)
	at := len(buf) + frame.PrefixLen(&h)
	if f.h != nil && b == f.hashed {
		// The pass reads the file in order: hash it as it goes.
		f.h.Write(buf[at+frame.FileDataHead : at+frame.FileDataHead+n])
		f.hashed++
	}
	c.placed = frame.Placed{T: frame.FileData, N: frame.FileDataHead + n}
	c.hdr = h
	buf, err = frame.Append(buf, &c.hdr, &c.placed)
	if err != nil {
		panic("files: encoding a FileData frame: " + err.Error())
	}
	c.frames = append(c.frames, buf)
	c.tokens -= int64(len(buf))
	c.stats.BytesSent += uint64(len(buf))
	return len(buf)
}
