package pcode

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// FuzzParseOp: the op decoder never panics, and what it accepts encodes
// back to the same bytes.
func FuzzParseOp(f *testing.F) {
	f.Add(AppendOp(nil, Op{Kind: OpMulticast, Step: 7, Targets: frame.AppendTargets(nil, 1, 2), Data: []byte("m")}))
	f.Add(AppendOp(nil, Op{Kind: OpRequest, Step: 8, Peer: 3, Targets: frame.AppendTargets(nil, 0, 1)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := ParseOp(b)
		if err != nil {
			return
		}
		if got := AppendOp(nil, op); string(got) != string(b) {
			t.Fatalf("round trip: %x became %x", b, got)
		}
	})
}

// FuzzStep feeds a core arbitrary PCODE bodies from a member, and
// arbitrary calls: it must never panic, and its frames must parse.
func FuzzStep(f *testing.F) {
	f.Add(uint8(frame.PcodeData), uint32(1), []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0x03, 'x'}, []byte{})
	f.Add(uint8(frame.PcodeNack), uint32(0), []byte{3, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, AppendOp(nil, Op{Kind: OpMulticast, Step: 1, Targets: frame.AppendTargets(nil, 0), Data: []byte("a")}))
	f.Add(uint8(frame.PcodeStatus), uint32(5), []byte{0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2}, AppendOp(nil, Op{Kind: OpRequest, Step: 1, Peer: 0, Targets: frame.AppendTargets(nil, 1, 2)}))
	f.Fuzz(func(t *testing.T, typ uint8, seq uint32, body, op []byte) {
		infos := []frame.MemberInfo{{ID: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1}, {ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Incarnation: 1},
			{ID: 2, MAC: [6]byte{2, 0, 0, 0, 0, 3}, Incarnation: 1}}
		c, err := New(Config{Group: 1, Self: 1, Members: infos})
		if err != nil {
			t.Fatal(err)
		}
		now := Time(1000)
		c.Tick(now)
		_ = c.Propose(now, op)
		h := frame.Header{Group: 1, Sender: 0, Incarnation: 1, Seq: seq, Acks: []uint32{seq, 0, 0}}
		b, err := frame.Append(nil, &h, &frame.Encoded{T: frame.Type(typ), Data: body})
		if err != nil {
			return
		}
		v, err := frame.Parse(b)
		if err != nil {
			return
		}
		for range 3 {
			_ = c.Step(now, infos[0].MAC, frame.Broadcast, v)
			now += Time(Millisecond)
			c.Tick(now)
			for _, fr := range c.Ready().Frames {
				_, rest, err := frame.SplitEthernet(fr, frame.EtherType)
				if err == nil {
					_, err = frame.Parse(rest)
				}
				if err != nil {
					t.Fatalf("the core sent a frame that does not parse: %v", err)
				}
			}
			c.Advance()
		}
	})
}
