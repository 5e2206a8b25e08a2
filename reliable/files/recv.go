package files

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
)

// The receiver's side (IBRMP Table I and §III.B.2): a transfer starts at
// whichever of its frames arrives first, opens the sink when the offer is
// known, writes blocks, reports its state to the sender, and ends
// received (hash checked, committed) or incomplete.

type inKey struct {
	sender frame.MemberID
	inc    uint32
	id     uint32
}

func (a inKey) cmp(b inKey) int {
	switch {
	case a.sender != b.sender:
		return int(a.sender) - int(b.sender)
	case a.inc != b.inc:
		return cmpU32(a.inc, b.inc)
	}
	return cmpU32(a.id, b.id)
}

// Receiver states of a transfer.
type inState uint8

const (
	needOffer inState = iota + 1 // known by its id only: BOF_REQUEST
	receiving
	received
	failed   // this member gave it up; told the sender if the sender can act on it
	declined // not taken, and the sender told why: the sink declined it (CauseDeclined), or its offer is beyond one of this member's limits (Cause.Limit)
)

// transfer is one file this member receives.
type transfer struct {
	key     inKey
	mac     [6]byte // the sender's
	state   inState
	cause   Cause
	meta    Meta
	set     blockSet
	file    SinkFile
	summed  SummedSinkFile // file, where it takes blocks' CRCs (nil: not)
	shift   frame.CRCShift // over a whole block, for summed
	top     uint32         // one past the highest block seen sent (the count once ended)
	ended   bool
	retried bool // fetched again after a hash mismatch
	// fromSink: the sink held every block when the transfer opened (no
	// block came in it). candidate: so, for an offer without a hash: the
	// file stored under the name is checked against FileEnd's hash, and
	// on a mismatch fetched whole without spending the retry; replaced:
	// that happened.
	fromSink, candidate, replaced bool
	// offerHash is the hash the offer carried (the sink keys partial
	// copies by it); zeros mean the sender hashes the file as it sends it
	// and FileEnd carries the hash, kept in endHash until the offer is
	// here, then in meta.Hash.
	offerHash, endHash [frame.FileHashLen]byte

	heard, arrived Time // the sender's last frame about it; the last new block
	echo           uint32
	echoAt         Time
	srtt           Duration // the sender's, from FileEnd
	fresh          int      // blocks since the last report
	reportAt       Time     // a report due (0: none)
	reported       Time
	retry          Duration // the silence after which it reports again
	named          bool     // the last FileEnd awaits this member
	// waiting: its offer came while MaxReceiving files were being
	// received; it is in Core.waiting, unopened, until one ends.
	waiting bool
}

func (c *Core) transfer(k inKey) *transfer {
	i, ok := slices.BinarySearchFunc(c.in, k, func(t *transfer, k inKey) int { return t.key.cmp(k) })
	if !ok {
		return nil
	}
	return c.in[i]
}

func (c *Core) newTransfer(now Time, k inKey, mac [6]byte) *transfer {
	t := &transfer{key: k, mac: mac, state: needOffer, heard: now, arrived: now, srtt: c.cfg.InitialRTT,
		meta: Meta{Sender: k.sender, Incarnation: k.inc, ID: k.id}}
	i, _ := slices.BinarySearchFunc(c.in, k, func(t *transfer, k inKey) int { return t.key.cmp(k) })
	c.in = slices.Insert(c.in, i, t)
	return t
}

func (t *transfer) active() bool { return t.state == needOffer || t.state == receiving }

