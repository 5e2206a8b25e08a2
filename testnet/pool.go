package testnet

import "math/bits"

// packet is one frame's bytes in flight or queued; refs counts its holders
// (the sender while it fans a frame out, then each receiver's own copy).
type packet struct {
	buf  []byte
	refs int
}

// packetPool recycles packets by size class (powers of two from 64 bytes) so
// that steady-state traffic allocates nothing per frame.
type packetPool struct {
	free [12][]*packet
}

const minClassShift = 6 // 64 bytes

func sizeClass(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

// get returns a packet holding a copy of b, with no references.
func (p *packetPool) get(b []byte) *packet {
	c := sizeClass(len(b))
	var pkt *packet
	if c < len(p.free) {
		if k := len(p.free[c]); k > 0 {
			pkt = p.free[c][k-1]
			p.free[c] = p.free[c][:k-1]
		} else {
			pkt = &packet{buf: make([]byte, 0, 1<<(c+minClassShift))}
		}
	} else {
		pkt = &packet{buf: make([]byte, 0, len(b))}
	}
	pkt.buf = append(pkt.buf[:0], b...)
	pkt.refs = 0
	return pkt
}

// release drops one reference and recycles the packet when none is left.
func (p *packetPool) release(pkt *packet) {
	pkt.refs--
	if pkt.refs > 0 {
		return
	}
	p.put(pkt)
}

func (p *packetPool) put(pkt *packet) {
	c := sizeClass(cap(pkt.buf))
	if c < len(p.free) && cap(pkt.buf) == 1<<(c+minClassShift) {
		p.free[c] = append(p.free[c], pkt)
	}
}
