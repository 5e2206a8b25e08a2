// Package wall converts between the wall clock's monotonic time and the
// protocol cores' Time (package clock). It is the one such conversion:
// the live runtime, registration, the simulator's Driver, the simulation
// tests and pcap-replay all use it. Cores never import it (they read no
// clock).
package wall

import (
	"time"

	"github.com/rbcast/rbcast/reliable/clock"
)

// Clock counts core Time from Epoch: an instant t is the nanoseconds
// since Epoch, plus one, since a core reserves 0 for "no deadline". The
// difference is taken on the monotonic clock when both instants carry a
// monotonic reading (time.Now's do).
type Clock struct {
	Epoch time.Time
}

// Core converts an instant to core Time. Instants before Epoch map to 1.
func (c Clock) Core(t time.Time) clock.Time {
	d := t.Sub(c.Epoch)
	if d < 0 {
		d = 0
	}
	return clock.Time(d) + 1
}

// Wall converts a core Time back to an instant; 0 (no deadline) stays
// the zero time.
func (c Clock) Wall(t clock.Time) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return c.Epoch.Add(time.Duration(t - 1))
}
