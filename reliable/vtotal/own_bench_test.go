package vtotal_test

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/reliable/vtotal"
)

// BenchmarkSendDeliverPBP is BenchmarkSendDeliver over the real
// membership core and PBP at MTU 9000: a view of one (its own
// sequencer) proposes messages of the largest size and delivers each;
// the sender's whole path, its copies included, per message. Safe's
// sub-benchmark is the same path under NewSafe (in a view of one every
// message is stable once held, so it measures Safe's own bookkeeping
// and its pooled copy, not the stability rounds).
func BenchmarkSendDeliverPBP(b *testing.B) {
	b.Run("agreed", func(b *testing.B) { benchSendDeliverPBP(b, vtotal.New) })
	b.Run("safe", func(b *testing.B) { benchSendDeliverPBP(b, vtotal.NewSafe) })
}

func benchSendDeliverPBP(b *testing.B, wrap func(vtotal.Inner) *vtotal.Core) {
	vc, err := view.New(view.Config{
		Group: 5, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1, Nonce: 1, Requested: frame.NoMember,
		ConfigHash: 1, MTU: 9000, Found: 1, MaxMembers: 4, Window: 16,
		Retry: 20 * clock.Millisecond, FailureTimeout: 400 * clock.Millisecond,
		MaxMessage: 8900, MaxQueue: 64, Primary: true, Delivers: func(t frame.Type) bool { return t == frame.Data },
		Start: func(v view.View, self frame.MemberID) (view.Inner, error) {
			return pbp.New(pbp.Config{Group: 5, Self: self, Members: v.Members, ViewID: v.ID, Retain: true,
				Window: 16, MTU: 9000, MaxPayload: 8901, HeartbeatInterval: 20 * clock.Millisecond, FailureTimeout: 400 * clock.Millisecond})
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	c := wrap(vc)
	now := clock.Time(1)
	for i := 0; !vc.Installed(); i++ {
		if i == 1000 {
			b.Fatal("no view of one")
		}
		now += clock.Time(clock.Millisecond)
		c.Tick(now)
		c.Ready()
		c.Advance()
	}
	for range 3 { // the view's acceptance and its event
		now += clock.Time(clock.Millisecond)
		c.Tick(now)
		c.Ready()
		c.Advance()
	}
	m := make([]byte, c.Info().MaxMessage)
	b.SetBytes(int64(len(m)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Propose(now, m); err != nil {
			b.Fatal(err)
		}
		if rd := c.Ready(); len(rd.Deliveries) != 1 {
			b.Fatalf("%d deliveries", len(rd.Deliveries))
		}
		c.Advance()
		now++
		c.Tick(now)
	}
}
