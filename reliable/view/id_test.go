package view

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// A view id pairs a number with its proposer: the next id numbers above
// every id seen, whatever its proposer, and orders after it, also where
// the number wraps.
func TestNextID(t *testing.T) {
	for _, c := range []struct {
		seen     uint32
		proposer frame.MemberID
		want     uint32
	}{
		{0, 0, 0x100},               // founding by member 0
		{0, 3, 0x103},               // founding by member 3
		{0x100, 2, 0x202},           // the second view, proposed by member 2
		{0x1ff, 0, 0x200},           // number 1 of member 255: the next is number 2
		{0x302, 1, 0x401},           // a lower proposer still numbers above
		{0xffffff05, 7, 0x00000007}, // the number wraps (serial arithmetic)
		{0x500, 0x1234, 0x634},      // a member id past 255: its low byte
	} {
		got := nextID(c.seen, c.proposer)
		if got != c.want {
			t.Errorf("nextID(%#x, %d) = %#x, want %#x", c.seen, c.proposer, got, c.want)
		}
		if !frame.SeqLess(c.seen, got) {
			t.Errorf("nextID(%#x, %d) = %#x does not order after it", c.seen, c.proposer, got)
		}
		if Number(got) != (Number(c.seen)+1)&0xffffff || Proposer(got) != c.proposer&0xff {
			t.Errorf("nextID(%#x, %d) = %#x: number %d, proposer %d", c.seen, c.proposer, got, Number(got), Proposer(got))
		}
	}
	if number(0x0302) != number(0x0307) || number(0x0302) == number(0x0402) {
		t.Error("number: proposals of one number must compare equal, of two numbers not")
	}
}
