package view

import "github.com/rbcast/rbcast/frame"

// A view id is a pair (number, proposer) in 32 bits, as Spread's and
// EVS's view ids pair a counter with the representative that formed the
// view: the high 24 bits number the view (above every number its
// coordinator has seen), the low 8 the member id, in the view it changes
// from, of the coordinator that proposed it (the founder's id in the
// view it founds). Two components of a group that split (FIFO lets both
// go on) each number their next view from what they share, and their
// coordinators differ, so one id names one membership. Ids still order
// views (serial arithmetic on the whole id), and a member id of 256 or
// more shares the low byte with a lower one.
const proposerBits = 8

// nextID is the id a coordinator, member proposer, gives the view after
// every view id in seen.
func nextID(seen uint32, proposer frame.MemberID) uint32 {
	return number(seen) + 1<<proposerBits | uint32(proposer)&(1<<proposerBits-1)
}

// number is a view id's number part (the proposer's bits cleared), still
// comparable with frame.SeqLess: proposals of different coordinators
// that number the same change of a view compete for one number.
func number(id uint32) uint32 { return id &^ (1<<proposerBits - 1) }

// Proposer is the member id (modulo 256) of the coordinator that
// proposed view id; Number its number: view 0x0302 is the third view
// a group numbered, proposed by member 2.
func Proposer(id uint32) frame.MemberID { return frame.MemberID(id & (1<<proposerBits - 1)) }

// Number is view id's number: how many views its group numbered up to
// it, along its line of views.
func Number(id uint32) uint32 { return id >> proposerBits }
