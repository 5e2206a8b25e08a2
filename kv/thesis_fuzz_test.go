package kv

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzThesisRemote: no location of another replica's segment, however
// malformed, panics a thesis-mode replica, and whatever it adopts it
// writes into its own segment as locations that decode.
func FuzzThesisRemote(f *testing.F) {
	const slotSize = 64
	seed := func(kind byte, hop int, ts int64, body []byte) []byte {
		b := make([]byte, slotSize)
		b[0], b[1] = kind, byte(hop)
		binary.BigEndian.PutUint16(b[2:], 1)
		binary.BigEndian.PutUint64(b[4:], uint64(ts))
		binary.BigEndian.PutUint16(b[12:], uint16(len(body)))
		copy(b[slotHeader:], body)
		return b
	}
	now := time.Unix(1, 0).UnixNano()
	f.Add(seed(slotQ, 0, now, AppendRequest(nil, Request{Open: true, Seq: 1})), 2)
	f.Add(seed(slotQ, 1, now, AppendRequest(nil, Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}})), 2)
	f.Add(seed(slotD, 0, now, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1), 1)), 130)
	f.Add(seed(slotBeat, 0, now, nil), 192)
	f.Fuzz(func(t *testing.T, data []byte, loc int) {
		n, err := NewThesisNode(ThesisConfig{Replicas: 3, Self: 0, Tr: 10 * time.Millisecond, Slots: 4, SlotSize: slotSize})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(1, 0)
		n.Remote(at, 1, loc, data)
		n.Remote(at, 2, loc, data)
		for ms := range 100 {
			n.Tick(at.Add(time.Duration(ms) * time.Millisecond))
		}
		for _, w := range n.Writes() {
			if len(w.Data) != slotSize {
				t.Fatalf("location %d written with %d bytes, want %d", w.Loc, len(w.Data), slotSize)
			}
			if _, _, _, _, err := decodeSlot(0, w.Loc, w.Data); err != nil {
				t.Fatalf("own write does not decode: %v", err)
			}
		}
	})
}
