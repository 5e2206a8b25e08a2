package daemon

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// watchPair watches a and b, with A's frames sent by every path as
// Pair.Sent. The suite's frames are not rbcast frames: they may be taken
// for another protocol version's, which the quiet logger hides.
func watchPair(a, b link.Link, settle func()) linktest.Pair {
	wa := newWatch(a, 0, quiet)
	return linktest.Pair{A: wa, B: newWatch(b, 0, quiet), Settle: settle,
		Sent: func() uint64 { return wa.sent.Load() + wa.staged.Load() + wa.sentNow.Load() }}
}

func simPair(t *testing.T) (a, b *testnet.Endpoint, settle func()) {
	t.Helper()
	n, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err = n.Attach(testnet.EndpointConfig{}); err != nil {
		t.Fatal(err)
	}
	if b, err = n.Attach(testnet.EndpointConfig{}); err != nil {
		t.Fatal(err)
	}
	return a, b, func() {
		for n.Step() {
		}
	}
}

// TestWatchConformance runs the link conformance suite on the daemon's
// monitor over testnet endpoints, linktest.Staging over them (staged and
// now-sent frames counted) and rtnet (a waiting Recv, Wake).
func TestWatchConformance(t *testing.T) {
	t.Run("testnet", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			a, b, settle := simPair(t)
			return watchPair(a, b, settle)
		})
	})
	t.Run("staging", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			a, b, settle := simPair(t)
			return watchPair(linktest.NewStaging(a), linktest.NewStaging(b), settle)
		})
	})
	t.Run("rtnet", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			r := rtnet.New(t, 1)
			return watchPair(r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{}), nil)
		})
	})
}

// TestWatchCountsPaths: frames sent, staged and sent now are counted by
// path, and reach the other end.
func TestWatchCountsPaths(t *testing.T) {
	a, b, settle := simPair(t)
	w := newWatch(linktest.NewStaging(a), 0, quiet)
	f := make([]byte, 60)
	copy(f, frameBroadcast)
	for _, step := range []func() (int, error){
		func() (int, error) { return w.Send([][]byte{f}) },
		func() (int, error) { return w.Stage([][]byte{f, f}) },
		func() (int, error) { return w.SendNow([][]byte{f, f, f}) },
	} {
		if _, err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Kick(); err != nil {
		t.Fatal(err)
	}
	if s, st, now := w.sent.Load(), w.staged.Load(), w.sentNow.Load(); s != 1 || st != 2 || now != 3 {
		t.Errorf("counted %d sent, %d staged, %d sent now; want 1, 2, 3", s, st, now)
	}
	settle()
	if got := b.Queued(); got != 6 {
		t.Errorf("%d frames arrived, want 6", got)
	}
}

var frameBroadcast = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5}

// TestWatchHeardOneClockRead: the frames of one Recv stamp their senders
// heard with one read of the clock, not one each (a read was about 80
// instructions a frame received, BenchmarkDaemonPath), and a Recv of no
// frame of ours reads it not at all.
func TestWatchHeardOneClockRead(t *testing.T) {
	a, b, settle := simPair(t)
	w := newWatch(b, 0, quiet)
	reads := int64(0)
	w.clock = func() int64 { reads++; return 1000 * reads }
	var frames [][]byte
	for _, sender := range []frame.MemberID{1, 2, 1, 3} {
		f := frame.AppendEthernet(nil, frame.Broadcast, [6]byte(a.HardwareAddr()), frame.EtherType)
		f, err := frame.Append(f, &frame.Header{Group: 7, Sender: sender, Incarnation: 1}, &frame.WelcomeBody{Nonce: 1, Assigned: 1, Members: 2})
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	recv := func() int {
		t.Helper()
		got := make([]link.Frame, 16)
		n, err := w.Recv(time.Now().Add(time.Second), got)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := a.Send(frames); err != nil {
		t.Fatal(err)
	}
	settle()
	if n := recv(); n != 4 {
		t.Fatalf("Recv returned %d frames, want 4", n)
	}
	if reads != 1 {
		t.Errorf("the clock was read %d times for one Recv of 4 frames, want 1", reads)
	}
	for _, id := range []frame.MemberID{1, 2, 3} {
		if got := w.lastHeard(id).UnixNano(); got != 1000 {
			t.Errorf("member %d last heard at %d ns, want 1000 (the Recv's one read)", id, got)
		}
	}
	// A frame that is not ours: no read.
	other := append([]byte(nil), frames[0]...)
	other[12], other[13] = 0x08, 0x00
	if _, err := a.Send([][]byte{other, frames[1]}); err != nil {
		t.Fatal(err)
	}
	settle()
	if n := recv(); n != 2 {
		t.Fatalf("Recv returned %d frames, want 2", n)
	}
	if reads != 2 || w.lastHeard(2).UnixNano() != 2000 || w.lastHeard(1).UnixNano() != 1000 {
		t.Errorf("after a Recv of a foreign frame and one of member 2's: %d reads, member 1 heard at %d, 2 at %d; want 2, 1000, 2000",
			reads, w.lastHeard(1).UnixNano(), w.lastHeard(2).UnixNano())
	}
}
