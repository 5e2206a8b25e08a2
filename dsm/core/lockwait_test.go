package core

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// A peer's lock wait ends when every live member answered its request
// (the replies are broadcast), not at its next message that is not a
// lock message: over one group Holds stays false on the global channel
// while a requester writes (from another goroutine, or after an
// abandoned Lock), whatever the order in which the replies arrive, and
// turns true once the last one is seen, Self's own deferred reply or a
// member's removal included (docs/dsm.md, "WC over one group").
func TestHoldsGlobalLockWaitEndsAtReplies(t *testing.T) {
	update := AppendRecord(AppendUpdateHeader(nil, TypeUpdate, 1, 8), 0, 1, make([]byte, 8))
	// Self 4; member 1 a partial barrier ahead (held by WC), member 2
	// the requester, member 3 a third replier.
	c, err := New(Config{Self: 4, Members: []frame.MemberID{1, 2, 3, 4}, MaxMessage: 1400})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Receive(1, AppendSegment(nil, 1, Geometry{Locations: 4, LocationSize: 8}, false)); err != nil {
		t.Fatal(err)
	}
	if err := c.Receive(1, AppendBarrier(nil, 1, 1|SeqPartial)); err != nil {
		t.Fatal(err)
	}
	receive := func(from frame.MemberID, msg []byte) {
		t.Helper()
		if err := c.Receive(from, msg); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(want bool, when string) {
		t.Helper()
		if got := c.Holds(Global, 1); got != want {
			t.Fatalf("%s: Holds(Global, 1) %v, want %v", when, got, want)
		}
	}
	holds(true, "member 1 crossed partial barrier 1 ahead of Self")

	// Member 3's reply overtakes member 2's request (different senders).
	receive(3, AppendLockReply(nil, 7, 2, 1))
	holds(true, "a reply to a request not seen yet")
	receive(2, AppendLockRequest(nil, 7, 1))
	holds(false, "member 2 requested lock 7 (Self answered, member 1 has not)")
	receive(2, update)
	receive(2, AppendSegment(nil, 2, Geometry{Locations: 4, LocationSize: 8}, false))
	holds(false, "member 2 wrote and announced a segment while its request lacks member 1's reply")
	receive(1, AppendLockReply(nil, 7, 2, 1))
	holds(true, "every member answered member 2's request")

	// Self holds the lock: its reply to member 2 waits for its Unlock.
	if err := c.RequestLock(7); err != nil {
		t.Fatal(err)
	}
	for _, id := range []frame.MemberID{1, 2, 3} {
		receive(id, AppendLockReply(nil, 7, 4, c.lockTS))
	}
	if !c.Holding(7) {
		t.Fatal("Self was not granted lock 7")
	}
	receive(2, AppendLockRequest(nil, 7, c.lockTS+1))
	receive(1, AppendLockReply(nil, 7, 2, c.lockTS+1))
	receive(3, AppendLockReply(nil, 7, 2, c.lockTS+1))
	receive(2, update)
	holds(true, "Self deferred its reply to member 2, which member 1 answered: member 2 waits for Self's Unlock, not for member 1")
	if !c.lockWait(2) {
		t.Fatal("member 2's request lacks Self's deferred reply, yet it does not wait")
	}
	if err := c.Unlock(7); err != nil {
		t.Fatal(err)
	}
	holds(true, "Self's Unlock answered member 2")
	if c.lockWait(2) {
		t.Fatal("Self's Unlock answered member 2, yet it waits")
	}

	// A member that never answers is removed: the wait ends.
	receive(2, AppendLockRequest(nil, 7, c.clock+1))
	receive(1, AppendLockReply(nil, 7, 2, c.clock))
	holds(true, "member 2's request lacks member 3's reply, not member 1's")
	if !c.lockNeeds(c.peer(3)) {
		t.Fatal("member 2's request lacks member 3's reply: lockNeeds(member 3) false")
	}
	c.MemberGone(3)
	if c.lockWait(2) {
		t.Fatal("member 3, which did not answer, was removed, yet member 2 waits")
	}
	c.MemberBack(3)
	if !c.lockWait(2) || !c.lockNeeds(c.peer(3)) {
		t.Fatal("member 3 is back, its reply still missing: member 2 does not wait for it")
	}
	holds(true, "member 3 is back: member 2 waits for member 3, not for member 1")
}

// Over one group a hold of a peer ends only while a request seen here
// lacks that peer's answer (lockNeeds), not while any request is out:
// a request that waits for others keeps the hold, Self's own request
// included once the held peer replied (docs/dsm.md, "WC over one
// group").
func TestHoldsGlobalOnlyWhileAnswerNeeded(t *testing.T) {
	// Self 4; member 1 a partial barrier ahead (held by WC), members 2
	// and 3 behind.
	c, err := New(Config{Self: 4, Members: []frame.MemberID{1, 2, 3, 4}, MaxMessage: 1400})
	if err != nil {
		t.Fatal(err)
	}
	receive := func(from frame.MemberID, msg []byte) {
		t.Helper()
		if err := c.Receive(from, msg); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(want bool, when string) {
		t.Helper()
		if got := c.Holds(Global, 1); got != want {
			t.Fatalf("%s: Holds(Global, 1) %v, want %v", when, got, want)
		}
	}
	receive(1, AppendBarrier(nil, 1, 1|SeqPartial))
	holds(true, "member 1 crossed partial barrier 1 ahead of Self")

	receive(2, AppendLockRequest(nil, 7, 5))
	holds(false, "member 2's request lacks member 1's answer")
	receive(1, AppendLockReply(nil, 7, 2, 5))
	holds(true, "member 1 answered member 2's request, which still lacks member 3's")

	// Self requests lock 7 after member 2: member 2 defers its reply.
	if err := c.RequestLock(7); err != nil {
		t.Fatal(err)
	}
	holds(false, "Self's request lacks member 1's reply")
	receive(3, AppendLockReply(nil, 7, 4, c.lockTS))
	receive(1, AppendLockReply(nil, 7, 4, c.lockTS))
	holds(true, "member 1 replied to Self, whose request waits for member 2's deferred reply")
	if c.Holding(7) {
		t.Fatal("Self holds lock 7 without member 2's reply")
	}

	// Member 2 is granted, releases, and answers Self.
	receive(3, AppendLockReply(nil, 7, 2, 5))
	holds(true, "member 2's request has every answer")
	receive(2, AppendLockReply(nil, 7, 4, c.lockTS))
	if !c.Holding(7) {
		t.Fatal("every member replied, yet Self does not hold lock 7")
	}
	holds(true, "Self holds lock 7")
}

// lockWait reports whether member id's last request seen lacks a live
// member's reply.
func (c *Core) lockWait(id frame.MemberID) bool { return c.peer(id).lockWait }

// The cost of following peers' lock waits (updateLockWait: O(P) per lock
// message, O(P²) per MemberGone or MemberBack) at P members: a peer's
// request and every other peer's reply to it, as Self handles them (Self
// answers too), per reply; and a member's removal and return. Numbers in
// docs/dsm.md ("WC over one group").
func BenchmarkLockWait(b *testing.B) {
	for _, members := range []int{4, 16, 64} {
		ids := make([]frame.MemberID, members)
		for i := range ids {
			ids[i] = frame.MemberID(i + 1)
		}
		c, err := New(Config{Self: ids[0], Members: ids, MaxMessage: 1400})
		if err != nil {
			b.Fatal(err)
		}
		requester, repliers := ids[1], ids[2:]
		b.Run(fmt.Sprintf("reply/P=%d", members), func(b *testing.B) {
			b.ReportAllocs()
			msg := make([]byte, 0, 64)
			ts := uint64(0)
			for b.Loop() {
				ts++
				if err := c.Receive(requester, AppendLockRequest(msg[:0], 1, ts)); err != nil {
					b.Fatal(err)
				}
				for _, id := range repliers {
					if err := c.Receive(id, AppendLockReply(msg[:0], 1, requester, ts)); err != nil {
						b.Fatal(err)
					}
				}
				if c.lockNeeds(c.peers[1]) {
					b.Fatal("every member answered, yet a hold of a replier would keep an answer")
				}
				for c.Pending() > 0 {
					c.Next()
					c.Sent()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(members-1)), "ns/lockmsg")
		})
		b.Run(fmt.Sprintf("gone and back/P=%d", members), func(b *testing.B) {
			// The worst case: every peer requests, and every live member
			// but the last peer answered each request, so that every
			// updateLockWait looks at every peer.
			last := ids[members-1]
			for i, r := range ids[1:] {
				ts := uint64(1000 + i)
				if err := c.Receive(r, AppendLockRequest(nil, 2, ts)); err != nil {
					b.Fatal(err)
				}
				for _, id := range ids[1 : members-1] {
					if id != r {
						if err := c.Receive(id, AppendLockReply(nil, 2, r, ts)); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				c.MemberGone(last)
				c.MemberBack(last)
			}
		})
	}
}

// The lock lane (docs/dsm.md, "The lock lane"): RequestLock hands Lane a
// copy of the request it queued, once, while Self is a partial barrier
// ahead of a live peer (which may hold it), and none when no peer may
// hold it (no barrier ahead of anybody, or Timed); a peer's request that
// arrives twice (its datagram and its copy in the stream, in either
// order) is handled once: one reply, or one deferral answered once at
// Unlock.
func TestLockLaneRequestOnce(t *testing.T) {
	c, err := New(Config{Self: 3, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400})
	if err != nil {
		t.Fatal(err)
	}
	receive := func(from frame.MemberID, msg []byte) {
		t.Helper()
		if err := c.Receive(from, msg); err != nil {
			t.Fatal(err)
		}
	}
	replies := func(want uint64, when string) {
		t.Helper()
		if got := c.Counters().LockReplies; got != want {
			t.Fatalf("%s: %d replies sent, want %d", when, got, want)
		}
	}
	// Member 1's request, on the lane and then in the stream.
	receive(1, AppendLockRequest(nil, 7, 4))
	replies(1, "member 1's request")
	receive(1, AppendLockRequest(nil, 7, 4))
	replies(1, "member 1's request again")
	if got := c.Counters().LaneDuplicates; got != 1 {
		t.Fatalf("%d duplicates counted, want 1", got)
	}

	// Ahead of nobody: no lane.
	if err := c.RequestLock(7); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Lane(); ok {
		t.Fatal("a lane copy while no peer may hold Self")
	}
	receive(1, AppendLockReply(nil, 7, 3, c.lockTS))
	receive(2, AppendLockReply(nil, 7, 3, c.lockTS))
	if err := c.Unlock(7); err != nil {
		t.Fatal(err)
	}
	// Self crosses partial barrier 1 with member 1, ahead of member 2:
	// Lane hands out what RequestLock queued, once.
	receive(1, AppendBarrier(nil, 1, 1|SeqPartial))
	if err := c.EnterPartialBarrier(1, 2); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.BarrierPassed(); !ok || err != nil {
		t.Fatalf("partial barrier 1 of 2 with member 1's arrival: passed %v (%v)", ok, err)
	}
	if err := c.RequestLock(7); err != nil {
		t.Fatal(err)
	}
	lane, ok := c.Lane()
	if !ok {
		t.Fatal("no lane copy of Self's request")
	}
	var queued []byte
	for c.Pending() > 0 {
		queued, _ = c.Next()
		queued = append([]byte(nil), queued...)
		c.Sent()
	}
	if string(lane) != string(queued) {
		t.Fatalf("the lane's copy %x, the stream's %x: want the same request", lane, queued)
	}
	if _, ok := c.Lane(); ok {
		t.Fatal("Lane handed out Self's request twice")
	}
	receive(1, AppendLockReply(nil, 7, 3, c.lockTS))
	receive(2, AppendLockReply(nil, 7, 3, c.lockTS))
	if !c.Holding(7) {
		t.Fatal("Self not granted lock 7 with both replies")
	}
	// Member 2 requests it while Self holds it: deferred once, answered
	// once at Unlock, whichever copy came first.
	receive(2, AppendLockRequest(nil, 7, c.clock+1))
	receive(2, AppendLockRequest(nil, 7, c.clock))
	if len(c.deferred) != 1 {
		t.Fatalf("%d requests deferred, want 1", len(c.deferred))
	}
	if err := c.Unlock(7); err != nil {
		t.Fatal(err)
	}
	replies(2, "Self's second Unlock")
	// A request older than the last seen of its member is no new one.
	receive(2, AppendLockRequest(nil, 7, 1))
	replies(2, "member 2's older request")
	if got := c.Counters().LaneDuplicates; got != 3 {
		t.Fatalf("%d duplicates counted, want 3", got)
	}

	timed, err := New(Config{Self: 3, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, Timed: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := timed.EnterPartialBarrier(1, 1); err != nil {
		t.Fatal(err)
	}
	if ok, _ := timed.BarrierPassed(); !ok {
		t.Fatal("partial barrier 1 of 1 not passed")
	}
	if err := timed.RequestLock(7); err != nil {
		t.Fatal(err)
	}
	if _, ok := timed.Lane(); ok {
		t.Fatal("a lane copy with Timed, which no peer holds")
	}
}