// stepReceiver takes a sender's frame (Table I).
func (c *Core) stepReceiver(now Time, src [6]byte, v frame.View) error {
	k := inKey{v.Sender(), v.Incarnation(), v.FileID()}
	defer c.admit(now)
	c.senderRestarted(now, k.sender, k.inc)
	t := c.transfer(k)
	if t == nil {
		if c.cfg.Sink == nil || v.Type() == frame.FileGone {
			return nil
		}
		t = c.newTransfer(now, k, src)
	}
	t.mac, t.heard = src, now
	switch v.Type() {
	case frame.FileOffer:
		o := v.FileOffer()
		t.echo, t.echoAt = o.Stamp, now
		if t.state == needOffer && !t.waiting {
			return c.accept(now, t, &o)
		}
	case frame.FileData:
		return c.block(now, t, v)
	case frame.FileEnd:
		_, blocks, srtt, st := v.FileEnd()
		if t.state != needOffer && t.state != declined && blocks != t.meta.Blocks() {
			c.stats.BadFrames++
			return fmt.Errorf("files: FileEnd of %v says %d blocks, its offer %d", t.meta, blocks, t.meta.Blocks())
		}
		t.echo, t.echoAt, t.ended = st, now, true
		if srtt > 0 {
			t.srtt = Duration(srtt) * Microsecond
		}
		t.top = blocks
		if h, ok := v.FileEndHash(); ok {
			t.endHash = h
			if t.state == receiving && t.meta.Hash == ([frame.FileHashLen]byte{}) {
				t.meta.Hash = h
				if t.set.complete() {
					c.finish(now, t) // every block was here, the hash was not
				}
			}
			if t.waiting && t.offerHash == ([frame.FileHashLen]byte{}) {
				c.judgeHeld(now, t) // the hash that tells whether it is held
			}
		}
		t.named = false
		for i, ml := 0, v.FileAwaited(); i < ml.Len(); i++ {
			if ml.At(i) == c.cfg.Self {
				t.named = true
			}
		}
		// Answer at once what the sender awaits, and a file not complete
		// here (a ghost fetches too, §III.D); not faster than MinTimer.
		if (t.active() || t.named) && (t.reported == 0 || now.Sub(t.reported) >= c.cfg.MinTimer) {
			c.sendReport(now, t)
		}
	case frame.FileGone:
		if t.active() {
			c.fail(now, t, Cause(v.FileGone().Reason), true, false)
		}
	}
	return nil
}

// senderRestarted ends the transfers of an earlier incarnation of a
// sender heard in another: that run is dead, and its partial copies are
// kept for the new run's offers of the same files.
func (c *Core) senderRestarted(now Time, sender frame.MemberID, inc uint32) {
	if last, ok := c.incs[sender]; ok && last == inc {
		return
	}
	c.incs[sender] = inc
	for _, t := range c.in {
		if t.key.sender == sender && t.key.inc != inc && t.active() {
			c.fail(now, t, CauseRestarted, true, false)
		}
	}
}

// accept opens the sink for a transfer whose offer arrived: it resumes
// from the blocks the sink holds (verified by their hashes).
func (c *Core) accept(now Time, t *transfer, o *frame.FileOfferBody) error {
	t.meta = Meta{Sender: t.key.sender, Incarnation: t.key.inc, ID: o.ID, Name: string(o.Name), Size: o.Size, BlockSize: o.BlockSize, Hash: o.Hash, HashAlg: o.Alg}
	if t.offerHash = o.Hash; o.Hash == ([frame.FileHashLen]byte{}) {
		t.meta.Hash = t.endHash // zeros until FileEnd brings it
	}
	if !o.Alg.Known() {
		// A file it could not verify is never stored: refused, and the
		// sender told why.
		c.fail(now, t, CauseHashUnknown, false, true)
		return fmt.Errorf("files: %v is hashed with %v, an algorithm this build does not know (upgrade it)", t.meta, o.Alg)
	}
	if o.Size > 0 && uint64(o.BlockSize) > uint64(c.cfg.MTU) {
		err := fmt.Errorf("files: %v has blocks of %d bytes, more than the MTU %d carries (refused, the sender told)", t.meta, o.BlockSize, c.cfg.MTU)
		c.refuse(now, t, CauseOverMTU, err)
		return err
	}
	if n := o.Blocks(); n > uint64(c.cfg.MaxBlocks) {
		err := fmt.Errorf("files: %v has %d blocks, more than MaxBlocks %d (refused, the sender told)", t.meta, n, c.cfg.MaxBlocks)
		c.refuse(now, t, CauseTooLarge, err)
		return err
	}
	if c.cfg.MaxSize > 0 && o.Size > c.cfg.MaxSize {
		err := fmt.Errorf("files: %v is larger than MaxSize, %d bytes (refused, the sender told)", t.meta, c.cfg.MaxSize)
		c.refuse(now, t, CauseTooLarge, err)
		return err
	}
	// The offers waiting open first, oldest first: this step may have
	// freed a slot (a sender heard in a new incarnation ends its old
	// one's transfers before its new offer comes here), and a slot
	// is theirs before a new offer's.
	c.admit(now)
	if c.receivingFull() || len(c.waiting) > 0 {
		if c.judgeHeld(now, t) {
			return nil
		}
		// Taken once a file being received ends (admit); meanwhile it
		// asks for the offer, as one whose offer was lost, so that its
		// sender keeps it open and waits for it.
		if !t.waiting {
			t.waiting = true
			c.waiting = append(c.waiting, t)
			c.stats.FilesDeferred++
			c.sendReport(now, t)
		}
		return nil
	}
	return c.openTransfer(now, t)
}

