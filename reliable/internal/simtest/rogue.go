package simtest

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// ForeignMarker starts the message of every frame of another group a
// rogue sends: a member that delivers one fails the run.
const ForeignMarker = "message of another group"

// Station attaches an endpoint that is not a member, on the members'
// MTU, for a rogue.
func (s *Sim[C]) Station() *testnet.Endpoint {
	ep, err := s.Net.Attach(testnet.EndpointConfig{MTU: s.Config.Link.MTU})
	if err != nil {
		s.T.Fatal(err)
	}
	return ep
}

// Rogue makes ep send frames (complete Ethernet frames) every 3 ms for
// the first 200 ms of the run, and read and drop whatever reaches it.
// Frames of the run's group are counted in Forged, the others in
// Foreign. No member may deliver what they carry; that its stepper
// counted the foreign ones, Verdict checks; that its core refused the
// forged ones, the protocol's verdict (each core counts its refusals).
func (s *Sim[C]) Rogue(ep *testnet.Endpoint, frames [][]byte) {
	var own, foreign int
	for _, f := range frames {
		_, body, err := frame.SplitEthernet(f, frame.EtherType)
		if err != nil {
			s.T.Fatalf("rogue frame: %v", err)
		}
		v, err := frame.Parse(body)
		if err != nil {
			s.T.Fatalf("rogue frame: %v", err)
		}
		if v.Group() == s.Config.Group {
			own++
		} else {
			foreign++
		}
	}
	rx := make([]link.Frame, 16)
	stop := s.Net.Now().Add(200 * time.Millisecond)
	var next time.Time
	ep.Bind(testnet.NodeFunc(func(now time.Time) time.Time {
		for {
			if n, _ := ep.Recv(time.Time{}, rx); n == 0 {
				break
			}
		}
		if now.Before(next) {
			return next
		}
		if _, err := ep.Send(frames); err != nil {
			s.Fail("rogue: send: %v", err)
		}
		s.Forged += own
		s.Foreign += foreign
		next = now.Add(3 * time.Millisecond)
		if now.After(stop) {
			return time.Time{}
		}
		return next
	}))
}
