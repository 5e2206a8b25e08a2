package auth

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestSealedFramesUnchanged: the seal writes the sealed frame's CRC
// without reading the core's, under both algorithms (SealsCRC), and
// encrypts a body straight from the core's frame (InsertAuthNoBody); the
// frames it sends are byte for byte those of the seal before (oldSeal:
// the frame, its CRC written by the core, copied with InsertAuth, tagged
// or encrypted in place, a CRC over the whole), for bodies from empty to
// a jumbo frame, ack vectors of 0 to 17 entries, both algorithms and
// several lengths in one Send. The core's frames are encoded without a
// CRC (frame.Header.SkipCRC, as a runtime does for a link.CRCSealer), and
// the wire's bytes are still the same.
func TestSealedFramesUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	k := testKey(t, 1)
	for _, encrypt := range []bool{false, true} {
		s := &collect{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}}
		a := wrap(t, s, k, encrypt)
		if !a.SealsCRC() {
			t.Fatalf("encrypt=%v: SealsCRC = false", encrypt)
		}
		for _, size := range []int{0, 1, 100, 1023, 1024, 1025, 1400, 8900} {
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

// oldSeal seals eth, a core's frame, as the seal did before
// InsertAuthNoBody and SkipCRC, with counter.
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