// judgeHeld judges at once a transfer whose offer came while
// MaxReceiving files are being received, if the sink holds its file
// whole (HoldingSink): it needs no block, so it waits for no slot. The
// copy opens with every block held, the hash is checked, and the file is
// reported done (or refused, declined, failed: judged too); it closes in
// this step. It reports whether t was judged. The hash it asks about is
// the offer's, or FileEnd's for an offer without one (a candidate is
// judged once FileEnd has come). A copy that turns out to lack a block
// (torn since the sink looked) is closed again, kept, and t waits.
func (c *Core) judgeHeld(now Time, t *transfer) bool {
	hs, ok := c.cfg.Sink.(HoldingSink)
	if !ok || t.state != needOffer {
		return false
	}
	m := t.meta
	if m.Hash = t.offerHash; m.Hash == ([frame.FileHashLen]byte{}) {
		m.Hash = t.endHash
	}
	if m.Hash == ([frame.FileHashLen]byte{}) || m.Blocks() == 0 || !hs.Holds(m) {
		return false
	}
	t.meta.Hash = m.Hash
	if err := c.openSink(now, t, t.offerHash); err != nil {
		return true // refused, declined or failed, and said so
	}
	if !t.set.complete() {
		t.file.Abort(true)
		t.file, t.summed = nil, nil
		c.opened--
		t.state = needOffer
		if t.set.held > 0 {
			c.stats.Resumed-- // counted when it opens for good
		}
		return false
	}
	t.fromSink, t.top = true, t.set.n
	t.candidate = t.offerHash == ([frame.FileHashLen]byte{})
	waiting := t.waiting
	t.waiting = false
	c.finish(now, t)
	if t.state == receiving {
		// Its hash did not match, and finish opened it again to fetch
		// the file: that needs a slot, which it waits for like any
		// other (the copy, emptied or kept as finish left it, is kept).
		t.file.Abort(true)
		t.file, t.summed = nil, nil
		c.opened--
		t.state, t.waiting = needOffer, waiting
		if waiting {
			// finish told the sender it is receiving: it waits (accept
			// says so of one it queues).
			c.sendReport(now, t)
		}
		return false
	}
	return true
}

// receivingFull: MaxReceiving transfers hold their sink's copy open.
func (c *Core) receivingFull() bool { return c.opened >= c.cfg.MaxReceiving }

// admit opens the waiting transfers' copies, oldest first (in the order
// their offers first came, whatever order they are sent again in), while
// fewer than MaxReceiving are open; one that ended meanwhile (its sender
// silent, restarted, or gone; judged held) leaves the queue. It runs
// after every step and tick, and before an offer is accepted.
func (c *Core) admit(now Time) {
	for len(c.waiting) > 0 {
		t := c.waiting[0]
		if t.state == needOffer && !c.receivingFull() {
			t.waiting = false
			c.waiting = c.waiting[1:]
			c.openTransfer(now, t)
			continue
		}
		if t.state == needOffer {
			return
		}
		t.waiting = false
		c.waiting = c.waiting[1:]
	}
}

