package pbp

import (
	"errors"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// FuzzRelay steps a core with Relay through relays of arbitrary frames
// (built with a valid CRC, as the outer frame's decoder demands of the
// relayed one): it never panics, and a refusal is one of Step's errors.
func FuzzRelay(f *testing.F) {
	f.Add(uint16(0), uint32(7), uint32(100), uint32(0), uint32(0), true, []byte{0, 1, 'a', 0, 2, 'b', 'c'}, uint32(99))
	f.Add(uint16(0), uint32(7), uint32(104), uint32(0), uint32(0), false, []byte("x"), uint32(99))
	f.Add(uint16(2), uint32(7), uint32(100), uint32(0), uint32(0), false, []byte("self"), uint32(99))
	f.Add(uint16(0), uint32(7), uint32(100), uint32(1), uint32(3), false, []byte("view"), uint32(99))
	f.Fuzz(func(t *testing.T, sender uint16, inc, seq, dGroup, view uint32, bundled bool, data []byte, outer uint32) {
		h := frame.Header{Group: testGroup + dGroup, Sender: frame.MemberID(sender), Incarnation: inc, ViewID: view, Seq: seq}
		inner, err := frame.Append(nil, &h, &frame.Encoded{T: frame.Data, Data: data, Bundled: bundled})
		if err != nil {
			return
		}
		if _, err := frame.Parse(inner); err != nil {
			return // the outer frame's decoder refuses it before the core
		}
		cfg := testConfig(PBP2, 2, 3)
		cfg.Relay, cfg.Window = true, 8
		c := newCore(t, cfg)
		for i := range 3 {
			err := step(t, c, t0, in{sender: 1, seq: outer + uint32(i), acks: []uint32{100, 100, 100},
				body: &frame.ViewRelayBody{Frame: inner}})
			if err != nil && !errors.Is(err, ErrFrameType) && !errors.Is(err, ErrNotMember) && !errors.Is(err, ErrRemoved) {
				t.Fatalf("step: %v", err)
			}
			ready(t, c)
		}
		c.Tick(t0.Add(3 * Second))
		ready(t, c)
	})
}
