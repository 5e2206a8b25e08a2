package daemon

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/rbcast/rbcast/frame"
)

// wireCounts counts, from the frames the daemon's link sends and
// receives (the watchLink sees both), the repair traffic between this
// member and each other, per (sender, receiver) pair — one of the two is
// always this member: repair requests (Nack; under total order,
// SeqRetransmit to the sequencer) and retransmitted frames (the
// RETRANSMIT flag). What Aeron users ask of a channel; the runtime's own
// counters are totals.
//
// Member ids are taken from the frames: a received frame names its
// sender, and tells the MAC that sender has, which is how a unicast
// destination is named by id. Only the fixed header is read of received
// frames (they are not validated yet); of sent ones also the Nack's
// target (the runtime built them).
type wireCounts struct {
	macs  [maxWatched]atomic.Uint64 // a member's MAC, packed, with knownMAC set; 0: not seen
	maxID atomic.Int32              // the highest id whose MAC is known (-1: none)
	own   uint64                    // this link's MAC, packed

	nacksTo, nacksFrom [maxWatched]atomic.Uint64 // sent to member i as target; received from member i, addressed to us
	retxTo, retxFrom   [maxWatched]atomic.Uint64 // retransmissions sent to member i (unicast); received from member i
	retxToAll          atomic.Uint64             // retransmissions sent to the group address
	toUnknown          atomic.Uint64             // sent to a MAC no received frame has named yet
}

// knownMAC marks a packed MAC as set (a MAC is 48 bits).
const knownMAC = 1 << 48

func packMAC(b []byte) uint64 {
	return uint64(binary.BigEndian.Uint16(b[0:2]))<<32 | uint64(binary.BigEndian.Uint32(b[2:6])) | knownMAC
}

func newWireCounts() *wireCounts {
	w := &wireCounts{}
	w.maxID.Store(-1)
	return w
}

// setOwn records this link's MAC (a link without a 6-byte one matches no
// destination).
func (w *wireCounts) setOwn(mac []byte) {
	if len(mac) == 6 {
		w.own = packMAC(mac)
	}
}

// received looks at one received frame of our version: b is the Ethernet
// frame, v its rbcast header (at least frame.HeaderLen bytes).
func (w *wireCounts) received(b []byte, v frame.View) {
	id := int(v.Sender())
	if id >= maxWatched {
		return
	}
	if mac := packMAC(b[6:12]); w.macs[id].Load() != mac {
		w.macs[id].Store(mac)
		for m := w.maxID.Load(); int32(id) > m && !w.maxID.CompareAndSwap(m, int32(id)); m = w.maxID.Load() {
		}
	}
	switch t := v.Type(); {
	case (t == frame.Nack || t == frame.SeqRetransmit) && packMAC(b[0:6]) == w.own:
		w.nacksFrom[id].Add(1)
	case v.Flags()&frame.FlagRetransmit != 0:
		w.retxFrom[id].Add(1)
	}
}

// sent looks at frames the runtime sent.
func (w *wireCounts) sent(frames [][]byte) {
	for _, b := range frames {
		if len(b) < frame.EthernetHeaderLen+frame.HeaderLen {
			continue
		}
		v := frame.View(b[frame.EthernetHeaderLen:])
		if v.Version() != frame.Version {
			continue
		}
		switch t := v.Type(); {
		case t == frame.Nack:
			if id, ok := nackTarget(v); ok && id < maxWatched {
				w.nacksTo[id].Add(1)
			}
		case t == frame.SeqRetransmit:
			if id, ok := w.member(b[0:6]); ok {
				w.nacksTo[id].Add(1)
			}
		case v.Flags()&frame.FlagRetransmit != 0:
			if b[0]&1 != 0 {
				w.retxToAll.Add(1)
			} else if id, ok := w.member(b[0:6]); ok {
				w.retxTo[id].Add(1)
			}
		}
	}
}

// member is the id of the member whose MAC is dst.
func (w *wireCounts) member(dst []byte) (int, bool) {
	mac := packMAC(dst)
	for id := range int(w.maxID.Load()) + 1 {
		if w.macs[id].Load() == mac {
			return id, true
		}
	}
	w.toUnknown.Add(1)
	return 0, false
}

// pairCount is one (sender, receiver) pair's count; Receiver -1 is the
// whole group (a retransmission to the group address).
type pairCount struct {
	Sender, Receiver int
	N                uint64
}

// pairs returns the non-zero counts, with self as the other end.
func (w *wireCounts) pairs(self int) (nacks, retx []pairCount) {
	for id := range maxWatched {
		if n := w.nacksTo[id].Load(); n > 0 {
			nacks = append(nacks, pairCount{Sender: id, Receiver: self, N: n})
		}
		if n := w.nacksFrom[id].Load(); n > 0 {
			nacks = append(nacks, pairCount{Sender: self, Receiver: id, N: n})
		}
		if n := w.retxTo[id].Load(); n > 0 {
			retx = append(retx, pairCount{Sender: self, Receiver: id, N: n})
		}
		if n := w.retxFrom[id].Load(); n > 0 {
			retx = append(retx, pairCount{Sender: id, Receiver: self, N: n})
		}
	}
	if n := w.retxToAll.Load(); n > 0 {
		retx = append(retx, pairCount{Sender: self, Receiver: -1, N: n})
	}
	return nacks, retx
}

// nackTarget is the target of the Nack v, if v is long enough to name
// one (without an authentication section, which no build sends yet).
func nackTarget(v frame.View) (int, bool) {
	n := v.Length()
	if n > len(v) || v.Flags()&frame.FlagAuth != 0 {
		return 0, false
	}
	body := frame.HeaderLen + v.AckCount()*frame.AckEntryLen
	if body+2+frame.CRCLen > n {
		return 0, false
	}
	return int(frame.View(v[:n]).NackTarget()), true
}