// openTransfer opens the sink for t, its offer accepted: it resumes
// from the blocks the sink holds (verified by their hashes).
func (c *Core) openTransfer(now Time, t *transfer) error {
	if t.offerHash == ([frame.FileHashLen]byte{}) {
		t.meta.Hash = t.endHash // a FileEnd that came while it waited
	}
	if err := c.openSink(now, t, t.offerHash); err != nil {
		return nil
	}
	if t.set.complete() && t.set.n > 0 {
		t.fromSink = true
		// An offer without a hash: the sink's copy is a candidate until
		// FileEnd's hash is checked. It needs no block: the blocks of
		// the pass that arrive anyway are dropped as duplicates.
		t.candidate = t.offerHash == ([frame.FileHashLen]byte{})
		t.top = t.set.n
	}
	if t.set.complete() {
		c.finish(now, t)
		if t.state != receiving {
			return nil
		}
	}
	c.sendReport(now, t)
	return nil
}

// openSink opens (or resumes) t's partial copy, under hash (the offer's,
// or FileEnd's once the copy of an offer without one did not match).
func (c *Core) openSink(now Time, t *transfer, hash [frame.FileHashLen]byte) error {
	m := t.meta
	m.Hash = hash
	f, held, err := c.cfg.Sink.Open(m)
	if errors.Is(err, ErrDeclined) {
		// Said to the sender now, so that its verdict does not wait out
		// the failure timeout for a member that is alive and said no;
		// again to each FileEnd that still awaits this member, in case
		// this report is lost (stepReceiver).
		t.state, t.cause = declined, CauseDeclined
		c.stats.FilesDeclined++
		c.sendReport(now, t)
		return err
	}
	if cause, ok := limitOf(err); ok {
		c.refuse(now, t, cause, err)
		return err
	}
	if err != nil {
		c.fail(now, t, CauseStorage, false, true)
		return err
	}
	t.file, t.state = f, receiving
	c.opened++
	t.summed = nil
	if s, ok := f.(SummedSinkFile); ok && !c.skipCRC {
		t.summed, t.shift = s, frame.ShiftFor(int(m.BlockSize))
	}
	t.set = newBlockSet(t.meta.Blocks())
	for _, r := range held {
		for b := r.First; b <= r.Last && b < t.set.n; b++ {
			t.set.add(b)
		}
	}
	if t.set.held > 0 {
		c.stats.Resumed++
	}
	t.top = min(t.top, t.set.n)
	if t.ended {
		t.top = t.set.n
	}
	return nil
}

// limitOf is the limit a sink's error names (ErrNoSpace,
// ErrNameTooLong, ErrTooBigForFS), or ErrBadName's rule.
func limitOf(err error) (Cause, bool) {
	switch {
	case errors.Is(err, ErrNoSpace):
		return CauseNoSpace, true
	case errors.Is(err, ErrNameTooLong):
		return CauseNameTooLong, true
	case errors.Is(err, ErrTooBigForFS):
		return CauseTooBigForFS, true
	case errors.Is(err, ErrBadName):
		return CauseBadName, true
	}
	return 0, false
}

// refuse ends a transfer whose offer is beyond one of this member's
// limits, cause naming which: no block is taken, and the sender is told
// now, so that its verdict does not wait out the failure timeout for a
// member that is alive and cannot take the file; again to each FileEnd
// that still awaits this member (stepReceiver). Its own driver gets a
// Refused report, detail its error: the core's, or the sink's.
func (c *Core) refuse(now Time, t *transfer, cause Cause, detail error) {
	if t.file != nil {
		t.file.Abort(true)
		t.file, t.summed = nil, nil
		c.opened--
	}
	t.state, t.cause, t.reportAt = declined, cause, 0
	c.stats.FilesRefused++
	c.report(Report{Kind: Refused, At: now, Meta: t.meta, Cause: cause, Err: detail})
	c.sendReport(now, t)
}

