package files

import (
	"math/bits"

	"github.com/rbcast/rbcast/frame"
)

// blockSet is a receiver's record of the blocks it holds: one bit a
// block, and the lowest block it lacks, so a report scans only the part
// with holes.
type blockSet struct {
	bits  []uint64
	n     uint32 // blocks
	held  uint32
	first uint32 // every block below it is held
}

func newBlockSet(n uint32) blockSet {
	return blockSet{bits: make([]uint64, (uint64(n)+63)/64), n: n}
}

func (s *blockSet) has(b uint32) bool { return b < s.n && s.bits[b/64]&(1<<(b%64)) != 0 }

// add marks b held and reports whether it was new.
func (s *blockSet) add(b uint32) bool {
	if b >= s.n || s.has(b) {
		return false
	}
	s.bits[b/64] |= 1 << (b % 64)
	s.held++
	for s.first < s.n && s.has(s.first) {
		if s.first%64 == 0 && s.first+64 <= s.n && s.bits[s.first/64] == ^uint64(0) {
			s.first += 64
			continue
		}
		s.first++
	}
	return true
}

func (s *blockSet) complete() bool { return s.held == s.n }

// missing appends to rs the ranges of blocks below top not held, at most
// max of them, ascending.
func (s *blockSet) missing(rs []frame.Range, top uint32, max int) []frame.Range {
	top = min(top, s.n)
	for b := s.first; b < top && len(rs) < max; {
		w := s.bits[b/64] >> (b % 64)
		if w&1 != 0 {
			// Skip the held run.
			run := uint32(bits.TrailingZeros64(^w))
			b += run
			continue
		}
		// b is missing: find where the hole ends.
		end := b
		for end < top {
			w := s.bits[end/64] >> (end % 64)
			if w == 0 {
				end += 64 - end%64
				continue
			}
			end += uint32(bits.TrailingZeros64(w))
			break
		}
		end = min(end, top)
		rs = append(rs, frame.Range{First: b, Last: end - 1})
		b = end
	}
	return rs
}
