package auth

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"slices"
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

// TestSealedFramesUnchanged: the seal derives a MAC-sealed frame's CRC
// from the core's (sealedCRC) and encrypts a body straight from the
// core's frame (InsertAuthNoBody); the frames it sends are byte for byte
// those of the seal before (oldSeal: the frame copied with InsertAuth,
// tagged or encrypted in place, a CRC over the whole), for bodies around
// combineMin and up to a jumbo frame, ack vectors of 0 to 17 entries,
// both algorithms and several lengths in one Send. Encrypted, the core's
// frames are encoded without a CRC (frame.Header.SkipCRC, as a runtime
// does for a link.CRCSealer), and the wire's bytes are still the same.
func TestSealedFramesUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	k := testKey(t, 1)
	for _, encrypt := range []bool{false, true} {
		s := &collect{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}}
		a := wrap(t, s, k, encrypt)
		if a.SealsCRC() != encrypt {
			t.Fatalf("encrypt=%v: SealsCRC = %v", encrypt, a.SealsCRC())
		}
		for _, size := range []int{0, 1, 100, combineMin - 1, combineMin, combineMin + 1, 1400, 8900} {
			for _, acks := range []int{0, 1, 17} {
				var batch, send [][]byte
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
					// What a runtime encodes for this link: without a CRC
					// when the seal writes its own.
					h.SkipCRC = a.SealsCRC()
					f = frame.AppendEthernet(nil, frame.Broadcast, s.mac, frame.EtherType)
					if f, err = frame.Append(f, &h, &frame.Payload{T: frame.Data, Data: payload}); err != nil {
						t.Fatal(err)
					}
					send = append(send, f)
				}
				s.frames = s.frames[:0]
				if _, err := a.Send(send); err != nil {
					t.Fatal(err)
				}
				for i, got := range s.frames {
					_, counter := frame.View(got[frame.EthernetHeaderLen:]).AuthKey()
					want := oldSeal(t, k, encrypt, batch[i], counter)
					if !bytes.Equal(got, want) {
						t.Fatalf("encrypt=%v, %d-byte payload, %d acks, frame %d: sealed\n%x\nthe seal before gives\n%x", encrypt, size+i, acks, i, got, want)
					}
				}
			}
		}
	}
}

// oldSeal seals eth, a core's frame, as the seal did before sealedCRC and
// InsertAuthNoBody, with counter.
func oldSeal(t *testing.T, k *Key, encrypt bool, eth []byte, counter uint64) []byte {
	t.Helper()
	hl := frame.EthernetHeaderLen
	f, err := frame.ParseSealedNoCRC(eth[hl:])
	if err != nil {
		t.Fatal(err)
	}
	alg := AlgGMAC
	if encrypt {
		alg = AlgGCM
	}
	out, err := frame.InsertAuth(append([]byte(nil), eth[:hl]...), f, alg, k.ID(), counter, TagLen)
	if err != nil {
		t.Fatal(err)
	}
	out = slices.Grow(out, TagLen) // Seal writes the tag behind the body
	aead, err := derive(k, alg, 7, streamID{mac: frame.Ethernet(eth[:hl]).Src(), sender: f.Sender(), inc: f.Incarnation()})
	if err != nil {
		t.Fatal(err)
	}
	g := frame.View(out[hl:])
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[:], counter)
	crcAt := len(g) - frame.CRCLen
	var tag []byte
	if alg == AlgGMAC {
		tag = aead.Seal(nil, nonce[:], nil, g[:crcAt])
	} else {
		body := g[g.BodyAt():crcAt]
		tag = bytes.Clone(aead.Seal(body[:0], nonce[:], body, g[:g.BodyAt()])[len(body):])
	}
	at, n := g.AuthTagAt()
	copy(g[at:at+n], tag)
	frame.SetCRC(g)
	return out
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

// TestShift: the shift past n bytes, from pow8 or xPow8n, through the
// tables (a length seen twice in a row) or multModP (a new length),
// equals multModP(xPow8n(n), d).
func TestShift(t *testing.T) {
	for n := range powMax + 1 {
		if pow8()[n] != xPow8n(n) {
			t.Fatalf("pow8()[%d] = %08x, xPow8n %08x", n, pow8()[n], xPow8n(n))
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var s shift
	for _, n := range []int{0, 1, 63, 1024, 1400, 1401, 1400, 1400, powMax, powMax + 1, 0xffff, 0xffff, 1400} {
		for range 50 {
			d := rng.Uint32()
			if got, want := s.mul(n, d), multModP(xPow8n(n), d); got != want {
				t.Fatalf("%d bytes, %08x: %08x, want %08x (tables built: %v)", n, d, got, want, s.built)
			}
		}
		if !s.built {
			t.Fatalf("%d bytes 50 times: tables never built", n)
		}
	}
}
