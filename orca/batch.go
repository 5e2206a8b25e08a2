package orca

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rbcast/rbcast/frame"
)

// Batches (docs/orca.md, "Batches"): while one of this member's messages
// is in flight, the writes its callers start (and their cancellations
// and digests) are not sent one message each but appended to a batch,
// which goes out as one message of the order when the next would not fit
// in it (by the writer that found it full), or from Deliver when one of
// this member's messages comes back (or, as a safety net, once
// batchAge other messages came, or an event). A lone write (nothing in
// flight) goes out at once, as before: batching costs no latency when
// there is nothing to share a message with; so does a write two of which
// would not fit in a message (it would only wait). It needs an Env that can
// send from Deliver without waiting (TrySender); on others every message
// goes alone.
//
// Every replica takes a batch's messages in their order, each counting
// as a message of the order (its own position), so a batch is the same
// to the replicas as its messages sent one after the other without
// another member's between them: the total order, and every guarantee
// built on it, is unchanged.

// batchAge is how many deliveries of other members' messages a batch
// waits at most before Deliver sends it even though none of this
// member's came back (which it always does while the group works).
const batchAge = 16

// outbox is a node's batch being filled (mu guards it). sendMu orders
// the sending of batches and other messages: taking the batch and
// sending it happen under sendMu, and a message is sent without sendMu
// only while no batch is being filled or sent (queue: sendNow), so a
// message a caller queued goes before any message it sends later.
type outbox struct {
	mu sync.Mutex
	// buf is the batch (msgBatch, then its entries) while entries > 0;
	// spare is a buffer for the next (buf's is in Send meanwhile).
	buf, spare []byte
	entries    int
	// filling is entries > 0, read without mu: flushFromDeliver's
	// check whether there is a batch to send, on every delivery.
	filling atomic.Bool
	// unacked counts this member's messages sent and not yet delivered
	// back here; age the other members' messages delivered since the
	// batch was started; inTransit the batches taken by sendBatchLocked
	// and not yet handed to the Env.
	unacked, age, inTransit int
}

// sent counts k messages of this member sent (k < 0: taken back, the
// Send failed, or delivered back).
func (o *outbox) sent(k int) {
	o.mu.Lock()
	o.unacked = max(o.unacked+k, 0)
	o.mu.Unlock()
}

// How send sends a message (queue).
const (
	// queued: it is in the batch.
	queued = iota
	// sendNow: alone, at once: nothing of this member waits to be sent
	// before it (it is counted in flight already).
	sendNow
	// sendOrdered: alone, with sendMu, after the batch.
	sendOrdered
)

// queue appends msg to the batch if one of this member's messages is in
// flight, and it fits in the batch being filled or could share a new one
// with another as long; else it says how to send it alone.
func (n *Node) queue(msg []byte) int {
	if n.try == nil {
		return sendNow
	}
	o := &n.out
	o.mu.Lock()
	defer o.mu.Unlock()
	fits := len(o.buf)+batchEntryHeader+len(msg) <= n.maxMessage
	if o.entries == 0 {
		fits = o.unacked > 0 && 1+2*(batchEntryHeader+len(msg)) <= n.maxMessage
	}
	switch {
	case fits && len(msg) <= 0xffff:
	case o.entries == 0 && o.inTransit == 0:
		// No batch of this member is waiting or being sent: nothing
		// its caller queued before can come after it.
		o.unacked++
		return sendNow
	default:
		return sendOrdered
	}
	if o.entries == 0 {
		o.buf, o.age = append(o.buf[:0], msgBatch), 0
		o.filling.Store(true)
	}
	o.buf = binary.BigEndian.AppendUint16(o.buf, uint16(len(msg)))
	o.buf = append(o.buf, msg...)
	o.entries++
	return queued
}

// batchMsg is the message that carries the batch: the batch, or its one
// entry alone.
func (o *outbox) batchMsg() []byte {
	if o.entries == 1 {
		return o.buf[1+batchEntryHeader:]
	}
	return o.buf
}

