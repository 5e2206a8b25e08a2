package core

import "github.com/rbcast/rbcast/frame"

// Holder is a core that can hold one sender's messages itself
// (pbp.Core): its frames are stepped and kept in the core's reorder
// window, bounded by it, but neither delivered nor acknowledged, and not
// asked for again, until ReleaseFrom or until; its acknowledgements of
// our frames still count. After the release they are delivered from the
// window, without a retransmission. Stepper.HoldFrom uses it where the
// core (or a core it wraps: Find) has it.
type Holder interface {
	// HoldFrom holds from's messages until ReleaseFrom(from) or until
	// the core's clock reaches until; a hold of from that exists
	// already is left as it is. It reports false where the core cannot
	// hold from (not a live member).
	HoldFrom(from frame.MemberID, until Time) bool
	// ReleaseFrom ends the hold. What it kept is delivered at the next
	// Tick, which Deadline asks for at once; it produces no output by
	// itself, so it may be called between Ready and Advance.
	ReleaseFrom(from frame.MemberID)
}

// senderHold is one sender whose frames that deliver are left unstepped
// until until (HoldFrom), or, inCore, held by the core (Holder).
type senderHold struct {
	from   frame.MemberID
	until  Time
	inCore bool
	// quiet is from's last frame that delivers nothing, kept unstepped
	// (a copy) while this member had nothing in flight; src and dst its
	// Ethernet addresses.
	quiet    []byte
	src, dst [6]byte
}

// HoldFrom stops delivering member from's messages until
// ReleaseFrom(from), or until the stepper's clock reaches until,
// whichever comes first. A core that is a Holder (pbp.Core) holds them
// itself: from's frames are stepped, kept in the core's window and
// delivered from it at the release, with no retransmission; they are
// counted in Counters.Held all the same.
//
// Any other core is held by the stepper: it leaves the frames of member
// from that deliver (as Hold does for every sender) unstepped. The core then
// neither delivers nor acknowledges them: they stay in the sender's
// window, which bounds them, and are repaired like losses once stepped
// again. Every other sender's frames are stepped as usual, and so are
// from's that deliver nothing (acknowledgements, heartbeats, repair
// requests) while this member has frames in flight, whose
// acknowledgements it needs. While it has none, from's last such frame
// is kept instead (one copy) and stepped at ReleaseFrom: stepped at
// once, it would show the core the frames held back as a gap, and the
// core would ask for them again and again while they are held, each
// time for a window of retransmissions. The bound until keeps a hold
// shorter than the failure timeouts (a sender removes a member that
// acknowledges nothing for that long, a receiver one it does not hear
// from).
//
// A hold of from that exists already, expired or not, is left as it is
// (until is not moved): one hold per sender until ReleaseFrom. It is
// refused (false) under total order (Info.SelfDelivery: one sender's
// frame held back would stop every later message) and where from's
// frames do not form a stream of their own (Core.Repair).
func (s *Stepper) HoldFrom(from frame.MemberID, until Time) bool {
	if s.info.SelfDelivery {
		return false
	}
	if stream, _ := s.c.Repair(from); stream != from {
		return false
	}
	if s.hold(from) != nil {
		return true
	}
	h := senderHold{from: from, until: until}
	if c, ok := Find[Holder](s.c); ok {
		if !c.HoldFrom(from, until) {
			return false
		}
		h.inCore = true
	}
	s.holds = append(s.holds, h)
	return true
}

// ReleaseFrom ends HoldFrom(from). What the core kept (Holder), or the
// frame the stepper kept, is delivered or stepped at the next Tick
// (Deadline says when).
func (s *Stepper) ReleaseFrom(from frame.MemberID) {
	for i := range s.holds {
		if h := &s.holds[i]; h.from == from {
			if h.inCore {
				if c, ok := Find[Holder](s.c); ok {
					c.ReleaseFrom(from)
				}
			}
			if h.quiet != nil {
				s.replay = append(s.replay, *h)
			}
			s.holds = append(s.holds[:i], s.holds[i+1:]...)
			return
		}
	}
}

// Holding reports whether member from's messages are held now: HoldFrom
// and neither ReleaseFrom nor the bound since. Its datagrams (the
// Unreliable level) are delivered all the same: a hold stops a sender's
// window, and a datagram takes none of it.
func (s *Stepper) Holding(from frame.MemberID) bool {
	h := s.hold(from)
	return h != nil && s.now < h.until
}

func (s *Stepper) hold(from frame.MemberID) *senderHold {
	for i := range s.holds {
		if s.holds[i].from == from {
			return &s.holds[i]
		}
	}
	return nil
}

// holdsBack reports whether v is held back (HoldFrom), keeping it if it
// is a frame that delivers nothing. A frame the core holds (Holder) is
// counted in held and stepped.
func (s *Stepper) holdsBack(src, dst [6]byte, v frame.View) bool {
	h := s.hold(v.Sender())
	if h == nil || s.now >= h.until {
		return false
	}
	if v.Type() == frame.Datagram {
		// A hold stops a sender's window, not its datagrams, which
		// take no window room (Holding).
		return false
	}
	if s.info.Delivers(v.Type()) {
		if h.inCore {
			s.held++
			return false
		}
		return true
	}
	if h.inCore {
		return false
	}
	if s.c.Stats().InFlight > 0 {
		return false
	}
	h.quiet, h.src, h.dst = append(h.quiet[:0], v...), src, dst
	return true
}

// stepReleased steps the frames kept from the senders released since.
func (s *Stepper) stepReleased() {
	for i := range s.replay {
		h := &s.replay[i]
		s.c.Step(s.now, h.src, h.dst, frame.View(h.quiet))
		h.quiet = nil
	}
	s.replay = s.replay[:0]
}
