package reliable

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// expecter is a core that takes a lock-step program's hint (pbp.Core
// under PBP2; see pbp.Core.Expect).
type expecter interface {
	Expect(now core.Time, from frame.MemberID, n int)
}

// expecterOf finds the expecter in c, through wrappers (registration's).
func expecterOf(c core.Core) (expecter, bool) { return core.Find[expecter](c) }

// Expect tells the group that this member waits for the next n frames of
// member from (a lock-step program: a barrier waits for one message of
// each other member). Under FIFO with PBP2 a lost one is then asked for
// after one repair timeout instead of after the sender's ResendTimeout
// (docs/protocols.md, "Expect"); n counts frames, and a bundle carries
// several messages. Other orders and modes ignore it. It sends nothing
// itself.
func (g *Group) Expect(from frame.MemberID, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := expecterOf(g.n.st.Core())
	if !ok || g.err != nil {
		return
	}
	e.Expect(g.n.clk.Core(time.Now()), from, n)
	// The loop may sleep towards a later deadline than the nack timer
	// just armed.
	g.due = true
	g.wakeLoop()
}

// Expect is Group.Expect at instant now.
func (d *Driver) Expect(now time.Time, from frame.MemberID, n int) {
	if e, ok := expecterOf(d.n.st.Core()); ok {
		e.Expect(d.n.clk.Core(now), from, n)
	}
}
