package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
)

// Rejoining. Under -membership views a live daemon can be left out of the
// group: a member that could not hear it suspected it (a one-way cut, a
// receiver starved of CPU), its component lost when a partition healed,
// or (Agreed, Safe) it was in a minority. Its Group then stops with an
// error wrapping reliable.ErrRemoved (and reliable.ErrMinority), and the
// daemon joins again as a new incarnation, asking for the same id
// (docs/membership.md, "Joining, leaving, restarting"), as kv.Serve does.
//
// A connection belongs to one membership: the daemon ends every
// connection open when the group stopped with Error{CodeRejoining} (but
// one that only asked for status, which goes on being answered), a
// subscriber's after its last deliveries (the messages the group
// delivers until the daemon is back are missing here, so the stream
// would have a gap), a sender's saying how many messages it had accepted
// (docs/local-api.md, "Rejoining"). A client that connects meanwhile is
// welcomed as before the group started (ready 0); what needs the group
// waits for it, at most Config.RejoinWait.

// RejoinStatus is the last time the group went on without this daemon.
type RejoinStatus struct {
	At     string `json:"at"`     // when its group stopped
	Reason string `json:"reason"` // the error it stopped with
	View   uint32 `json:"view"`   // the view this daemon was a member of
	// Unacknowledged is how many of this daemon's messages were not yet
	// held by every member then: each reached every member that went on,
	// or none of them.
	Unacknowledged int    `json:"unacknowledged"`
	BackAt         string `json:"back_at,omitempty"` // when it was a member again; empty while it joins
}

// rejoinable reports whether the daemon joins again after its group
// stopped with err: the group went on without it (views only; a
// registered group's member left out of an election halts).
func (d *Daemon) rejoinable(err error) bool {
	return d.cfg.Group.Views && errors.Is(err, reliable.ErrRemoved)
}

// rejoin begins the next membership after g went on without this
// daemon: the daemon has no group until join sets one, every connection
// open now that asked for more than status ends, and the next Join is a new incarnation that sends under
// the key active in g and accepts the other one g accepted (carried). It
// returns the configuration of that Join.
func (d *Daemon) rejoin(cfg reliable.Config, g *reliable.Group) (reliable.Config, *auth.Key) {
	err, st := g.Err(), g.Stats()
	gone := &RejoinStatus{At: stamp(time.Now()), Reason: err.Error(), View: viewID(st), Unacknowledged: unacked(st)}
	d.mu.Lock()
	d.g.Store(nil)
	d.up = make(chan struct{})
	d.rejoining = true
	d.rejoins++
	d.lastGone = gone
	d.viewsBefore += viewsInstalled(st)
	n := d.rejoins
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		if c.bound.Load() {
			conns = append(conns, c)
		}
	}
	d.mu.Unlock()
	d.log.Warn("rbcastd: the group went on without this daemon; joining again as a new incarnation", "err", err,
		"view", gone.View, "unacknowledged", gone.Unacknowledged, "rejoins", n)
	for _, c := range conns {
		c.c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.fail(localapi.CodeRejoining, false, "%s", c.rejoinText(err, gone.Unacknowledged))
	}

	// A new incarnation (0: Join draws one), and the same id asked for.
	if cfg.Incarnation != 0 {
		cfg.Incarnation++
	}
	if cfg.Order == reliable.Total && st.View != nil {
		// Only a primary component orders: joining again must not found a
		// group of its own with fewer than a majority of the view it was
		// in (a partition in two halves would found two).
		cfg.Size = max(cfg.Size, len(st.View.Members)/2+1)
	}
	var carried *auth.Key
	if a := g.Auth(); a != nil && cfg.Auth != nil {
		d.rekeyMu.Lock()
		keys := a.Auth()
		if k := d.keys[keys.Active]; k != nil {
			c := *cfg.Auth
			c.Key = k
			cfg.Auth = &c
		}
		for _, fp := range keys.Accepted {
			if fp != keys.Active {
				carried = d.keys[fp]
			}
		}
		d.rekeyMu.Unlock()
	}
	return cfg, carried
}

