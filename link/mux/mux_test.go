package mux_test

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/testnet"
)

// groupFrame is a broadcast frame from src of group g, size bytes long,
// carrying seq after the group.
func groupFrame(src net.HardwareAddr, g uint32, seq uint32, size int) []byte {
	b := make([]byte, size)
	copy(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:], src)
	binary.BigEndian.PutUint16(b[12:], link.EtherTypeRbcast)
	binary.BigEndian.PutUint32(b[link.GroupOffset:], g)
	binary.BigEndian.PutUint32(b[link.GroupOffset+4:], seq)
	return b
}

// segment is a simulated segment with n endpoints.
func segment(t *testing.T, n int) (*testnet.Network, []*testnet.Endpoint) {
	t.Helper()
	net, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var eps []*testnet.Endpoint
	for range n {
		ep, err := net.Attach(testnet.EndpointConfig{})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
	return net, eps
}

func newMux(t *testing.T, l link.Link, cfg mux.Config) *mux.Mux {
	t.Helper()
	m, err := mux.New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func open(t *testing.T, m *mux.Mux, g uint32) link.Link {
	t.Helper()
	v, err := m.Open(g)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The views of group 7 on two simulated hosts pass the link conformance
// suite while a third host sends frames of groups 8 and 9 on every
// settle: B's mux has a view of group 8 that nobody reads (its queue
// fills and drops, holding up nobody) and none of group 9.
func TestConformanceVirtual(t *testing.T) {
	group := uint32(7)
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		net, eps := segment(t, 3)
		ma := newMux(t, eps[0], mux.Config{Queue: 64})
		mb := newMux(t, eps[1], mux.Config{Queue: 64})
		a, b := open(t, ma, group), open(t, mb, group)
		open(t, mb, 8)
		noise := eps[2]
		seq := uint32(0)
		return linktest.Pair{A: a, B: b, Group: &group, Settle: func() {
			seq++
			noise.Send([][]byte{groupFrame(noise.HardwareAddr(), 8, seq, 100), groupFrame(noise.HardwareAddr(), 9, seq, 60)})
			for net.Step() {
			}
		}}
	})
}

// The same over links that stage in software (linktest.Staging): the
// views forward Stage, Kick and SendNow.
func TestConformanceVirtualStaging(t *testing.T) {
	group := uint32(7)
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		net, eps := segment(t, 2)
		ma := newMux(t, linktest.NewStaging(eps[0]), mux.Config{})
		mb := newMux(t, linktest.NewStaging(eps[1]), mux.Config{})
		return linktest.Pair{A: open(t, ma, group), B: open(t, mb, group), Group: &group, Settle: func() {
			for net.Step() {
			}
		}}
	})
}

