package member

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/testnet"
)

// node drives a Registrar on a simulated endpoint: the runtime's glue
// with the waiting taken out. After start it plays a PBP member that
// sends nothing, so only Start acknowledgements (Joins) reach the server.
type node struct {
	r     *Registrar
	st    *core.Stepper
	ep    *testnet.Endpoint
	rx    []link.Frame
	epoch time.Time
	bad   int
}

func (n *node) Step(now time.Time) time.Time {
	if n.st == nil {
		n.st = core.NewStepper(n.r, 3, frame.EtherType)
	}
	t := wall.Clock{Epoch: n.epoch}.Core(now)
	for {
		k, _ := n.ep.Recv(time.Time{}, n.rx)
		for _, f := range n.rx[:k] {
			if err := n.st.Step(t, f.Data); errors.Is(err, frame.ErrEthernet) || errors.Is(err, frame.ErrGroup) {
				n.bad++
			}
		}
		n.st.Tick(t)
		rd := n.st.Ready()
		if len(rd.Frames) > 0 {
			n.ep.Send(rd.Frames)
		}
		n.st.Advance()
		if k == 0 {
			break
		}
	}
	return wall.Clock{Epoch: n.epoch}.Wall(n.st.Deadline())
}

type setup struct {
	size    int
	joiners int // may exceed size-1: the extra ones are refused
	imp     testnet.Impairment
	hash    func(i int) uint64
	request func(i int) frame.MemberID
}