// A daemon left out again and again soon after each join (a one-way cut
// that keeps it deaf to one member, a host starved of CPU past the failure
// timeout) would join in a loop, each join a view change for the whole
// group. After a membership that lasted less than rejoinShort the daemon
// waits before joining again, rejoinFirst doubling per such membership in
// a row up to rejoinMax; one that lasted longer starts the count again.
const (
	rejoinShort = 10 * time.Second
	rejoinFirst = 100 * time.Millisecond
	rejoinMax   = 10 * time.Second
)

// nextShort counts the short memberships in a row, the one that just
// lasted d included (0: it was not short).
func nextShort(short int, d time.Duration) int {
	if d >= rejoinShort {
		return 0
	}
	return short + 1
}

// rejoinDelay is the wait before the next join after n short memberships
// in a row (n >= 1): the first one joins again at once, as a false
// suspicion calls for; from the second, rejoinFirst doubling, at most
// rejoinMax.
func rejoinDelay(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := rejoinFirst
	for i := 2; i < n && d < rejoinMax; i++ {
		d *= 2
	}
	return min(d, rejoinMax)
}

// memberSince is when the daemon last became a member.
func (d *Daemon) memberSince() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.since
}

// rejoinCount is how many times the daemon began to join again.
func (d *Daemon) rejoinCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rejoins
}

// rejoinText is what a connection of the membership that ended is told:
// why, and what became of the messages it sent.
func (c *conn) rejoinText(err error, unacknowledged int) string {
	why := fmt.Sprintf("the group went on without this daemon (%v); it is joining again as a new incarnation", err)
	c.smu.Lock()
	subscribed := c.sub != nil
	c.smu.Unlock()
	accepted := c.accepted.Load()
	var text string
	switch {
	case subscribed:
		text = why + "; messages the group delivers until it is back are missing here: connect and subscribe again"
	case accepted > 0:
		text = fmt.Sprintf("%s; %d messages were accepted on this connection: every member that went on delivered each of them or none did (%d of this daemon's were not yet held by every member); connect again", why, accepted, unacknowledged)
	default:
		text = why + "; connect again"
	}
	if len(text) > localapi.MaxText {
		text = text[:localapi.MaxText]
	}
	return text
}

// rejoiningError refuses a request that waited Config.RejoinWait for
// the daemon to be a member again.
type rejoiningError struct{ text string }

func (e *rejoiningError) Error() string { return e.text }

// stillRejoining is the error of a request that waited too long for the
// rejoin.
func (d *Daemon) stillRejoining() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	why := ""
	if d.lastGone != nil {
		why = fmt.Sprintf(" (the group went on without it at %s: %s)", d.lastGone.At, d.lastGone.Reason)
	}
	return &rejoiningError{fmt.Sprintf("the daemon is joining the group again%s and was not admitted within %v; try again", why, d.rejoinWait())}
}

// rejoinWait is Config.RejoinWait or its default.
func (d *Daemon) rejoinWait() time.Duration {
	if d.cfg.RejoinWait > 0 {
		return d.cfg.RejoinWait
	}
	return 4 * d.failureTimeout()
}

// noGroup refuses a request that needed the group when started found
// none (err): a rejoin that took too long, or a group that never
// started.
func (c *conn) noGroup(err error) {
	var re *rejoiningError
	if errors.As(err, &re) {
		c.fail(localapi.CodeRejoining, false, "%v", re)
		return
	}
	c.fail(localapi.CodeClosed, false, "the group did not start: %v", err)
}

// lostGroup refuses a request that failed because its group stopped
// under it: a rejoin's end of the connection, or the group's end. g.Err
// says which: a Group that refuses a request because its core stopped
// (removed, a minority) finishes with that error itself, so Err reports
// it from the refusal on (reliable's TestViewsSendErrSetsErr,
// TestLostGroupFromErr here).
func (c *conn) lostGroup(g *reliable.Group, code localapi.Code, format string, args ...any) {
	if err := g.Err(); err != nil && c.d.rejoinable(err) {
		c.fail(localapi.CodeRejoining, false, "%s", c.rejoinText(err, unacked(g.Stats())))
		return
	}
	c.fail(code, false, format, args...)
}

// viewsInstalled is how many views the group of st installed.
func viewsInstalled(st reliable.Stats) int { return int(st.EventCounts[reliable.ViewInstalled]) }

func viewID(st reliable.Stats) uint32 {
	if st.View == nil {
		return 0
	}
	return st.View.ID
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
