package pbp

import (
	"encoding/binary"

	"github.com/rbcast/rbcast/frame"
)

// The acknowledgement matrix (Liu's acknowledgement diffusion, pipelined):
// every PBP frame carries its sender's whole ack vector — for each member,
// the next sequence number it expects from that member's stream (thesis
// fig. 3.3) — and each core keeps the last vector heard from every member,
// not only the entry for its own stream that slides its window. Row m,
// column s is how far m holds s's stream, as last heard; this member's own
// row is its live state. So any member knows, for any sender, which
// members still lack its frames (status, a repair from a peer, a message
// stable everywhere) without a message of its own.

// noteAcks keeps p's row: the entry-wise maximum of every ack vector
// heard from p (frames of one sender may arrive reordered). A vector of
// another shape (a member configured with another member list) is
// ignored. It returns the vector's entry for this member, where
// applyAck reads it (ok false: not of this shape; frame.View.AckFor
// finds it, if it is there).
//
// The vectors one member sends in one core form a chain: each entry
// header() writes only ever grows over the core's life (expected;
// frozenAt from Freeze on, expected then; the sender's own entry,
// nextSeq), and a core's peer has one incarnation. So of two vectors of
// p the one built later is at least the other entry by entry, the
// maximum of the vectors heard is the latest built of them, and the
// later of two is the one whose first entry that differs is past the
// other's. The row is therefore kept as that vector came (p.vec), and a
// frame costs a compare of one entry and, when it is the newer, a copy:
// its own entry (what p will send next) orders two vectors wherever it
// differs, as in a stream's Data frames; a vector whose own entry is
// behind the row's (a late frame) is ignored. Only vectors with the
// row's own entry (a pure receiver's Acks, repeats) are compared
// further, two entries at a time, up to the first pair that differs.
// (A merge of every entry of every frame was the cost of BenchmarkGroup
// at 8 members, and then a compare of every pair: docs/benchmarks.md,
// "The library before and after issue 18".)
func (c *Core) noteAcks(p *peer, v frame.View) (ours uint32, ok bool) {
	const h, e = frame.HeaderLen, frame.AckEntryLen
	row := p.vec
	if len(v) < h || len(v)-h < len(row) || v.AckShape() != c.cfg.ackShape {
		return 0, false
	}
	vec := v[h : h+len(row)]
	if o := c.cfg.selfOff; o+e <= uint(len(vec)) {
		ours, ok = binary.BigEndian.Uint32(vec[o:o+e]), true
	}
	if o := uint(p.slot) * e; o+e <= uint(len(row)) {
		if a, b := binary.BigEndian.Uint32(row[o:o+e]), binary.BigEndian.Uint32(vec[o:o+e]); a != b {
			if frame.SeqLess(a, b) {
				copyVec(row, vec) // built after every vector the row holds
			}
			return ours, ok
		}
	}
	if laterAcks(row, vec) {
		copyVec(row, vec)
	}
	return ours, ok
}

// copyVec copies vec over row, of the same length. For 4 to 8 members it
// copies two blocks of 16 bytes, which may overlap, in registers: a call
// to memmove cost as much again as the copy (issue 18).
func copyVec(row, vec []byte) {
	if n := len(row); n >= 16 && n <= 32 && len(vec) == n {
		*(*[16]byte)(row[n-16:]) = *(*[16]byte)(vec[n-16:])
		*(*[16]byte)(row) = *(*[16]byte)(vec)
		return
	}
	copy(row, vec)
}

