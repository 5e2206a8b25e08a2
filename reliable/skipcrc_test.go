package reliable

import (
	"fmt"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// sealing is a link that writes every frame's CRC itself, as an
// encrypting link/auth does (link.CRCSealer): it records the CRC field of
// each frame its core gave it, then sends the frame with the real CRC.
// Only Link's methods of the wrapped endpoint are promoted.
type sealing struct {
	link.Link
	seals        bool
	zero, nonzer int    // frames given with a zero CRC, and with another
	types        string // types given with a zero CRC, first seen order
	seen         map[frame.Type]bool
	out          [][]byte
}

func (s *sealing) SealsCRC() bool { return s.seals }

func (s *sealing) Send(frames [][]byte) (int, error) {
	s.out = s.out[:0]
	for _, f := range frames {
		v := frame.View(f[frame.EthernetHeaderLen:])
		if v.CRC() == 0 {
			s.zero++
			if !s.seen[v.Type()] {
				s.seen[v.Type()] = true
				s.types += v.Type().String() + " "
			}
		} else {
			s.nonzer++
		}
		g := append([]byte(nil), f...)
		frame.SetCRC(g[frame.EthernetHeaderLen:])
		s.out = append(s.out, g)
	}
	return s.Link.Send(s.out)
}

// TestCoresSkipCRCForSealingLink: on a link that writes every frame's CRC
// itself (link.SealsCRC), the runtime has its core encode frames without
// one (core.Stepper.SkipCRC), through every core and wrapper the Driver
// runs (PBP, the sequencer, the view core and the Agreed level over it):
// every frame the core hands the link has a zero CRC, and the group
// delivers everything. On a link that does not, every frame has its CRC.
func TestCoresSkipCRCForSealingLink(t *testing.T) {
	const n, k = 3, 50
	members := make([]frame.MemberInfo, n)
	for i := range members {
		members[i] = frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}, Incarnation: 1}
	}
	cases := []struct {
		name string
		cfg  func(i int) Config
	}{
		{"FIFO", func(i int) Config { return Config{Members: members, Self: frame.MemberID(i + 1)} }},
		{"Total", func(i int) Config { return Config{Members: members, Self: frame.MemberID(i + 1), Order: Total} }},
		{"Views", func(i int) Config {
			return Config{Views: true, Size: n, RequestID: frame.MemberID(i), Incarnation: uint32(i + 1)}
		}},
		{"Views/Total", func(i int) Config {
			return Config{Views: true, Size: n, RequestID: frame.MemberID(i), Incarnation: uint32(i + 1), Order: Total}
		}},
	}
	for _, c := range cases {
		for _, seals := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/seals=%v", c.name, seals), func(t *testing.T) {
				net, err := testnet.New(5, testnet.Config{})
				if err != nil {
					t.Fatal(err)
				}
				got := make([]int, n)
				var links []*sealing
				var drivers []*Driver
				for i := range n {
					ep, err := net.Attach(testnet.EndpointConfig{MAC: members[i].MAC[:], In: testnet.Impairment{Loss: 0.03}})
					if err != nil {
						t.Fatal(err)
					}
					l := &sealing{Link: ep, seals: seals, seen: map[frame.Type]bool{}}
					cfg := c.cfg(i)
					cfg.Group, cfg.Logger = 4, quiet
					cfg.FailureTimeout, cfg.HeartbeatInterval = 300*time.Millisecond, 20*time.Millisecond
					cfg.Deliver = func(frame.MemberID, []byte) { got[i]++ }
					d, err := NewDriver(l, cfg, net.Now())
					if err != nil {
						t.Fatal(err)
					}
					ep.Bind(d)
					links, drivers = append(links, l), append(drivers, d)
				}
				net.RunFor(500 * time.Millisecond)
				for m := range k {
					for i, d := range drivers {
						for d.Propose(net.Now(), []byte(fmt.Sprintf("m%d-%d", i, m))) != nil {
							net.RunFor(time.Millisecond)
						}
					}
					net.RunFor(time.Millisecond)
				}
				net.RunFor(2 * time.Second)
				want := (n - 1) * k
				if drivers[0].n.info.SelfDelivery {
					want = n * k
				}
				for i, l := range links {
					if got[i] != want {
						t.Errorf("member %d delivered %d messages, want %d", i, got[i], want)
					}
					if s := drivers[i].Stats(); s.BadFrames.Checksum != 0 {
						t.Errorf("member %d dropped %d frames by checksum", i, s.BadFrames.Checksum)
					}
					if seals && (l.zero == 0 || l.nonzer != 0) {
						t.Errorf("member %d: %d frames without a CRC (%s), %d with one; want all without", i, l.zero, l.types, l.nonzer)
					}
					if !seals && l.zero != 0 {
						t.Errorf("member %d: %d frames without a CRC (%s) on a link that does not seal", i, l.zero, l.types)
					}
				}
			})
		}
	}
}
