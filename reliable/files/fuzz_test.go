package files

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// FuzzCore feeds a receiver and a sender arbitrary file frames — offers,
// blocks, ends, gones and reports with fuzzed fields (every failure
// reason, and offers beyond the receiver's MaxBlocks), from two senders
// and two incarnations — at fuzzed instants. Neither may panic or return
// output between Ready and Advance; a receiver commits only a file whose
// bytes hash to its offer's hash (memSink checks), and a sender reports
// at most one verdict per file.
func FuzzCore(f *testing.F) {
	seed := []byte{}
	// An offer of 20 bytes in blocks of 5, its 4 blocks, an end.
	seed = append(seed, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 5)
	for b := range 4 {
		seed = append(seed, 1, 1, 0, 1, 0, 0, 0, byte(b), 0, 0, 0, 0, 0, 0, 0, 0)
	}
	seed = append(seed, 2, 1, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0)
	f.Add(seed)
	// An offer of 40 blocks, beyond the receiver's MaxBlocks (refused,
	// the sender told), a block of it, an end awaiting the receiver, and
	// a report refusing a file for no room.
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 40, 0, 0, 0, 1, 0, 0, 0, 1,
		1, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1,
		2, 0, 0, 2, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, 9,
		4, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 9})
	// Reports refusing a file as larger than the receiver's file system
	// allows (reason 1 + 11 % FileReasonMax = 12), and for a name that
	// is not a local path there (13).
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1,
		4, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 11,
		4, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 12})
	f.Fuzz(runFuzzCore)
}

func runFuzzCore(t *testing.T, in []byte) {
	data := []byte("0123456789abcdefghij")
	h := sha256.Sum256(data)
	{
		sink := newMemSink(func(format string, args ...any) { t.Fatalf(format, args...) })
		// Offers have up to 63 blocks: those of more than 32 are beyond
		// the receiver's limit.
		r := newCore(t, 2, sink, func(c *Config) { c.MaxBlocks = 32 })
		s := newCore(t, 1, nil, nil)
		src := &memSource{data: data, bs: s.cfg.BlockSize, fail: -1}
		o := Outgoing{Name: "x", Size: uint64(len(data)), Hash: h, Source: src}
		if len(in)%32 >= 16 { // an odd number of operations: the file is a BLAKE3 one
			o.Hash, o.HashAlg = mustSum(frame.FileHashBLAKE3, data), frame.FileHashBLAKE3
		}
		if _, err := s.Send(2, o); err != nil {
			t.Fatal(err)
		}
		verdicts := 0
		now := Time(10)
		for len(in) >= 16 {
			op, in2 := in[:16], in[16:]
			in = in2
			kind, from, inc := op[0]%5, frame.MemberID(1+op[1]%2), uint32(11+op[2]%2)
			id := uint32(op[3]%3) + 1
			a, b := binary.BigEndian.Uint32(op[4:]), binary.BigEndian.Uint32(op[8:])
			c := binary.BigEndian.Uint32(op[12:])
			now += Time(op[15]) * Time(Millisecond)
			var body frame.Body
			var seq uint32
			switch kind {
			case 0:
				size := uint64(a % 64)
				bs := max(1, b%16)
				// SHA-256, BLAKE3, or an algorithm no build knows.
				alg := []frame.FileHashAlg{frame.FileHashSHA256, frame.FileHashBLAKE3, 77}[c%3]
				hash := h
				if size != 20 || alg != frame.FileHashSHA256 {
					hash = sha256.Sum256(data[:min(int(size), len(data))])
					if alg.Known() {
						hash = mustSum(alg, data[:min(int(size), len(data))])
					}
				}
				body = &frame.FileOfferBody{ID: id, Size: size, BlockSize: bs, Hash: hash, Name: []byte{'n', byte('0' + id)}, Alg: alg}
			case 1:
				seq = a % 16
				n := 1 + int(b%8)
				blk := make([]byte, n)
				for i := range blk {
					blk[i] = data[(int(seq)*n+i)%len(data)]
				}
				body = &frame.FileDataBody{ID: id, Data: blk}
			case 2:
				body = &frame.FileEndBody{ID: id, Blocks: a % 16, SRTT: b % 10000, Stamp: c, Awaited: []frame.MemberID{2}}
			case 3:
				body = &frame.FileGoneBody{ID: id, Reason: frame.FileReason(3 + a%3)}
			case 4:
				top := a % 20
				st := &frame.FileStatusBody{ID: id, Incarnation: inc, State: frame.FileState(1 + b%4), Credit: uint16(c), Held: b % 20, Top: top, Echo: c}
				if st.State == frame.FileFailed {
					st.Reason = frame.FileReason(1 + c%uint32(frame.FileReasonMax))
				}
				if top > 2 {
					st.Missing = []frame.Range{{First: 0, Last: top / 2}}
				}
				body, from = st, frame.MemberID(2+op[1]%2)
			}
			var flags frame.Flags
			if kind == 4 && op[2]&2 != 0 {
				flags = frame.FlagHashAlg // a receiver of this version; without: one from before
			}
			v := encode(t, from, inc, seq, flags, body)
			r.Step(now, macA, macB, v)
			s.Step(now, macB, macA, v)
			for _, c := range []*Core{r, s} {
				c.Tick(now)
				for _, rep := range c.Reports() {
					if rep.Kind == Verdict {
						verdicts++
					}
				}
				sent(t, c)
				if d := c.Deadline(); d != 0 && d < now {
					t.Fatalf("deadline %d before now %d", d, now)
				}
			}
		}
		if verdicts > 1 {
			t.Fatalf("%d verdicts on one file", verdicts)
		}
	}
}
