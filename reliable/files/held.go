package files

import (
	"github.com/rbcast/rbcast/frame"
)

// A pass that every receiver holds already (docs/protocols.md, "Files
// (IBRMP)", "A file stored already"): once every member of the snapshot
// the pass would take now has reported every block held, and no other
// receiver heard from lacks one, the pass sends no more blocks. It only
// reads and hashes the rest of the file (an offer without a hash), a
// chunk per step so that the loop goes on, then ends as any pass does:
// the receivers check FileEnd's hash, and one whose stored copy turns
// out to be another file fetches it by repair, which reads any block
// from the source. A member that joins, or a receiver that reports a
// block missing, ends the skip: the pass goes on from where it stopped.

// hashChunk is how many bytes a skipped pass hashes per step.
const hashChunk = 4 << 20

// checkHold sets f.allHold from what the receivers reported.
func (c *Core) checkHold(f *outFile) {
	f.allHold = false
	if f.ended || f.blocks == 0 {
		return
	}
	ids := c.snapshotIDs(f)
	if len(ids) == 0 {
		return // no one to hold it: the pass is for whoever listens
	}
	for _, id := range ids {
		if r := f.find(id); r == nil || !r.holds(f) {
			return // not heard from (its report may be lost): not held
		}
	}
	for _, r := range f.rcv {
		if r.heard != 0 && !r.holds(f) {
			return // a ghost or a member outside To that lacks blocks
		}
	}
	f.allHold = true
}

// find returns f's record of member id, or nil.
func (f *outFile) find(id frame.MemberID) *receiver {
	for _, r := range f.rcv {
		if r.id == id {
			return r
		}
	}
	return nil
}

// holds reports whether r's last report says it needs no block of f's
// pass: it holds every block (a stored copy, or received), or it gave
// the file up for a reason of its own.
func (r *receiver) holds(f *outFile) bool {
	if r.heard == 0 {
		return false
	}
	switch r.state {
	case frame.FileDone:
		return true
	case frame.FileReceiving:
		return r.held >= f.blocks
	case frame.FileFailed:
		return r.cause != CauseSilent
	}
	return false
}

// skipPass runs f's pass while every receiver holds it: it hashes the
// next chunk of the file (an offer without a hash), sends the offer
// again to the group every MaxTimer (the receivers wait for FileEnd and
// would take a sender silent for their failure timeout as gone), and
// ends the pass once the hash is whole. It reports whether the pass
// ended (or the file was aborted).
func (c *Core) skipPass(now Time, f *outFile) bool {
	f.blockedSince = 0
	if f.h != nil {
		per := max(uint32(hashChunk/f.meta.BlockSize), 1)
		if err := c.hashTo(f, f.hashed+min(per, f.blocks-f.hashed)); err != nil {
			c.abort(now, f, err)
			return true
		}
		if f.hashed < f.blocks {
			switch {
			case f.aliveAt == 0:
				f.aliveAt = now
			case now.Sub(f.aliveAt) >= c.cfg.MaxTimer:
				f.aliveAt = now
				c.sendOffer(now, f, c.cfg.Dst, frame.FlagRetransmit)
			}
			return false
		}
	}
	c.stats.PassesSkipped++
	c.stats.BlocksSkipped += uint64(f.blocks - f.next)
	c.endPass(now, f)
	return true
}

// hashSoon asks for a step at once while a skipped pass still hashes.
func (c *Core) hashSoon(now Time) {
	if f := c.passing(); f != nil && f.allHold && c.paceAt != now+1 {
		if c.paceAt == 0 || c.paceAt > now+1 {
			c.paceAt = now + 1
		}
	}
}

// hashTo hashes f's blocks from f.hashed up to end (exclusive), read
// from its source a run of up to runBytes at a time (readRun).
func (c *Core) hashTo(f *outFile, end uint32) error {
	bs := f.meta.BlockSize
	per := max(uint32(runBytes)/bs, 1)
	var buf []byte
	for f.hashed < end {
		k := min(end-f.hashed, per)
		if buf == nil {
			buf = make([]byte, int(k)*int(bs)) // the first run is the longest
		}
		c.scratchPs = c.scratchPs[:0]
		at := 0
		for i := range k {
			n := f.meta.BlockLen(f.hashed + i)
			c.scratchPs = append(c.scratchPs, buf[at:at+n])
			at += n
		}
		full, err := readRun(f.src, c.scratchPs, f.hashed, bs)
		clear(c.scratchPs)
		at = 0
		for i := range uint32(full) {
			at += f.meta.BlockLen(f.hashed + i)
		}
		f.h.Write(buf[:at])
		f.hashed += uint32(full)
		if err != nil {
			return err
		}
	}
	return nil
}