// sendBatchLocked sends the batch, if there is one, waiting for the send
// window (sendMu held). It does not give up when a caller's context
// ends: the batch holds other callers' writes.
func (n *Node) sendBatchLocked() error {
	o := &n.out
	o.mu.Lock()
	if o.entries == 0 {
		o.mu.Unlock()
		return nil
	}
	b, k := o.buf, o.entries
	msg := o.batchMsg()
	o.buf, o.spare, o.entries = o.spare[:0], nil, 0
	o.filling.Store(false)
	o.unacked++
	o.inTransit++
	o.mu.Unlock()
	err := n.env.Send(context.Background(), msg)
	o.mu.Lock()
	o.spare = b[:0]
	o.inTransit--
	if err != nil {
		o.unacked = max(o.unacked-1, 0)
	}
	o.mu.Unlock()
	if err != nil {
		return fmt.Errorf("orca: sending a batch of %d messages: %w", k, err)
	}
	n.countBatch(k, len(msg))
	return nil
}

// flushQueued sends the batch now (Close: before leaving).
func (n *Node) flushQueued() {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	n.sendBatchLocked()
}

// Flush sends this member's batch now, if it holds writes (or
// cancellations, digests), rather than when one of the member's messages
// in flight comes back: for a program that has started the last writes
// of a phase and whose peers wait for them, so that they go out without
// waiting for the round trip of what went before them (docs/orca.md,
// "Batches"). It waits for the send window as a Send does, and not for
// the writes to be applied. Without a batch (nothing queued, or an Env
// that is not a TrySender) it does nothing. Flushing after every write
// gives up batching: each write then costs a message of the order.
//
// Flush takes no context: the batch holds other callers' writes, so it
// is not given up. Call it from a program's goroutine, as Call, never
// from an operation's body or guard: with the window full it waits for
// deliveries, which cannot run while an operation does.
func (n *Node) Flush() error {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	return n.sendBatchLocked()
}

// flushFromDeliver sends the batch from Deliver or OnEvent, without
// waiting: when a message of this member came back (own), none is in
// flight, the batch waited batchAge deliveries, or force. If another
// goroutine is sending (sendMu), or the window is full, it stays for the
// next delivery (one of this member's messages is in flight then).
//
// With no batch being filled it takes no lock, an atomic load only: the
// delivery of a lone write (nothing else of this member in flight, so
// nothing queued) goes on to its caller's wake-up at once. A write that
// starts a batch after the load was queued because a message of this
// member was in flight then (queue's unacked, which an own delivery
// took down under out.mu before), and that message's delivery sends it.
func (n *Node) flushFromDeliver(own, force bool) {
	o := &n.out
	if !o.filling.Load() {
		return
	}
	if !n.sendMu.TryLock() {
		return
	}
	defer n.sendMu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.entries == 0 {
		return
	}
	o.age++
	if !own && !force && o.unacked > 0 && o.age < batchAge {
		return
	}
	msg := o.batchMsg()
	if err := n.try(msg); err != nil {
		return
	}
	o.unacked++
	n.countBatch(o.entries, len(msg))
	o.buf, o.entries = o.buf[:0], 0
	o.filling.Store(false)
}

func (n *Node) countBatch(entries, bytes int) {
	n.countSent(1, bytes, 0)
	if entries > 1 {
		n.sent.batches.Add(1)
		n.sent.batched.Add(uint64(entries))
	}
}

// deliverBatchLocked takes a batch delivered from member from (n.mu
// held): each of its messages in turn, each at a position of its own.
func (n *Node) deliverBatchLocked(from frame.MemberID, data []byte) {
	rest := data[1:]
	if len(rest) == 0 {
		n.delivered++
		n.bad(from, "an empty batch")
		return
	}
	for len(rest) > 0 && n.err == nil {
		n.delivered++
		if len(rest) < batchEntryHeader {
			n.bad(from, fmt.Sprintf("a batch whose last %d bytes are too few for an entry's %d-byte length", len(rest), batchEntryHeader))
			return
		}
		l := int(binary.BigEndian.Uint16(rest))
		rest = rest[batchEntryHeader:]
		if l > len(rest) {
			n.bad(from, fmt.Sprintf("a batch entry of %d bytes, longer than the %d bytes left", l, len(rest)))
			return
		}
		msg := rest[:l]
		rest = rest[l:]
		if len(msg) == 0 {
			n.bad(from, "an empty message in a batch")
			continue
		}
		if msg[0] == msgPart || msg[0] == msgLast || msg[0] == msgState || msg[0] == msgBatch {
			n.bad(from, fmt.Sprintf("a message of kind %#x in a batch (an op, cancel or digest only)", msg[0]))
			continue
		}
		n.handle(from, msg, n.delivered)
	}
}
