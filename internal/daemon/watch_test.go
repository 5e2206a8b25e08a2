package daemon

import (
	"testing"

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
