package invariant

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
)

// bindings finds a sequence number, global number or request bound to two
// different things: seq-reuse, global-reuse, sequenced-twice.
type bindings struct {
	data    bounded[dataKey, dataBinding]
	globals bounded[globalKey, globalBinding]
	uids    bounded[uidKey, uidBinding]
	// numbered: the global a SeqData last numbered a request with, so a
	// request captured after its SeqData is compared with it.
	numbered bounded[frame.UID, globalKey]
}

func (b *bindings) init(window int) {
	b.data = newBounded[dataKey, dataBinding](window)
	b.globals = newBounded[globalKey, globalBinding](window)
	b.uids = newBounded[uidKey, uidBinding](window)
	b.numbered = newBounded[frame.UID, globalKey](window)
}

// dataKey names a Data frame's seq or a SeqRequest's request number.
type dataKey struct {
	t      frame.Type
	sender frame.MemberID
	inc    uint32
	view   uint32
	seq    uint32
}

type dataBinding struct {
	p        payload
	frame    int
	reported []uint64 // hashes of the differing payloads reported
}

type globalKey struct{ epoch, global uint32 }

// globalBinding is what a global number is bound to: a request (uid), or,
// for a SeqMember, a change of the member list (see memberChange).
type globalBinding struct {
	uid      frame.UID
	p        payload
	has      bool // p is set (a SeqData or SeqMember; an Accept carries no payload)
	frame    int
	reported bool
}

type uidKey struct {
	epoch uint32
	uid   frame.UID
}

type uidBinding struct {
	global   uint32
	frame    int
	reported bool
}

// memberChange is a SeqMember's binding: no request has Origin NoMember.
func memberChange(c frame.SeqMemberBody) frame.UID {
	return frame.UID{Origin: frame.NoMember, Incarnation: c.Incarnation, Seq: uint32(c.Member)}
}

// boundTo names what a global is bound to.
func boundTo(u frame.UID) string {
	if u.Origin == frame.NoMember {
		return fmt.Sprintf("the change of member %d.%d", u.Seq, u.Incarnation)
	}
	return fmt.Sprintf("request %d.%d#%d", u.Origin, u.Incarnation, u.Seq)
}

type reportFunc func(kind, detail string, frames ...int)

// bind checks f's bindings and records them.
func (c *Checker) bind(f *Frame, report reportFunc) {
	v := f.View
	switch v.Type() {
	case frame.Data, frame.SeqRequest:
		k := dataKey{v.Type(), v.Sender(), v.Incarnation(), v.ViewID(), v.Seq()}
		p := c.hash(v)
		b, ok := c.data.get(k)
		if !ok {
			c.data.put(k, dataBinding{p: p, frame: f.N})
			if v.Type() == frame.SeqRequest {
				c.checkRequest(f, frame.UID{Origin: k.sender, Incarnation: k.inc, Seq: k.seq}, p, report)
			}
			return
		}
		if b.p.hash == p.hash {
			return
		}
		for _, h := range b.reported {
			if h == p.hash {
				return
			}
		}
		b.reported = append(b.reported, p.hash)
		c.data.put(k, b)
		what := "seq"
		if k.t == frame.SeqRequest {
			what = "request"
		}
		report(KindSeqReuse, fmt.Sprintf("member %d.%d %s %d: frame %d carries %d payload bytes that differ from the %d of frame %d",
			k.sender, k.inc, what, k.seq, f.N, p.n, b.p.n, b.frame), b.frame, f.N)
	case frame.SeqData:
		c.bindGlobal(f, v.SeqDataEpoch(), v.Seq(), v.SeqDataUID(), c.hash(v), true, report)
	case frame.SeqMember:
		ch := v.SeqMemberChange()
		c.bindGlobal(f, ch.Epoch, v.Seq(), memberChange(ch), payload{hash: uint64(ch.Change)<<8 | uint64(ch.Reason)}, true, report)
	case frame.SeqAccept:
		al := v.Accepts()
		for i := range al.Len() {
			e := al.At(i)
			c.bindGlobal(f, v.AcceptEpoch(), e.Global, e.UID, payload{}, false, report)
		}
	}
}

// bindGlobal binds global g of epoch to u (with payload p when has).
// Bindings are values, stored again when changed: no allocation per
// frame.
func (c *Checker) bindGlobal(f *Frame, epoch, g uint32, u frame.UID, p payload, has bool, report reportFunc) {
	k := globalKey{epoch, g}
	b, ok := c.globals.get(k)
	switch {
	case !ok:
		b = globalBinding{uid: u, p: p, has: has, frame: f.N}
		c.globals.put(k, b)
	case b.reported:
	case b.uid != u:
		b.reported = true
		c.globals.put(k, b)
		report(KindGlobalReuse, fmt.Sprintf("epoch %d global %d: frame %d binds it to %s, frame %d to %s", epoch, g, b.frame, boundTo(b.uid), f.N, boundTo(u)), b.frame, f.N)
	case b.has && has && b.p != p:
		b.reported = true
		c.globals.put(k, b)
		if u.Origin == frame.NoMember {
			report(KindGlobalReuse, fmt.Sprintf("epoch %d global %d (%s): frame %d carries another change than frame %d", epoch, g, boundTo(u), f.N, b.frame), b.frame, f.N)
		} else {
			report(KindGlobalReuse, fmt.Sprintf("epoch %d global %d (%s): frame %d carries %d payload bytes that differ from the %d of frame %d", epoch, g, boundTo(u), f.N, p.n, b.p.n, b.frame), b.frame, f.N)
		}
	case !b.has && has:
		b.p, b.has = p, true
		c.globals.put(k, b)
	}
	if u.Origin == frame.NoMember {
		return // a member change: no request to number twice
	}
	if has && !b.reported {
		c.numbered.put(u, k)
		if r, ok := c.data.get(dataKey{frame.SeqRequest, u.Origin, u.Incarnation, f.View.ViewID(), u.Seq}); ok && r.p != p {
			b.reported = true
			c.globals.put(k, b)
			report(KindGlobalReuse, fmt.Sprintf("epoch %d global %d: frame %d numbers %s with a payload that differs from the request's in frame %d", epoch, g, f.N, boundTo(u), r.frame), r.frame, f.N)
		}
	}
	ku := uidKey{epoch, u}
	n, ok := c.uids.get(ku)
	switch {
	case !ok:
		c.uids.put(ku, uidBinding{global: g, frame: f.N})
	case n.global != g && !n.reported:
		n.reported = true
		c.uids.put(ku, n)
		report(KindSequencedTwice, fmt.Sprintf("epoch %d: %s numbered global %d in frame %d and global %d in frame %d; it would be delivered twice", epoch, boundTo(u), n.global, n.frame, g, f.N), n.frame, f.N)
	}
}

// checkRequest compares a request seen for the first time with the SeqData
// that numbered it, if that came first.
func (c *Checker) checkRequest(f *Frame, u frame.UID, p payload, report reportFunc) {
	k, ok := c.numbered.get(u)
	if !ok {
		return
	}
	b, ok := c.globals.get(k)
	if !ok || b.reported || !b.has || b.uid != u || b.p == p {
		return
	}
	b.reported = true
	c.globals.put(k, b)
	report(KindGlobalReuse, fmt.Sprintf("epoch %d global %d: frame %d numbers %s with a payload that differs from the request's in frame %d", k.epoch, k.global, b.frame, boundTo(u), f.N), b.frame, f.N)
}