// block takes one FileData frame.
func (c *Core) block(now Time, t *transfer, v frame.View) error {
	b := v.Seq()
	switch t.state {
	case needOffer:
		// The offer was lost (Table I, "Multicast DATA"): ask for it; the
		// block is repaired later. One waiting for room (MaxReceiving)
		// asked when its offer came, and asks again at its retry timer,
		// not at each block of the pass.
		c.stats.Dropped++
		t.top = max(t.top, b+1)
		if t.reportAt == 0 && !t.waiting {
			t.reportAt = now
		}
		return nil
	case receiving:
	default:
		c.stats.Duplicates++
		return nil
	}
	data := v.FileBlock()
	if b >= t.set.n || len(data) != t.meta.BlockLen(b) {
		c.stats.BadFrames++
		return fmt.Errorf("files: block %d of %d bytes does not fit %v (%d blocks of %d)", b, len(data), t.meta, t.set.n, t.meta.BlockSize)
	}
	if b >= t.top {
		if b > t.top && t.reportAt == 0 {
			// A gap: report it once reordering had its chance.
			t.reportAt = now.Add(c.clamp(t.srtt / 2))
		}
		t.top = b + 1
	}
	if t.set.has(b) {
		c.stats.Duplicates++
		return nil
	}
	if err := c.write(t, b, data, v); err != nil {
		c.fail(now, t, CauseStorage, false, true)
		return nil
	}
	t.set.add(b)
	c.stats.BlocksReceived++
	t.arrived, t.retry = now, 0
	t.fresh++
	if t.set.complete() {
		c.finish(now, t)
	} else if t.fresh >= c.cfg.StatusEvery {
		c.sendReport(now, t)
	}
	return nil
}

// write stores block b of t, data from FileData frame v, with its CRC-32C
// from v's where the sink takes it (SummedSinkFile).
func (c *Core) write(t *transfer, b uint32, data []byte, v frame.View) error {
	if t.summed == nil {
		return t.file.WriteBlock(b, data)
	}
	s := t.shift
	if len(data) != int(t.meta.BlockSize) {
		s = frame.ShiftFor(len(data)) // the file's last block
	}
	return t.summed.WriteBlockSum(b, data, v.SuffixCRC(s))
}

// finish checks a complete file's hash and commits it; a mismatch fetches
// every block once more, a second one fails the transfer. A file whose
// hash comes in FileEnd waits for it (FileEnd calls finish again).
func (c *Core) finish(now Time, t *transfer) {
	if t.meta.Hash == ([frame.FileHashLen]byte{}) {
		return
	}
	sum, err := t.file.Sum()
	if err != nil {
		c.fail(now, t, CauseStorage, false, true)
		return
	}
	if sum != t.meta.Hash {
		c.stats.HashMismatches++
		t.file.Abort(false)
		t.file, t.summed = nil, nil
		c.opened--
		t.fromSink = false
		if t.candidate {
			// The file stored under the name is another: fetch this
			// one. Not a transfer's fault, so not the retry.
			t.candidate, t.replaced = false, true
			c.stats.HeldMismatches++
		} else if t.retried {
			c.fail(now, t, CauseHash, false, true)
			return
		} else {
			t.retried = true
		}
		// An offer without a hash opens again under FileEnd's: not the
		// copy that did not match (that key is the offer's), and a
		// stored file of another hash does not match it; what that copy
		// holds was verified under that hash, so it is kept. An offer
		// with a hash opens the same key again, emptied: whatever it
		// resumed is suspect.
		again, keep := t.offerHash, false
		if again == ([frame.FileHashLen]byte{}) {
			again, keep = t.meta.Hash, true
		}
		if c.openSink(now, t, again) == nil {
			if !keep {
				t.set = newBlockSet(t.meta.Blocks())
			}
			if t.set.complete() {
				c.finish(now, t) // nothing to fetch
				return
			}
			c.sendReport(now, t)
		}
		return
	}
	if err := t.file.Commit(); err != nil {
		c.fail(now, t, CauseStorage, false, true)
		return
	}
	t.file, t.summed, t.state = nil, nil, received
	c.opened--
	c.stats.FilesReceived++
	if t.fromSink {
		c.stats.FilesHeld++
	}
	c.report(Report{Kind: Received, At: now, Meta: t.meta, Held: t.fromSink, Replaced: t.replaced})
	c.sendReport(now, t)
}