// Two views of one mux receive their groups' interleaved streams, whole
// and in order; frames of a group without a view and runts are counted in
// Stats.NoView and the views' Filtered; a view whose queue overflows
// counts the frames it dropped and holds up no other.
func TestDemultiplex(t *testing.T) {
	net, eps := segment(t, 2)
	m := newMux(t, eps[1], mux.Config{Queue: 16})
	v1, v2, v3 := open(t, m, 1), open(t, m, 2), open(t, m, 3)
	src := eps[0].HardwareAddr()
	var batch [][]byte
	for i := range 30 {
		batch = append(batch, groupFrame(src, uint32(1+i%2), uint32(i), 64+i))
	}
	batch = append(batch, groupFrame(src, 4, 99, 64), groupFrame(src, 1, 99, 64)[:link.GroupOffset+2])
	for i := range 20 {
		batch = append(batch, groupFrame(src, 3, uint32(100+i), 64))
	}
	if n, err := eps[0].Send(batch); n != len(batch) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	for net.Step() {
	}
	rx := make([]link.Frame, 4)
	for _, c := range []struct {
		v     link.Link
		group uint32
		first uint32
	}{{v2, 2, 1}, {v1, 1, 0}} {
		want := c.first
		for want < 30 {
			n, err := c.v.Recv(time.Time{}, rx)
			if err != nil {
				t.Fatalf("group %d: Recv after frame %d: %v", c.group, want, err)
			}
			for _, f := range rx[:n] {
				g, _ := link.FrameGroup(f.Data)
				seq := binary.BigEndian.Uint32(f.Data[link.GroupOffset+4:])
				if g != c.group || seq != want || len(f.Data) != 64+int(seq) {
					t.Fatalf("group %d: got frame %d of group %d (%d bytes), want frame %d", c.group, seq, g, len(f.Data), want)
				}
				want += 2
			}
		}
		if n, err := c.v.Recv(time.Time{}, rx); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("group %d: Recv after its frames = %d, %v", c.group, n, err)
		}
	}
	// Group 3's view was never read while 20 frames came for its queue
	// of 16.
	st := m.Stats()
	if st.NoView != 2 {
		t.Errorf("Stats.NoView = %d, want 2 (a frame of group 4, a runt)", st.NoView)
	}
	if g3 := st.Groups[3]; g3.Dropped != 4 || g3.Queued != 16 {
		t.Errorf("group 3: %+v, want 16 queued and 4 dropped", g3)
	}
	s3, _ := v3.Stats()
	s1, _ := v1.Stats()
	if s3.KernelDrops != 4 || s3.Filtered != 2 || s1.FramesReceived != 15 || s1.KernelDrops != 0 {
		t.Errorf("view stats: group 3 %+v, group 1 %+v", s3, s1)
	}
	n, _ := v3.Recv(time.Time{}, make([]link.Frame, 32))
	if n != 16 {
		t.Errorf("group 3 received %d frames, want the 16 its queue held", n)
	}
}

