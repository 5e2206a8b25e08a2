package reliable

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// Driver runs a member over a link without goroutines and without waiting:
// the shape the simulator needs. Its Step has the signature of
// testnet.Node, so a Driver is bound to a simulated endpoint with
// Endpoint.Bind; each Step runs the same engine as Group's event loop on
// whatever the link holds, and returns the core's next deadline.
// Deliveries and events go to Config.Deliver and Config.OnEvent, on the
// goroutine calling Step. Static Config.Members only. Not safe for
// concurrent use.
type Driver struct {
	eng *engine
	rx  []link.Frame
	max int
}

// NewDriver returns the driver of member cfg.Self over l. epoch is the
// instant the core's clock counts from (the simulator's start).
func NewDriver(l link.Link, cfg Config, epoch time.Time) (*Driver, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if len(s.Members) == 0 {
		return nil, configErr("a Driver needs static Members (registration runs only under Join)")
	}
	fifo, total, err := s.newCore(s.Self, s.Members, l.MTU())
	if err != nil {
		return nil, err
	}
	d := &Driver{eng: newEngine(l, &s, fifo, total, s.Members, epoch), rx: make([]link.Frame, 64)}
	d.max = maxPayload(&s, s.Members, l.MTU())
	if total != nil {
		d.max = total.MaxMessage()
	}
	d.eng.deliver = s.Deliver
	if d.eng.deliver == nil {
		d.eng.deliver = func(frame.MemberID, []byte) {}
	}
	d.eng.event = s.OnEvent
	return d, nil
}

// Step reads every frame the link holds, steps the core, runs its timers,
// sends and delivers; it returns when Step should next run without input
// (zero: only on input).
func (d *Driver) Step(now time.Time) time.Time {
	t := d.eng.now(now)
	for {
		n, _ := d.eng.l.Recv(time.Time{}, d.rx)
		d.eng.turn(t, d.rx[:n], true)
		if n == 0 {
			break
		}
	}
	return d.eng.wall(d.eng.deadline())
}

// Propose queues a message and transmits what is due. pbp.ErrWindowFull
// (Order FIFO) or seq.ErrWindowFull (Order Total) is back-pressure:
// propose again after a later Step.
func (d *Driver) Propose(now time.Time, msg []byte) error {
	err := d.eng.propose(d.eng.now(now), msg)
	if oerr := d.eng.output(); oerr != nil {
		return oerr
	}
	return err
}

// Leave starts a clean leave (see Group.Close); OnEvent reports SelfLeft.
func (d *Driver) Leave(now time.Time) error {
	d.eng.leave(d.eng.now(now))
	return d.eng.output()
}

// Left reports whether this member has sent its Leave.
func (d *Driver) Left() bool {
	if d.eng.core != nil {
		return d.eng.core.Left()
	}
	return d.eng.total.Left()
}

// MaxMessage is the largest message Propose accepts.
func (d *Driver) MaxMessage() int { return d.max }

// Stats returns the counters (Link included).
func (d *Driver) Stats() Stats {
	s := d.eng.stats()
	s.Link, s.LinkErr = d.eng.l.Stats()
	return s
}