// laterAcks reports whether vec, of the chain row came from, is later
// than row: its first entry that differs from row's is past it (equal,
// it is not).
func laterAcks(row, vec []byte) bool {
	const e = frame.AckEntryLen
	row = row[:len(vec)]
	j := 0
	for ; j+2*e <= len(vec); j += 2 * e {
		if binary.LittleEndian.Uint64(vec[j:j+2*e]) != binary.LittleEndian.Uint64(row[j:j+2*e]) {
			if a, b := binary.BigEndian.Uint32(row[j:]), binary.BigEndian.Uint32(vec[j:]); a != b {
				return frame.SeqLess(a, b)
			}
			return frame.SeqLess(binary.BigEndian.Uint32(row[j+e:]), binary.BigEndian.Uint32(vec[j+e:]))
		}
	}
	if j < len(vec) { // an odd number of entries: the last one
		return frame.SeqLess(binary.BigEndian.Uint32(row[j:]), binary.BigEndian.Uint32(vec[j:]))
	}
	return false
}

// held is how far p holds the stream of the member in slot s, as last
// heard: its row of the acknowledgement matrix.
func (p *peer) held(s int) uint32 { return binary.BigEndian.Uint32(p.vec[s*frame.AckEntryLen:]) }

// Holds reports how far member m holds sender s's stream: the next
// sequence number of s's it expects (for m == s, the next s will send), as
// last heard from m, or this member's own state when m is this member (as
// its acks say it: frozen, what it held when frozen). ok
// is false when either is not a member of the configuration.
func (c *Core) Holds(m, s frame.MemberID) (next uint32, ok bool) {
	sp, sSelf := c.peer(s)
	if sp == nil && !sSelf {
		return 0, false
	}
	mp, mSelf := c.peer(m)
	switch {
	case mSelf && sSelf:
		return c.nextSeq, true
	case mSelf && c.frozen:
		return sp.frozenAt, true // what its acks say (Freeze)
	case mSelf:
		return sp.expected, true
	case mp == nil:
		return 0, false
	}
	return mp.held(int(s) - int(c.cfg.ackBase)), true
}

// HeartbeatNow has the next Ready send a Heartbeat unless another frame
// to the group goes first: a membership layer that waits to hear the
// members of a new view (view.Core under a primary component) has every
// member say at once that it runs the view, not a heartbeat interval
// later.
func (c *Core) HeartbeatNow() {
	if !c.left {
		c.heartbeatNow = true
	}
}

// StableFrom reports how far every live member holds sender s's stream
// (this member included; a removed member no longer counts): the lowest
// Holds(m, s) over them. Frames of s before it are held everywhere. ok is
// false when s is not a member of the configuration.
func (c *Core) StableFrom(s frame.MemberID) (next uint32, ok bool) {
	low, ok := c.Holds(c.cfg.Self, s)
	if !ok {
		return 0, false
	}
	for i := range c.peers {
		p := &c.peers[i]
		if !p.live {
			continue
		}
		if h, _ := c.Holds(p.id, s); frame.SeqLess(h, low) {
			low = h
		}
	}
	return low, true
}

// Prompt acknowledgements (Config.PromptAcks). A layer that delivers a
// frame only once every member holds it (Safe) waits, for the last
// frames it got, on the members' next acks: after AckDelay (1 ms) unless
// they come sooner. Every member acknowledging every frame at once got
// them sooner, but cost a stream three Acks per Data frame with three
// receivers, each received by the other three members: the ordered
// levels' goodput went to that. So the sender asks (FlagAckRequest), and
// the members acknowledge at once only what is asked for:
//   - a Data frame sent with nothing of ours in flight: a lone message
//     (a request, a reply), stable a round trip after it went out;
//   - in a stream, every promptEvery-th frame (half the window: 128 by
//     default), where the members acknowledge anyway (half a window of
//     receipts), so that stability follows the stream in steps of half
//     a window, with one Ack per member per step, as under FIFO;
//   - a retransmission: the gap it fills was what the members waited for;
//   - once the sender stops with frames sent after the last it asked
//     for, an Ack asking for acks (a probe), promptTail after its last
//     frame: the last frames of a burst are stable promptTail and a round
//     trip after they went out. None while messages wait for window
//     room: the frame that asked half a window back brings the acks that
//     open the window, and the stream goes on, asking again; the probe
//     comes after its last frame. Under load a stream stalled on its
//     window often; each stall's probe cost an Ack of every receiver.
//
// Per message (ProposePrompt, with AnswerAckRequests at the members: a
// Safe message in an Agreed group) the same rule runs over the frames
// that hold such messages alone; the others ask for nothing.