// Opening a group twice is refused; a closed view's group can be opened
// again; after the Mux is closed, Open and the views report
// net.ErrClosed.
func TestOpenClose(t *testing.T) {
	_, eps := segment(t, 1)
	m, err := mux.New(eps[0], mux.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v := open(t, m, 5)
	if _, err := m.Open(5); !errors.Is(err, mux.ErrGroupOpen) {
		t.Fatalf("second Open(5) = %v, want ErrGroupOpen", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := v.Recv(time.Time{}, make([]link.Frame, 1)); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv on a closed view = %d, %v", n, err)
	}
	w := open(t, m, 5)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Send([][]byte{groupFrame(eps[0].HardwareAddr(), 5, 1, 60)}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Send after the Mux closed = %v", err)
	}
	if _, err := m.Open(6); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Open after Close = %v", err)
	}
	if _, err := mux.New(eps[0], mux.Config{Queue: -1}); err == nil {
		t.Fatal("Config.Queue -1 accepted")
	}
}

// Receiving through a view allocates nothing in steady state.
func TestRecvAllocs(t *testing.T) {
	net, eps := segment(t, 2)
	m := newMux(t, eps[1], mux.Config{})
	v := open(t, m, 1)
	open(t, m, 2)
	src := eps[0].HardwareAddr()
	batch := make([][]byte, 8)
	for i := range batch {
		batch[i] = groupFrame(src, uint32(1+i%2), uint32(i), 200)
	}
	rx := make([]link.Frame, 8)
	round := func() {
		eps[0].Send(batch)
		for net.Step() {
		}
		for {
			if n, _ := v.Recv(time.Time{}, rx); n == 0 {
				break
			}
		}
	}
	round()
	sendAllocs := testing.AllocsPerRun(50, func() {
		eps[0].Send(batch)
		for net.Step() {
		}
		eps[1].Recv(time.Time{}, rx)
	})
	allocs := testing.AllocsPerRun(50, round)
	t.Logf("%.1f allocations a round through the view, %.1f of the simulator alone", allocs, sendAllocs)
	if allocs > sendAllocs {
		t.Errorf("a round through the view allocates %.1f times, the simulator alone %.1f", allocs, sendAllocs)
	}
}

// Frames of a group whose view was closed, read after the close (queued
// before the kernel filter dropped the group), count in Stats.Late, not
// in NoView or a view's Filtered: those are frames of groups never
// joined. Opening the group again makes its frames a view's.
func TestLateFramesOfClosedGroup(t *testing.T) {
	net, eps := segment(t, 2)
	m := newMux(t, eps[1], mux.Config{})
	v1, v2 := open(t, m, 1), open(t, m, 2)
	if err := v2.Close(); err != nil {
		t.Fatal(err)
	}
	src := eps[0].HardwareAddr()
	eps[0].Send([][]byte{groupFrame(src, 2, 1, 64), groupFrame(src, 4, 2, 64), groupFrame(src, 1, 3, 64)})
	for net.Step() {
	}
	if n, err := v1.Recv(time.Time{}, make([]link.Frame, 4)); n != 1 || err != nil {
		t.Fatalf("Recv on group 1 = %d, %v; want its one frame", n, err)
	}
	st := m.Stats()
	s1, _ := v1.Stats()
	if st.Late != 1 || st.NoView != 1 || s1.Filtered != 1 {
		t.Errorf("Late %d, NoView %d, group 1's Filtered %d; want 1 (group 2, closed), 1 (group 4, never open), 1", st.Late, st.NoView, s1.Filtered)
	}
	v2 = open(t, m, 2)
	eps[0].Send([][]byte{groupFrame(src, 2, 5, 64)})
	for net.Step() {
	}
	if n, err := v2.Recv(time.Time{}, make([]link.Frame, 4)); n != 1 || err != nil {
		t.Fatalf("Recv on group 2 opened again = %d, %v; want its frame", n, err)
	}
}

// RecvAll reads for every view at once: the frames of open views come
// back in their order, uncopied, counted in their views' Stats; frames
// of a group without a view and runts are dropped and counted in NoView,
// as a view's Recv counts them.
func TestRecvAll(t *testing.T) {
	sim, eps := segment(t, 2)
	m := newMux(t, eps[1], mux.Config{})
	open(t, m, 1)
	open(t, m, 2)
	src := eps[0].HardwareAddr()
	batch := [][]byte{groupFrame(src, 1, 10, 64), groupFrame(src, 4, 11, 64), groupFrame(src, 2, 12, 70),
		groupFrame(src, 1, 13, 64)[:link.GroupOffset+2], groupFrame(src, 1, 14, 80)}
	if n, err := eps[0].Send(batch); n != len(batch) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	for sim.Step() {
	}
	rx := make([]link.Frame, 8)
	n, err := m.RecvAll(time.Now().Add(time.Second), rx)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, f := range rx[:n] {
		got = append(got, binary.BigEndian.Uint32(f.Data[link.GroupOffset+4:]))
	}
	if want := []uint32{10, 12, 14}; !slices.Equal(got, want) {
		t.Fatalf("RecvAll returned frames %v, want %v", got, want)
	}
	st := m.Stats()
	if st.NoView != 2 || st.Groups[1].FramesReceived != 2 || st.Groups[1].BytesReceived != 144 || st.Groups[2].FramesReceived != 1 {
		t.Fatalf("Stats after RecvAll: NoView %d (want 2), group 1 %d frames %d bytes (want 2, 144), group 2 %d frames (want 1)",
			st.NoView, st.Groups[1].FramesReceived, st.Groups[1].BytesReceived, st.Groups[2].FramesReceived)
	}
	if _, err := m.RecvAll(time.Now().Add(-time.Millisecond), rx); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("RecvAll past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	m.Close()
	if _, err := m.RecvAll(time.Now().Add(time.Second), rx); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("RecvAll after Close: %v, want net.ErrClosed", err)
	}
}
