package auth

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestCRCCombine: the CRC of a‖b from those of a and b, for every split
// of random bytes of the lengths a frame has.
func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 64, 255, 256, 1500, 8999, 9216} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		for _, cut := range []int{0, n / 3, n / 2, n} {
			x, y := b[:cut], b[cut:]
			want := crc32.Checksum(b, castagnoli)
			got := multModP(xPow8n(len(y)), crc32.Checksum(x, castagnoli)) ^ crc32.Checksum(y, castagnoli)
			if got != want {
				t.Fatalf("%d bytes cut at %d: combined %08x, whole %08x", n, cut, got, want)
			}
		}
	}
}

// TestSealedFramesUnchanged: the seal computes a MAC-sealed frame's CRC
// from the core's (sealedCRC) instead of over the whole frame; the frames
// it sends are byte for byte those of a CRC over the sealed frame
// (frame.SetCRC, the seal before), for bodies around combineMin and up to
// a jumbo frame, ack vectors of 0 to 17 entries, both algorithms and
// several frames in one Send (the cached shift changes length).
func TestSealedFramesUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, encrypt := range []bool{false, true} {
		s := &collect{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}}
		a := wrap(t, s, testKey(t, 1), encrypt)
		for _, size := range []int{0, 1, 100, combineMin - 1, combineMin, combineMin + 1, 1400, 8900} {
			for _, acks := range []int{0, 1, 17} {
				var batch [][]byte
				for seq := range 3 {
					payload := make([]byte, size+seq) // three lengths in one batch
					for i := range payload {
						payload[i] = byte(rng.Uint32())
					}
					h := frame.Header{Group: 7, Sender: 3, Incarnation: 5, Seq: uint32(seq), AckBase: 2, Acks: make([]uint32, acks)}
					for i := range h.Acks {
						h.Acks[i] = rng.Uint32()
					}
					f := frame.AppendEthernet(nil, frame.Broadcast, s.mac, frame.EtherType)
					f, err := frame.Append(f, &h, &frame.Payload{T: frame.Data, Data: payload})
					if err != nil {
						t.Fatal(err)
					}
					batch = append(batch, f)
				}
				s.frames = s.frames[:0]
				if _, err := a.Send(batch); err != nil {
					t.Fatal(err)
				}
				for i, got := range s.frames {
					want := bytes.Clone(got)
					frame.SetCRC(want[frame.EthernetHeaderLen:])
					if !bytes.Equal(got, want) {
						t.Fatalf("encrypt=%v, %d-byte payload, %d acks, frame %d: CRC %x, a CRC over the sealed frame gives %x",
							encrypt, size+i, acks, i, got[len(got)-4:], want[len(want)-4:])
					}
					if _, err := frame.Parse(got[frame.EthernetHeaderLen:]); err != nil && !encrypt {
						t.Fatalf("%d-byte payload, %d acks, frame %d: %v", size+i, acks, i, err)
					}
				}
			}
		}
	}
}

// collect keeps a copy of every frame sent.
type collect struct {
	fake
	frames [][]byte
}

func (c *collect) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		c.frames = append(c.frames, bytes.Clone(f))
	}
	return len(frames), nil
}
