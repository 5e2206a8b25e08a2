package core

import "github.com/rbcast/rbcast/frame"

// senderHold is one sender whose frames that deliver are left unstepped
// until until (HoldFrom).
type senderHold struct {
	from  frame.MemberID
	until Time
}

// HoldFrom leaves the frames of member from that deliver (as Hold does
// for every sender) unstepped until ReleaseFrom(from), or until the
// stepper's clock reaches until, whichever comes first. The core then
// neither delivers nor acknowledges them: they stay in the sender's
// window, which bounds them, and are repaired like losses once stepped
// again. Every other sender's frames, and from's frames that deliver
// nothing (acknowledgements, heartbeats: liveness), are stepped as
// usual. The bound until keeps a hold shorter than the sender's failure
// timeout for want of acknowledgements (a sender removes a member that
// acknowledges nothing for that long).
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
	for _, h := range s.holds {
		if h.from == from {
			return true
		}
	}
	s.holds = append(s.holds, senderHold{from: from, until: until})
	return true
}

// ReleaseFrom ends HoldFrom(from).
func (s *Stepper) ReleaseFrom(from frame.MemberID) {
	for i, h := range s.holds {
		if h.from == from {
			s.holds = append(s.holds[:i], s.holds[i+1:]...)
			return
		}
	}
}

// holding reports whether frames of from that deliver are held now.
func (s *Stepper) holding(from frame.MemberID) bool {
	for _, h := range s.holds {
		if h.from == from {
			return s.now < h.until
		}
	}
	return false
}