// promptTail is how long after its last Data frame a member that asked
// for prompt acks probes for the frames it sent since it last asked: a
// stream's frames follow each other more closely (a 9000-byte frame
// every 7 to 13 µs at 0.7 to 1.3 GB/s), so a stream costs no probe.
const promptTail = 50 * Microsecond

// promptEvery is how many frames of a stream go between two that ask
// for prompt acks: half the window, at least 1. A receiver acknowledges
// half a window of receipts at once anyway (delivered), so a stream
// costs no Ack more than under FIFO. Every 16th frame (a quarter of a
// window at most) made stability follow the stream more closely, but
// each step cost an Ack of every receiver, taken by every other member:
// on a netns segment, with every member's loop woken for each, a third
// of the CPU Safe spent over Agreed (docs/benchmarks.md, "Delivery
// levels"). A delivery that waits half a window longer still waits on
// frames the retention ring keeps (pinned, not copied).
func (c *Core) promptEvery() uint32 { return uint32(max(1, c.cfg.Window/2)) }

// askFor returns the flags of our new Data frame seq, sent now. It asks
// under PromptAcks, and, without, if the frame holds a message proposed
// with ProposePrompt; by the same rule either way, with "in flight" read
// as the frames that want prompt acks (under PromptAcks, every one).
func (c *Core) askFor(seq uint32) frame.Flags {
	lone := c.promptTo-1-c.stable >= c.nextSeq-c.stable // none in flight
	if lone {
		// What wanted prompt acks is stable: nothing is left to ask for
		// (unasked), and promptTo and asked stay within the window, not
		// 2^32 frames of plain ones behind, where the sequence's
		// wrap-around would put them in flight again.
		c.promptTo = c.stable
		if c.asked-c.stable > c.nextSeq-c.stable {
			c.asked = c.stable
		}
	}
	if !c.cfg.PromptAcks && !c.history[seq&c.hmask].prompt {
		return 0
	}
	c.promptTo = seq + 1
	if !lone && seq+1-c.asked < c.promptEvery() {
		return 0
	}
	c.asked = seq + 1
	return frame.FlagAckRequest
}

// unasked reports whether a frame sent after the last that asked wants
// prompt acks.
func (c *Core) unasked() bool { return c.promptTo-1-c.asked < c.nextSeq-c.asked }

// armTail has a probe ask for the frames sent since the last that asked,
// promptTail after the last one, unless another asks first.
func (c *Core) armTail() {
	if c.unasked() {
		c.tailAt = c.now.Add(promptTail)
	}
}

// probeTail: the probe's time came with frames not asked for in flight
// and none waiting for window room (the stream has not ended).
func (c *Core) probeTail() {
	c.tailAt = 0
	if !c.unasked() || c.inFlight() == 0 || c.frozen || c.pending > 0 {
		return
	}
	c.asked = c.nextSeq
	c.sendAck(frame.FlagAckRequest)
}

// retransmitFlags are the flags of our retransmissions of frame h.
func (c *Core) retransmitFlags(h *sent) frame.Flags {
	if c.cfg.PromptAcks || h.prompt {
		return frame.FlagRetransmit | frame.FlagAckRequest
	}
	return frame.FlagRetransmit
}

// askedAck takes a frame of another member that asks for a prompt
// acknowledgement: with PromptAcks or AnswerAckRequests the next Ready
// sends it; without, the ack timer starts (it answers PBP2's resend
// probes).
func (c *Core) askedAck() {
	if c.cfg.answerAsks() {
		c.ackNow = true
		return
	}
	c.requestAck()
}
