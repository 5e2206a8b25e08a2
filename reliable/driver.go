package reliable

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/vtotal"
)

// Driver runs a member over a link without goroutines and without waiting:
// the shape the simulator needs. Its Step has the signature of
// testnet.Node, so a Driver is bound to a simulated endpoint with
// Endpoint.Bind; each Step takes the same turns as Group's event loop
// (the same stepper, the same sending and handing out) on whatever the
// link holds, and returns the core's next deadline. Deliveries and events
// go to Config.Deliver and Config.OnEvent, on the goroutine calling Step;
// they may call Propose or Leave, which then take effect once the turn's
// deliveries are handed out. Static Config.Members, or Config.Views (the
// member joins on its first Steps; OnEvent reports its ViewInstalled);
// registration runs only under Join. Not safe for concurrent use.
type Driver struct {
	n     *node
	l     link.Link
	rx    []link.Frame
	order Order
	// inTurn: a turn is handing out; due: Propose or Leave was called
	// during it, so another turn follows; leave: Leave was called,
	// leaveStarted: the core's Leave ran; left: it reported SelfLeft.
	inTurn, due, leave, leaveStarted, left bool
}

// NewDriver returns the driver of member cfg.Self over l. epoch is the
// instant the core's clock counts from (the simulator's start).
func NewDriver(l link.Link, cfg Config, epoch time.Time) (*Driver, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if l, err = withAuth(l, &s); err != nil {
		return nil, err
	}
	var c core.Core
	switch {
	case s.Views:
		v, err := newViewCore(&s, l)
		if err != nil {
			return nil, err
		}
		c = v
		if s.Order == Total {
			c = vtotal.New(v) // Agreed: one order over the views
			if s.Safe {
				c = vtotal.NewSafe(v)
			}
		}
	case len(s.Members) == 0:
		return nil, configErr("a Driver needs static Members or Views (registration runs only under Join)")
	default:
		if c, err = s.newCore(s.Self, s.Members, l.MTU()); err != nil {
			return nil, err
		}
	}
	d := &Driver{n: newNode(l, &s, c, wall.Clock{Epoch: epoch}), l: l, rx: make([]link.Frame, 64), order: s.Order}
	d.n.deliver = s.Deliver
	if d.n.deliver == nil {
		d.n.deliver = func(frame.MemberID, []byte) {}
	}
	d.n.event = s.OnEvent
	return d, nil
}

// Step reads every frame the link holds, steps the core, runs its timers,
// sends and delivers; it returns when Step should next run without input
// (zero: only on input).
func (d *Driver) Step(now time.Time) time.Time {
	t := d.n.clk.Core(now)
	for {
		n, _ := d.l.Recv(time.Time{}, d.rx)
		d.turn(t, d.rx[:n], true)
		if n == 0 && !d.due {
			break
		}
	}
	return d.n.clk.Wall(d.n.st.Deadline())
}

// turn is one turn of the event loop (see Group.turn), on the caller's
// goroutine.
func (d *Driver) turn(now core.Time, frames []link.Frame, tick bool) error {
	d.due = false
	if d.leave && !d.leaveStarted {
		d.leaveStarted = true
		d.n.st.Leave(now)
	}
	for i := range frames {
		stepFrame(d.n.st, now, &frames[i])
	}
	if tick {
		d.n.st.Tick(now)
	}
	rd := d.n.st.Ready()
	err := d.n.out.send(rd.Frames)
	d.inTurn = true
	d.n.handOut(rd)
	d.inTurn = false
	for _, ev := range rd.Events {
		d.left = d.left || ev.Kind == core.SelfLeft
	}
	d.n.st.Advance()
	return err
}

// Propose queues a message and, outside a turn (not from Deliver or
// OnEvent), transmits what is due. ErrWindowFull is back-pressure:
// propose again after a later Step.
func (d *Driver) Propose(now time.Time, msg []byte) error {
	t := d.n.clk.Core(now)
	err := d.n.st.Propose(t, msg)
	if d.inTurn {
		d.due = true
		return err
	}
	if oerr := d.turn(t, nil, false); oerr != nil {
		return oerr
	}
	return err
}

// Leave starts a clean leave (see Group.Close); OnEvent reports SelfLeft.
func (d *Driver) Leave(now time.Time) error {
	d.leave = true
	if d.inTurn {
		d.due = true
		return nil
	}
	return d.turn(d.n.clk.Core(now), nil, false)
}

// Left reports whether this member has sent its Leave.
func (d *Driver) Left() bool { return d.left }

// MaxMessage is the largest message Propose accepts.
func (d *Driver) MaxMessage() int { return d.n.info.MaxMessage }

// Stats returns the counters (Link included).
func (d *Driver) Stats() Stats {
	s := d.n.stats(d.order)
	s.Link, s.LinkErr = d.l.Stats()
	s.Auth = authStats(d.l)
	return s
}
