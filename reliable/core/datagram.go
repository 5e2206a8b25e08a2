package core

import "github.com/rbcast/rbcast/frame"

// DatagramWindow drops duplicate datagrams of the Unreliable level from
// one sender (UnreliableCore): it remembers the datagram numbers seen of
// the sender's current incarnation within DatagramSpan of the highest.
// A number older than that is dropped too (at most once allows it). The
// zero value has seen nothing.
type DatagramWindow struct {
	inc  uint32
	top  uint32 // the highest number seen
	mask uint64 // bit i: top-i was seen; 0: nothing seen
}

// DatagramSpan is how many datagram numbers behind the highest seen a
// DatagramWindow remembers.
const DatagramSpan = 64

// Fresh reports whether datagram seq of incarnation inc is new, and notes
// it. A new incarnation starts the window again.
func (w *DatagramWindow) Fresh(inc, seq uint32) bool {
	if w.inc != inc || w.mask == 0 {
		*w = DatagramWindow{inc: inc, top: seq, mask: 1}
		return true
	}
	if frame.SeqLess(w.top, seq) {
		if d := seq - w.top; d >= DatagramSpan {
			w.mask = 1
		} else {
			w.mask = w.mask<<d | 1
		}
		w.top = seq
		return true
	}
	back := w.top - seq
	if back >= DatagramSpan || w.mask&(1<<back) != 0 {
		return false
	}
	w.mask |= 1 << back
	return true
}
