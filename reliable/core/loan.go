package core

import "github.com/rbcast/rbcast/frame"

// A Loan names received bytes the link lends past its next Recv
// (link.Loan, which the runtime passes through): they stay unchanged
// until the core gives the loan back. Loans only grow; 0 is none.
type Loan uint64

// NoLoan is before every Loan: Reclaim(NoLoan) reclaims nothing, and
// AllLoans is after every one.
const (
	NoLoan   Loan = 0
	AllLoans Loan = ^Loan(0)
)

// A Borrower is a core that can keep a received frame's bytes past
// Advance instead of copying them, when the link lends them
// (link.Lender): PBP's retention of delivered frames for a view change
// (pbp.Config.Retain). A core that wraps others (the membership core, the
// total order) forwards it to them.
type Borrower interface {
	// StepLent is Step for a frame whose bytes are lent under loan: the
	// core may keep them (or a part of them) past Advance, and reports
	// that it took the loan in Loans. Bytes it keeps of another frame
	// (one it held or copied itself) are never under a loan.
	StepLent(now Time, src, dst [6]byte, v frame.View, loan Loan) error
	// Loans appends to taken the loans the core took since the last
	// call, once per hold, and to returned those it gave back; the
	// runtime lends the first and returns the second, in that order,
	// before the link's next Recv.
	Loans(taken, returned []Loan) ([]Loan, []Loan)
	// Reclaim gives back every loan before before: what the core keeps
	// under them it copies into buffers of its own, or, with forget,
	// drops (a core that will not run again). Loans reports them.
	// It is called outside a turn (not between Ready and Advance).
	Reclaim(before Loan, forget bool)
	// Borrows reports whether the core keeps received bytes past the
	// turn at all (PBP: Config.Retain); it does not change while the
	// core runs. A runtime steps frames as lent only if it does.
	Borrows() bool
}