// fail ends a transfer incomplete; keep leaves the partial copy for a
// resume; tell reports the failure to the sender (which names this
// member in its verdict with the cause).
func (c *Core) fail(now Time, t *transfer, cause Cause, keep, tell bool) {
	if t.file != nil {
		t.file.Abort(keep)
		t.file, t.summed = nil, nil
		c.opened--
	}
	t.state, t.cause = failed, cause
	t.reportAt = 0
	c.stats.FilesIncomplete++
	c.report(Report{Kind: Incomplete, At: now, Meta: t.meta, Cause: cause, Replaced: t.replaced})
	if tell {
		c.sendReport(now, t)
	}
}

// sendReport sends t's state to its sender (FileStatus).
func (c *Core) sendReport(now Time, t *transfer) {
	st := frame.FileStatusBody{ID: t.key.id, Incarnation: t.key.inc, Credit: uint16(c.cfg.Credit)}
	switch t.state {
	case needOffer:
		st.State = frame.FileNeedOffer
	case receiving:
		st.State, st.Held, st.Top = frame.FileReceiving, t.set.held, min(t.top, t.set.n)
		st.Missing = t.set.missing(nil, st.Top, c.cfg.maxRanges)
	case received:
		st.State, st.Held, st.Top = frame.FileDone, t.set.n, t.set.n
	case failed:
		st.State, st.Reason = frame.FileFailed, frame.FileReason(t.cause)
		if t.cause > Cause(frame.FileReasonMax) { // a local cause: no reason on the wire
			return
		}
		st.Held, st.Top = t.set.held, t.set.n
	case declined:
		st.State, st.Reason = frame.FileFailed, frame.FileReason(t.cause)
	default:
		return
	}
	if t.echo != 0 {
		st.Echo, st.Delay = t.echo, uint32(now.Sub(t.echoAt)/Microsecond)
	}
	c.stats.ReportsSent++
	c.send(t.mac, c.reportNo, frame.FlagHashAlg, &st)
	c.reportNo++
	t.reported, t.reportAt, t.fresh = now, 0, 0
}

// retryAfter is how long an incomplete transfer waits, with nothing
// arriving, before it reports again: 4·srtt of its sender, doubling while
// nothing comes, within [MinTimer, MaxTimer].
func (c *Core) retryAfter(t *transfer) Duration {
	if t.retry == 0 {
		t.retry = c.clamp(4 * t.srtt)
	}
	return t.retry
}

// tickReceiver runs the receivers' timers: a due report, a report after
// silence, and the end of a transfer whose sender went silent.
func (c *Core) tickReceiver(now Time) {
	for i := 0; i < len(c.in); i++ {
		t := c.in[i]
		if !t.active() {
			if now.Sub(t.heard) >= 2*c.cfg.FileTimeout+c.cfg.FailureTimeout {
				// Its sender closed it long ago and says nothing more.
				c.in = slices.Delete(c.in, i, i+1)
				i--
			}
			continue
		}
		if now.Sub(t.heard) >= c.cfg.FailureTimeout {
			c.fail(now, t, CauseSilent, true, false)
			continue
		}
		if t.reportAt != 0 && now >= t.reportAt {
			c.sendReport(now, t)
		}
		if now.Sub(max(t.arrived, t.reported)) >= c.retryAfter(t) {
			c.sendReport(now, t)
			t.retry = min(2*t.retry, c.cfg.MaxTimer)
		}
	}
	c.admit(now)
}

func (c *Core) receiverDeadlines(at func(Time)) {
	for _, t := range c.in {
		if !t.active() {
			continue
		}
		at(t.heard.Add(c.cfg.FailureTimeout))
		at(t.reportAt)
		at(max(t.arrived, t.reported).Add(c.retryAfter(t)))
	}
}
