package viewsim

import "github.com/rbcast/rbcast/reliable/core"

// simLender plays a link that lends its received frames (link.Lender,
// link/ring) to a process's cores: every frame lies in a buffer of its
// own, stepped as lent under a loan numbered in arrival order. A buffer
// no loan holds goes back at the next receive and is poisoned there, as
// a ring slot the kernel overwrites, so a core that kept or handed out
// bytes past giving their loan back shows it in the simulation's
// verdicts. Loans older than bound frames are asked back (Due), as the
// ring's quarter.
type simLender struct {
	bound uint64
	next  core.Loan
	// held are the buffers not given back yet, by loan: what the last
	// receive returned, and what loans hold.
	held            map[core.Loan]*simLoan
	taken, returned []core.Loan
}

type simLoan struct {
	buf   []byte
	holds int
}

// poisonByte is what a buffer given back is overwritten with.
const poisonByte = 0xd7

// release gives back (and poisons) every buffer no loan holds, as a
// receive does first.
func (l *simLender) release() {
	for loan, h := range l.held {
		if h.holds == 0 {
			for i := range h.buf {
				h.buf[i] = poisonByte
			}
			delete(l.held, loan)
		}
	}
}

// lend puts data, received, in a buffer of its own and returns the
// buffer and its loan.
func (l *simLender) lend(data []byte) ([]byte, core.Loan) {
	l.next++
	h := &simLoan{buf: append([]byte(nil), data...)}
	l.held[l.next] = h
	return h.buf, l.next
}

// settle is what the runtime does after a turn (reliable's
// node.settleLoans): lend what the cores took, take back what they gave
// back, and have them copy what they keep under loans older than bound.
func (l *simLender) settle(r *simRun, st *core.Stepper) {
	l.take(r, st)
	if l.next <= core.Loan(l.bound) {
		return
	}
	before := l.next - core.Loan(l.bound)
	for loan, h := range l.held {
		if loan < before && h.holds > 0 {
			st.Reclaim(before, false)
			l.take(r, st)
			return
		}
	}
}

func (l *simLender) take(r *simRun, st *core.Stepper) {
	l.taken, l.returned = st.Loans(l.taken[:0], l.returned[:0])
	for _, loan := range l.taken {
		h := l.held[loan]
		if h == nil {
			r.fail("a core took loan %d, given back already", loan)
			return
		}
		h.holds++
	}
	for _, loan := range l.returned {
		h := l.held[loan]
		if h == nil || h.holds == 0 {
			r.fail("a core gave back loan %d, which it did not hold", loan)
			return
		}
		h.holds--
	}
}
