package ring

import (
	"unsafe"

	"github.com/rbcast/rbcast/link"
)

// Loan implements link.Lender: data lies in a V2 slot or V3 block that a
// Recv returned and that is not yet given back (the last Recv's, or one
// on loan since), which is then the Loan (its sequence number, plus one).
// Bytes anywhere else (a decorator's copy) are not lent.
func (l *Link) Loan(data []byte) (link.Loan, bool) {
	// Close unmaps the ring under the write lock.
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, false
	}
	ring := l.rx.ring
	if len(data) == 0 || len(ring) == 0 || len(l.rxSlot) == 0 {
		return 0, false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(data))) - uintptr(unsafe.Pointer(unsafe.SliceData(ring)))
	if off >= uintptr(len(ring)) || uintptr(len(data)) > uintptr(len(ring))-off {
		return 0, false
	}
	g := l.cfg.rx
	at := int(off)
	var i, end int
	if l.cfg.Version == V3 {
		i = at / g.BlockSize
		end = (i + 1) * g.BlockSize
	} else {
		per := g.FramesPerBlock()
		f := at % g.BlockSize / g.FrameSize
		if f >= per {
			return 0, false // the block's tail behind its last slot
		}
		i = at/g.BlockSize*per + f
		end = l.rxSlot[i] + g.FrameSize
	}
	if at+len(data) > end {
		return 0, false
	}
	n := uint64(len(l.rxSlot))
	seq := l.rxNext - (l.rxNext%n+n-uint64(i))%n
	if seq < l.rxHeld || (seq == l.rxNext && !l.blkOpen) {
		return 0, false
	}
	return link.Loan(seq + 1), true
}

// lentSeq is the slot or block sequence number of loan, if it is one the
// link holds for loans or read last (Loan's range).
func (l *Link) lentSeq(loan link.Loan) (uint64, bool) {
	if loan == 0 {
		return 0, false
	}
	seq := uint64(loan) - 1
	return seq, seq >= l.rxHeld && (seq < l.rxNext || (seq == l.rxNext && l.blkOpen))
}

// Lend implements link.Lender: the slots or blocks of loans stay ours
// until Return, and so do those read after them (release goes in ring
// order). A loan Loan did not give is ignored.
func (l *Link) Lend(loans []link.Loan) {
	n := uint64(len(l.rxSlot))
	for _, loan := range loans {
		if seq, ok := l.lentSeq(loan); ok {
			l.loans[seq%n]++
			l.lent.Add(1)
		}
	}
}

// Return implements link.Lender: the next Recv gives back the slots or
// blocks no loan holds any more, up to the first one still on loan.
func (l *Link) Return(loans []link.Loan) {
	n := uint64(len(l.rxSlot))
	for _, loan := range loans {
		if seq, ok := l.lentSeq(loan); ok && l.loans[seq%n] > 0 {
			l.loans[seq%n]--
		}
	}
}

// Due implements link.Lender. At most a quarter of the ring's slots or
// blocks (loanBound) stay held for loans past the next Recv: loans of
// those before the last loanBound read are asked back, and counted in
// Stats.LoansCalled.
func (l *Link) Due() (link.Loan, bool) {
	if l.closed.Load() {
		return 0, false // nothing to copy from any more
	}
	n := uint64(len(l.rxSlot))
	bound := loanBound(len(l.rxSlot))
	if l.rxNext < bound {
		return 0, false
	}
	before := l.rxNext - bound
	called := uint64(0)
	for seq := l.rxHeld; seq < before; seq++ {
		called += uint64(l.loans[seq%n])
	}
	if called == 0 {
		return 0, false
	}
	l.loansCalled.Add(called)
	return link.Loan(before + 1), true
}

// loanBound is how many of a ring's n slots or blocks may stay held for
// loans past a Recv: a quarter, at least one.
func loanBound(n int) uint64 { return uint64(max(1, n/4)) }
