package reliable

import (
	"errors"
	"fmt"
)

// Level is a reliable delivery level a message asks for (Group.SendLevel;
// docs/membership.md, "Delivery levels").
type Level int

const (
	// LevelGroup is the group's own level: what Send sends at.
	LevelGroup Level = iota
	// LevelFIFO is each sender's messages in its order (Order FIFO).
	LevelFIFO
	// LevelAgreed is one total order, the same at every member (Order
	// Total).
	LevelAgreed
	// LevelSafe is Agreed, and a message is delivered only once every
	// member of the view holds it (Order Total with Views).
	LevelSafe
	// LevelPCODE is an Order PCODE group's own order (reliable/pcode):
	// its level alone, never one a message of another group can ask for.
	LevelPCODE
)

func (l Level) String() string {
	switch l {
	case LevelGroup:
		return "the group's"
	case LevelFIFO:
		return "FIFO"
	case LevelAgreed:
		return "Agreed"
	case LevelSafe:
		return "Safe"
	case LevelPCODE:
		return "PCODE"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ErrLevel is wrapped by SendLevel's refusal of a level the group cannot
// send a message at (a *LevelError).
var ErrLevel = errors.New("reliable: a level this group does not send at")

// LevelError is SendLevel's refusal: the level asked, the group's own,
// and why the group cannot send at the one asked.
type LevelError struct {
	Asked, Group Level
	Why          string
}

func (e *LevelError) Error() string {
	return fmt.Sprintf("reliable: a %s message in a group whose level is %s: %s", e.Asked, e.Group, e.Why)
}

// Unwrap makes errors.Is(err, ErrLevel) hold.
func (e *LevelError) Unwrap() error { return ErrLevel }

// level is the group's own reliable level.
func (g *Group) level() Level {
	switch {
	case g.cfg.Order == PCODE:
		return LevelPCODE
	case g.cfg.Order != Total:
		return LevelFIFO
	case g.cfg.Views && g.cfg.Safe:
		return LevelSafe
	}
	return LevelAgreed
}

// levelAllowed says whether a message may go at level in this group:
// its own level always; Agreed and Safe, whatever the group's, in a
// total order over views, where one order holds both.
func (g *Group) levelAllowed(level Level) error {
	own := g.level()
	if level == LevelGroup || level == own {
		return nil
	}
	e := &LevelError{Asked: level, Group: own}
	switch {
	case level == LevelPCODE:
		e.Why = "PCODE is the level of an Order PCODE group alone"
	case level != LevelFIFO && level != LevelAgreed && level != LevelSafe:
		e.Why = "no such level"
	case own == LevelPCODE:
		e.Why = "an Order PCODE group delivers each request its matched message, in the program's steps (reliable/pcode), its one level: send with Send"
	case own == LevelFIFO:
		e.Why = "a FIFO group has that level alone; Agreed and Safe need Order Total (with Views for Safe)"
	case level == LevelFIFO:
		// docs/membership.md, "Delivery levels": delivered as PBP
		// delivers it, a FIFO message would overtake its sender's earlier
		// messages still waiting for their place in the order, and held
		// behind them it is an Agreed message outside the order.
		e.Why = "FIFO per message is not offered in a total order: it would wait for its sender's earlier messages to be ordered, as late as an Agreed message; send it Agreed"
	case !g.cfg.Views:
		e.Why = "the registered total order (the sequencer) has Agreed alone; Safe needs Views"
	default:
		return nil // Agreed and Safe in a total order over views
	}
	return e
}
