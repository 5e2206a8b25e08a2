package auth

// window is a receiver's anti-replay window for one sender's stream (one
// source MAC, member id and incarnation): a counter is accepted once, and
// only if it is no more than windowSize behind the highest accepted. It is
// the bitmap of RFC 6479 as WireGuard keeps it (wireguard-go,
// replay/replay.go; IPsec's window is RFC 4303 §3.4.3): a ring of 64-bit
// blocks, the blocks the top moves past cleared, so that advancing costs
// no shifting of the whole map.
//
// The check and the update are apart: fresh before the tag is verified
// (cheap rejection of replays), mark after (a forged counter must not
// move the window).
type window struct {
	last   uint64 // highest counter marked
	any    bool   // something was marked
	blocks [ringBlocks]uint64
}

const (
	blockBitLog = 6
	blockBits   = 1 << blockBitLog
	ringBlocks  = 1 << 6
	// windowSize is how far behind the highest counter a frame may
	// arrive: a sender's retransmissions (link.NowSender) overtake the
	// frames it staged and the kernel has not sent yet, a few hundred at
	// most.
	windowSize = (ringBlocks - 1) * blockBits
	blockMask  = ringBlocks - 1
	bitMask    = blockBits - 1
)

// fresh says whether counter c was never marked and is not behind the
// window: 0, or the reason to drop it.
func (w *window) fresh(c uint64) reason {
	if !w.any || c > w.last {
		return 0
	}
	if w.last-c >= windowSize {
		return dropOld
	}
	if w.blocks[(c>>blockBitLog)&blockMask]&(1<<(c&bitMask)) != 0 {
		return dropReplay
	}
	return 0
}

// mark records c (fresh said yes, and the tag verified).
func (w *window) mark(c uint64) {
	block := c >> blockBitLog
	if !w.any {
		w.any, w.last = true, c
	} else if c > w.last {
		current := w.last >> blockBitLog
		diff := min(block-current, ringBlocks)
		for i := current + 1; i <= current+diff; i++ {
			w.blocks[i&blockMask] = 0
		}
		w.last = c
	}
	w.blocks[block&blockMask] |= 1 << (c & bitMask)
}
