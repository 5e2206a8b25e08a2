package replay

import (
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
)

// simSegment is a simulated segment of n endpoints with receive loss,
// each wrapped by capture.Wrap into one pcapng file on the virtual clock:
// what every replay test of a simulated run starts from.
type simSegment struct {
	net   *testnet.Network
	w     *capture.Writer
	eps   []*testnet.Endpoint
	links []*capture.Link
	// members is a static member list of the endpoints in order, ids
	// from 1, incarnation 1.
	members []frame.MemberInfo
}

// newSimSegment attaches n endpoints at loss to a simulator seeded with
// seed and wraps each into the capture file at path, with the online
// checks of inv (nil: none). Endpoint i is node first+i ("sim<first+i>"
// its interface): the static groups number their nodes by member id, the
// groups with views from 0.
func newSimSegment(t testing.TB, path string, seed uint64, n int, loss float64, inv *capture.Invariants, first int) *simSegment {
	t.Helper()
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := capture.CreateFile(path, capture.WriterOptions{QueueBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s := &simSegment{net: net, w: w}
	for i := range n {
		ep, err := net.Attach(testnet.EndpointConfig{In: testnet.Impairment{Loss: loss}})
		if err != nil {
			t.Fatal(err)
		}
		s.eps = append(s.eps, ep)
		s.members = append(s.members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		node := first + i
		l, err := capture.Wrap(ep, w, capture.Options{Node: fmt.Sprint(node), Interface: fmt.Sprintf("sim%d", node), Clock: net.Now, Invariants: inv})
		if err != nil {
			t.Fatal(err)
		}
		s.links = append(s.links, l)
	}
	return s
}

// close ends the run's capture: every link, then the file; a Writer that
// dropped frames fails the test (the file is not the run).
func (s *simSegment) close(t testing.TB) {
	t.Helper()
	for _, l := range s.links {
		l.Close()
	}
	if err := s.w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.w.Stats(); st.Dropped != 0 {
		t.Fatalf("capture dropped %d frames", st.Dropped)
	}
}
