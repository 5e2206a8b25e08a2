package linktest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
)

// pair is two staging links on a fresh simulated segment.
func pair(t *testing.T) (a, b *linktest.Staging, settle func()) {
	t.Helper()
	n, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ea, err := n.Attach(testnet.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := n.Attach(testnet.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return linktest.NewStaging(ea), linktest.NewStaging(eb), func() {
		for n.Step() {
		}
	}
}

// hides is a decorator without the send-side methods: it hides them.
type hides struct{ link.Link }

func (h hides) Unwrap() link.Link { return h.Link }

// reverses sends every batch backwards.
type reverses struct{ *linktest.Staging }

func (r reverses) Send(frames [][]byte) (int, error) {
	back := make([][]byte, len(frames))
	for i, f := range frames {
		back[len(frames)-1-i] = f
	}
	return r.Staging.Send(back)
}

// claimsSmallMTU says its MTU is smaller than what it sends.
type claimsSmallMTU struct{ *linktest.Staging }

func (c claimsSmallMTU) MTU() int { return c.Staging.MTU() - 100 }

// stagesUnseen forwards staging but counts only what Send sends.
type stagesUnseen struct {
	link.Link
	sent *uint64
}

func (s stagesUnseen) Unwrap() link.Link { return s.Link }
func (s stagesUnseen) Send(f [][]byte) (int, error) {
	n, err := s.Link.Send(f)
	*s.sent += uint64(n)
	return n, err
}
func (s stagesUnseen) Stage(f [][]byte) (int, error)   { return link.Stage(s.Link, f) }
func (s stagesUnseen) Kick() error                     { return link.Kick(s.Link) }
func (s stagesUnseen) SendNow(f [][]byte) (int, error) { return link.SendNow(s.Link, f) }

// noStats counts nothing.
type noStats struct{ *linktest.Staging }

func (noStats) Stats() (link.Stats, error) { return link.Stats{}, nil }

// broken are links that break the contract, and what the suite says.
var broken = map[string]struct {
	pair func(t *testing.T) linktest.Pair
	says string
}{
	"hidden": {func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		return linktest.Pair{A: hides{a}, B: b, Settle: settle}
	}, "reports Stager false, NowSender false, Waker false; the *linktest.Staging it wraps reports Stager true, NowSender true"},
	"reordered": {func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		return linktest.Pair{A: reverses{a}, B: b, Settle: settle}
	}, "three batches of 40: frame 0 of 120 differs"},
	"too large": {func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		return linktest.Pair{A: claimsSmallMTU{a}, B: claimsSmallMTU{b}, Settle: settle}
	}, "Send with a frame too large: sent 4, no error"},
	"unseen": {func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		var sent uint64
		return linktest.Pair{A: stagesUnseen{a, &sent}, B: b, Settle: settle, Sent: func() uint64 { return sent }}
	}, "A observed 0 frames sent, the link sent 55"},
	"no stats": {func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		return linktest.Pair{A: noStats{a}, B: noStats{b}, Settle: settle}
	}, "A's Stats.FramesSent grew by 0, 120 frames were sent"},
}

// TestBroken runs the suite on one broken link, named by LINKTEST_BROKEN;
// TestSuiteCatches runs it in a child process.
func TestBroken(t *testing.T) {
	name := os.Getenv("LINKTEST_BROKEN")
	if name == "" {
		t.Skip("run by TestSuiteCatches")
	}
	linktest.Run(t, broken[name].pair)
}

// TestSuiteCatches: the suite fails each broken link, saying why.
func TestSuiteCatches(t *testing.T) {
	for name, b := range broken {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBroken$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LINKTEST_BROKEN="+name)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s: the suite passed:\n%s", name, out)
			continue
		}
		if !strings.Contains(string(out), b.says) {
			t.Errorf("%s: the suite failed without saying %q:\n%s", name, b.says, out)
		}
	}
}

// TestStagingConformance: the reference staging link passes the suite.
func TestStagingConformance(t *testing.T) {
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		a, b, settle := pair(t)
		return linktest.Pair{A: a, B: b, Settle: settle}
	})
}
