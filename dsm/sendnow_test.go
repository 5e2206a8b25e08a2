package dsm_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// parkLink is a link whose Recv, once held, parks the node's Loop
// (entered says it has) until release, deaf to Wake, and which records
// the group of every frame sent: what goes out meanwhile is sent by
// somebody else than the Loop.
type parkLink struct {
	*rtnet.Link
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	groups  []uint32 // of every frame sent, in order
}

func (l *parkLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	if l.hold.Load() {
		l.entered <- struct{}{}
		<-l.release
	}
	return l.Link.Recv(deadline, frames)
}

func (l *parkLink) Send(frames [][]byte) (int, error) {
	l.mu.Lock()
	for _, f := range frames {
		if v, err := frame.Parse(f[frame.EthernetHeaderLen:]); err == nil {
			l.groups = append(l.groups, v.Group())
		}
	}
	l.mu.Unlock()
	return l.Link.Send(frames)
}

func (l *parkLink) sent() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.groups)
}

// In channel mode the barrier's flush sends its frames on the program's
// goroutine (reliable.Loop.SendNow, dsm/group.go Flush): with the node's
// Loop parked in its link's Recv, a write to a segment channel and a
// barrier leave, the channel's update with its marker and the global
// group's barrier message, before Barrier returns (at once: its context
// is cancelled, so it does not wait for the peer, if the peer's arrival
// has not come before the park). Without the call they would wait for
// the Loop's next turn, after the program's next step when the barrier
// is crossed at once. The barrier is then crossed with the Loop running,
// and the peer reads the write.
func TestBarrierFlushSendsNow(t *testing.T) {
	cfg := dsm.Config{Channels: true, AllMemberChannels: true, Group: reliable.Config{Group: 40}}
	channel := cfg.ChannelGroupID(sendNowKey)
	// Barrier 1 fixes the memberships and opens the channel; by the end
	// of barrier 2 the Loop has taken the channel's first turn.
	sent := barrierWithLoopParked(t, 11, cfg, 3, true)
	if !slices.Contains(sent, channel) || !slices.Contains(sent, uint32(40)) {
		t.Errorf("with the Loop parked, the barrier sent frames of groups %v; want the channel's (%d: update and marker) and the global group's (40: the barrier message)", sent, channel)
	}
}

// Over one group the barrier's flush sends its frames on the program's
// goroutine too (reliable.Group.SendNow): with the group's loop parked in
// its link's Recv, a write and a barrier leave, the update with the
// arrival on it, before Barrier returns. Without the call they wait for
// the loop's next turn: with one P, after the program's next step (cg's
// matrix-vector product) when the barrier is crossed at once, and every
// peer waits that long for this member's arrival.
func TestBarrierFlushSendsNowOneGroup(t *testing.T) {
	const group = 41
	sent := barrierWithLoopParked(t, 12, dsm.Config{Group: reliable.Config{Group: group}}, 2, false)
	if !slices.Contains(sent, uint32(group)) {
		t.Errorf("with the loop parked, the barrier sent frames of groups %v; want the group's (%d: the update with the arrival)", sent, group)
	}
}

const sendNowKey = 7

// barrierWithLoopParked runs two nodes of cfg (seeded by seed): the peer
// joins segment sendNowKey, waits at barriers 1 to last and reads it;
// node 1 creates it, crosses barriers 1 to last-1, parks its loop in its
// link's Recv, writes the segment and enters barrier last with a
// cancelled context. It returns the groups of the frames node 1 sent
// between the park and that Barrier's return, once the barrier is
// crossed with the loop running and the peer has read the write. With
// buffered, a write must send nothing before its barrier.
func barrierWithLoopParked(t *testing.T, seed uint64, cfg dsm.Config, last int, buffered bool) []uint32 {
	t.Helper()
	r := rtnet.New(t, seed)
	raw := []*rtnet.Link{r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{})}
	var members []frame.MemberInfo
	for i, l := range raw {
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(l.HardwareAddr()), Incarnation: 1})
	}
	pl := &parkLink{Link: raw[0], entered: make(chan struct{}), release: make(chan struct{})}
	links := []link.Link{pl, raw[1]}
	cfg.Group.Members, cfg.Group.Logger = members, slog.New(slog.DiscardHandler)
	nodes := make([]*dsm.Node, 2)
	for i, l := range links {
		c := cfg
		c.Group.Self = frame.MemberID(i + 1)
		n, err := dsm.Join(t.Context(), l, c)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	t.Cleanup(func() {
		for _, l := range raw {
			l.Close()
		}
	})
	const value = "written before the barrier"
	var wg sync.WaitGroup
	var peerErr error
	var got []byte
	wg.Add(1)
	go func() { // the peer: join, wait at every barrier, read
		defer wg.Done()
		n := nodes[1]
		s, err := n.JoinSegment(context.Background(), sendNowKey, 1, 64)
		for id := 1; id <= last && err == nil; id++ {
			err = n.Barrier(context.Background(), id)
		}
		if err == nil {
			got, err = s.Read(0, make([]byte, 64))
		}
		peerErr = err
	}()
	n := nodes[0]
	s, err := n.CreateSegment(sendNowKey, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	for id := 1; id < last; id++ { // the loop has taken turns
		if err := n.Barrier(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	pl.hold.Store(true)
	<-pl.entered // the loop is parked, and stays there
	before := len(pl.sent())
	if err := s.Write(0, append([]byte(value), make([]byte, 64-len(value))...)); err != nil {
		t.Fatal(err)
	}
	if got := pl.sent()[before:]; buffered && len(got) != 0 {
		t.Fatalf("a buffered write sent frames of groups %v before the barrier", got)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	// Crossed at once if the peer's arrival came before the park.
	crossed := n.Barrier(cancelled, last) == nil
	sent := pl.sent()[before:]
	pl.hold.Store(false)
	pl.release <- struct{}{}
	if !crossed {
		if err := n.Barrier(t.Context(), last); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if peerErr != nil {
		t.Fatal(peerErr)
	}
	if string(got[:len(value)]) != value {
		t.Errorf("the peer read %q, want %q", got, value)
	}
	for _, n := range nodes {
		if err := n.Exit(); err != nil {
			t.Error(err)
		}
	}
	return sent
}
