package view

import (
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// StepLent implements core.Borrower: Step, and the inner core that takes
// the frame (the view's, or the view before's for its repairs) steps it
// as lent, so that it may retain it without a copy (pbp.Core.StepLent).
// Frames the membership core holds or relays are its own copies, stepped
// without the loan.
func (c *Core) StepLent(now clock.Time, src, dst [6]byte, v frame.View, loan core.Loan) error {
	c.loan = loan
	err := c.Step(now, src, dst, v)
	c.loan = core.NoLoan
	return err
}

// stepCore steps in with a frame of its view, as lent if StepLent runs.
func (c *Core) stepCore(in Inner, now clock.Time, src, dst [6]byte, v frame.View) error {
	if c.loan != core.NoLoan {
		if b, ok := in.(core.Borrower); ok {
			if !slices.Contains(c.borrowers, in) {
				c.borrowers = append(c.borrowers, in)
			}
			return b.StepLent(now, src, dst, v, c.loan)
		}
	}
	return in.Step(now, src, dst, v)
}

// Loans implements core.Borrower: the inner cores' loans. A core no
// longer the view's or the view before's (replaced, dropped once every
// member was heard in the next view) runs no more: what it keeps under a
// loan is dropped and given back.
func (c *Core) Loans(taken, returned []core.Loan) ([]core.Loan, []core.Loan) {
	keep := c.borrowers[:0]
	for _, in := range c.borrowers {
		b := in.(core.Borrower)
		if in != c.inner && in != c.prev {
			b.Reclaim(core.AllLoans, true)
		}
		taken, returned = b.Loans(taken, returned)
		if in == c.inner || in == c.prev {
			keep = append(keep, in)
		}
	}
	clear(c.borrowers[len(keep):])
	c.borrowers = keep
	return taken, returned
}

// Borrows implements core.Borrower: every view's core retains what it
// delivers (docs/membership.md).
func (c *Core) Borrows() bool { return true }

// Reclaim implements core.Borrower, for every inner core that may keep
// lent bytes.
func (c *Core) Reclaim(before core.Loan, forget bool) {
	for _, in := range c.borrowers {
		in.(core.Borrower).Reclaim(before, forget)
	}
}