func run(t *testing.T, seed uint64, s setup) []*node {
	t.Helper()
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*node
	for i := range s.joiners + 1 {
		ep, err := net.Attach(testnet.EndpointConfig{In: s.imp, Out: s.imp})
		if err != nil {
			t.Fatal(err)
		}
		hash := uint64(0xc0ffee)
		if s.hash != nil {
			hash = s.hash(i)
		}
		var req frame.MemberID
		if s.request != nil {
			req = s.request(i)
		}
		r, err := New(Config{Group: 3, Size: s.size, Server: i == 0, MAC: [6]byte(ep.HardwareAddr()), Incarnation: uint32(100 + i),
			Nonce: uint64(i)*0x1234567 + 1, Requested: req, Window: 128, MTU: 1500, ConfigHash: hash, Retry: 20 * clock.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		n := &node{r: r, ep: ep, rx: make([]link.Frame, 16), epoch: net.Now()}
		nodes = append(nodes, n)
		ep.Bind(n)
	}
	net.RunFor(10 * time.Second)
	return nodes
}

// A joiner that asks for an id gets it (here the reverse of the joining
// order the nonces and loss would give); one asking for a taken id gets
// the lowest free one.
func TestRequestedIDs(t *testing.T) {
	for seed := range uint64(10) {
		nodes := run(t, seed, setup{size: 5, joiners: 4, imp: testnet.Impairment{Loss: 0.2},
			request: func(i int) frame.MemberID { return frame.MemberID([]int{0, 4, 3, 2, 2}[i]) }})
		got := map[int]frame.MemberID{}
		for i, n := range nodes {
			self, _, ok := n.r.Started()
			if !ok {
				t.Fatalf("seed %d: node %d did not start", seed, i)
			}
			got[i] = self
		}
		if got[0] != 0 || got[1] != 4 || got[2] != 3 {
			t.Fatalf("seed %d: ids %v, want nodes 1 and 2 to get the 4 and 3 they asked for", seed, got)
		}
		if a, b := got[3], got[4]; !(a == 2 && b == 1 || a == 1 && b == 2) {
			t.Fatalf("seed %d: nodes 3 and 4 both asked for 2 and got %d and %d, want 2 and the lowest free (1)", seed, a, b)
		}
	}
}

// Registration completes under heavy loss and duplication in both
// directions; every member ends with the same list, ids are unique and the
// server is 0.
func TestRegistrationWithLoss(t *testing.T) {
	for seed := range uint64(50) {
		imp := testnet.Impairment{Loss: 0.3, Duplicate: 0.2, Reorder: 0.1, ReorderDelay: 5 * time.Millisecond}
		nodes := run(t, seed, setup{size: 6, joiners: 5, imp: imp})
		if !nodes[0].r.Done() {
			t.Fatalf("seed %d: the server is not done: %d registered, Start acked %v", seed, nodes[0].r.Registered(), nodes[0].r.acked)
		}
		_, want, _ := nodes[0].r.Started()
		if len(want) != 6 {
			t.Fatalf("seed %d: server lists %d members, want 6", seed, len(want))
		}
		for i, n := range nodes {
			self, got, ok := n.r.Started()
			if !ok {
				t.Fatalf("seed %d: node %d did not start (welcomed %v, err %v)", seed, i, n.r.Welcomed(), n.r.Err())
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("seed %d: node %d has members %v, the server %v", seed, i, got, want)
			}
			var mine frame.MemberInfo
			for _, m := range got {
				if m.ID == self {
					mine = m
				}
			}
			if mine.MAC != n.r.cfg.MAC || mine.Incarnation != n.r.cfg.Incarnation || (i == 0) != (self == Server) {
				t.Errorf("seed %d: node %d is member %d with %+v; its MAC is %x, incarnation %d", seed, i, self, mine, n.r.cfg.MAC, n.r.cfg.Incarnation)
			}
		}
		seen := map[frame.MemberID]bool{}
		for _, m := range want {
			if seen[m.ID] {
				t.Errorf("seed %d: id %d assigned twice: %v", seed, m.ID, want)
			}
			seen[m.ID] = true
		}
	}
}

func TestRegistrationRefusesConfigMismatch(t *testing.T) {
	nodes := run(t, 1, setup{size: 3, joiners: 2, hash: func(i int) uint64 {
		if i == 2 {
			return 0xbad
		}
		return 0x600d
	}})
	err := nodes[2].r.Err()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "0x600d") || !strings.Contains(err.Error(), "0xbad") {
		t.Fatalf("joiner with another configuration: Err() = %v, want ErrRefused naming both hashes", err)
	}
	if nodes[2].r.Deadline() != 0 {
		t.Errorf("a refused joiner keeps retrying")
	}
	if _, _, ok := nodes[0].r.Started(); ok {
		t.Errorf("the server started with a member refused")
	}
	if evs := nodes[0].st.Events(); len(evs) == 0 || evs[0].Kind != core.JoinRefused || !strings.Contains(evs[0].Reason, "configuration hash 0xbad") {
		t.Errorf("server's events: %v, want a JoinRefused naming the configuration hash", evs)
	}
}

func TestRegistrationRefusesWhenFull(t *testing.T) {
	nodes := run(t, 2, setup{size: 2, joiners: 3})
	refused := 0
	for _, n := range nodes[1:] {
		if err := n.r.Err(); err != nil {
			if !strings.Contains(err.Error(), "already full") {
				t.Errorf("refusal says %q, want it to say the group is full", err)
			}
			refused++
		} else if _, _, ok := n.r.Started(); !ok {
			t.Errorf("a joiner neither started nor was refused")
		}
	}
	if refused != 2 {
		t.Errorf("%d joiners refused, want 2 (group of 2, 3 joiners)", refused)
	}
}

// A repeated Join (its Welcome lost) gets the same id.
func TestDuplicateJoinSameID(t *testing.T) {
	srv, _ := New(Config{Group: 3, Size: 3, Server: true, MAC: [6]byte{2, 0, 0, 0, 0, 1}, ConfigHash: 7, Retry: clock.Millisecond})
	join := func(mac [6]byte, nonce uint64) frame.View {
		b, err := frame.Append(nil, &frame.Header{Group: 3, Sender: frame.NoMember, Incarnation: 5},
			&frame.JoinBody{Requested: frame.NoMember, Nonce: nonce, ConfigHash: 7})
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.ParseGroup(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a := [6]byte{2, 0, 0, 0, 0, 2}
	for range 3 {
		if err := srv.Step(1, a, frame.Broadcast, join(a, 99)); err != nil {
			t.Fatal(err)
		}
	}
	if srv.Registered() != 2 {
		t.Fatalf("three Joins with one nonce registered %d members, want 2 (server + 1)", srv.Registered())
	}
	var ids []frame.MemberID
	for _, f := range srv.Ready().Frames {
		_, body, _ := frame.SplitEthernet(f, frame.EtherType)
		v, _ := frame.ParseGroup(body, 3)
		ids = append(ids, v.Welcome().Assigned)
	}
	if fmt.Sprint(ids) != "[1 1 1]" {
		t.Errorf("Welcomes assigned %v, want [1 1 1]", ids)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Size: 0, MAC: [6]byte{2}, Retry: 1}, "Size is 0"},
		{Config{Size: 2, MAC: [6]byte{1}, Retry: 1}, "not a unicast address"},
		{Config{Size: 2, MAC: [6]byte{2}}, "Retry is 0"},
	} {
		_, err := New(tc.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrConfig saying %q", tc.cfg, err, tc.want)
		}
	}
}
