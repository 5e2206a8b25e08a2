package reliable

import (
	"encoding/binary"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
)

// stepFuzzOrders are the cores FuzzStep drives, each as member 1 of
// three.
var stepFuzzOrders = []Config{
	{Order: FIFO, Mode: PBP2},
	{Order: FIFO, Mode: PBP1},
	{Order: Total},
}

func stepFuzzCore(tb testing.TB, cfg Config, self frame.MemberID) *core.Stepper {
	tb.Helper()
	cfg.Group = 7
	for id := frame.MemberID(1); id <= 3; id++ {
		cfg.Members = append(cfg.Members, frame.MemberInfo{ID: id, MAC: [6]byte{2, 0, 0, 0, 0, byte(id)}, Incarnation: 1})
	}
	s, err := cfg.settings()
	if err != nil {
		tb.Fatal(err)
	}
	c, err := s.newCore(self, cfg.Members, 1500)
	if err != nil {
		tb.Fatal(err)
	}
	return core.NewStepper(c, cfg.Group, frame.EtherType)
}

// stepFuzzSeed is the frames members 2 and 3 send while each proposes a
// few messages and hears nothing: Data, acks, heartbeats, requests. Each
// is its length (u16), the milliseconds since the one before (u8) and
// its bytes after the Ethernet header.
func stepFuzzSeed(tb testing.TB, cfg Config) []byte {
	var seed []byte
	for self := frame.MemberID(2); self <= 3; self++ {
		s := stepFuzzCore(tb, cfg, self)
		for i := range 4 {
			now := clock.Time(0).Add(clock.Duration(i) * 50 * clock.Millisecond)
			_ = s.Propose(now, []byte{'m', byte(i)})
			s.Tick(now)
			for _, f := range s.Ready().Frames {
				body := f[frame.EthernetHeaderLen:]
				seed = binary.BigEndian.AppendUint16(seed, uint16(len(body)))
				seed = append(seed, 10)
				seed = append(seed, body...)
			}
			s.Advance()
		}
	}
	return seed
}

// FuzzStep steps each core (PBP2, PBP1, the sequencer) with arbitrary
// frames from the other members, as the runtime does (the Stepper
// parses them; the CRC is not checked, so that mutated frames reach the
// core), proposing and ticking between frames: no frame panics a core,
// and every frame a core sends in answer parses, its CRC included.
// The input is a list of frames as stepFuzzSeed writes them; each comes
// from its header's sender's MAC.
func FuzzStep(f *testing.F) {
	for _, cfg := range stepFuzzOrders {
		f.Add(stepFuzzSeed(f, cfg))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, cfg := range stepFuzzOrders {
			s := stepFuzzCore(t, cfg, 1)
			now := clock.Time(0)
			for rest := in; len(rest) >= 3; {
				n, dt := int(binary.BigEndian.Uint16(rest)), rest[2]
				rest = rest[3:]
				n = min(n, len(rest))
				body := rest[:n]
				rest = rest[n:]
				now = now.Add(clock.Duration(dt) * clock.Millisecond)
				src := [6]byte{2, 0, 0, 0, 0, 2}
				if v, err := frame.ParseNoCRC(body); err == nil {
					src[5] = byte(v.Sender()) // the sender's MAC, as the members' list has it
				}
				eth := append(frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType), body...)
				_ = s.StepVerified(now, eth)
				sentParse(t, s)
				_ = s.Propose(now, []byte("own"))
				s.Tick(now)
				sentParse(t, s)
			}
		}
	})
}

// sentParse takes s's Ready and fails the test unless each frame it
// sends parses as a frame of group 7 with its CRC; then Advance.
func sentParse(t *testing.T, s *core.Stepper) {
	t.Helper()
	for _, f := range s.Ready().Frames {
		if _, err := frame.ParseGroup(f[frame.EthernetHeaderLen:], 7); err != nil {
			t.Fatalf("a frame the core sent does not parse: %v\n% x", err, f)
		}
	}
	s.Advance()
}
