package auth

import (
	"testing"

	"github.com/rbcast/rbcast/link"
)

// capable is a link with every capability the runtime looks for (a ring):
// it records which path each frame took.
type capable struct {
	fake
	staged, now  [][]byte
	kicks, wakes int
}

func (c *capable) Stage(frames [][]byte) (int, error) {
	for _, f := range frames {
		c.staged = append(c.staged, append([]byte(nil), f...))
	}
	return len(frames), nil
}
func (c *capable) Kick() error { c.kicks++; return nil }
func (c *capable) SendNow(frames [][]byte) (int, error) {
	for _, f := range frames {
		c.now = append(c.now, append([]byte(nil), f...))
	}
	return len(frames), nil
}
func (c *capable) Wake() { c.wakes++ }

// TestCapabilities: over a link that stages, sends past its queue and can
// be woken, Link and Keyless keep all three (link.StagerOf, NowSenderOf,
// WakerOf, as reliable.Join looks them up), and each call takes the
// wrapped link's own path, sealed: without them the runtime falls back to
// Send on the loop's goroutine and polls instead of being woken.
func TestCapabilities(t *testing.T) {
	c := &capable{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}}
	k := testKey(t, 1)
	a := wrap(t, c, k, false)
	for name, l := range map[string]link.Link{"auth.Link": a, "Keyless": WatchKeyless(c, 7, 0)} {
		if s, ok := link.StagerOf(l); !ok || s != l {
			t.Errorf("%s: StagerOf = %v, %v; want the link itself", name, s, ok)
		}
		if s, ok := link.NowSenderOf(l); !ok || s != l {
			t.Errorf("%s: NowSenderOf = %v, %v; want the link itself", name, s, ok)
		}
		if w, ok := link.WakerOf(l); !ok || w != link.Waker(c) {
			t.Errorf("%s: WakerOf = %v, %v; want the wrapped link", name, w, ok)
		}
	}
	f := dataFrame(t, c.mac, 0, 5, 1, "staged")
	if _, err := a.Stage([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	if err := a.Kick(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SendNow([][]byte{dataFrame(t, c.mac, 0, 5, 2, "now")}); err != nil {
		t.Fatal(err)
	}
	if len(c.staged) != 1 || len(c.now) != 1 || c.kicks != 1 || len(c.sent) != 0 {
		t.Fatalf("staged %d, sent now %d, kicks %d, sent %d; want 1, 1, 1, 0", len(c.staged), len(c.now), c.kicks, len(c.sent))
	}
	v, _ := NewVerifier(Config{Group: 7, Key: k})
	for _, f := range [][]byte{c.staged[0], c.now[0]} {
		if err := v.Check(f); err != nil {
			t.Fatalf("a frame the wrapped link got: %v", err)
		}
	}
	if got := payloadOf(t, c.staged[0]); got != "staged" {
		t.Fatalf("staged payload %q", got)
	}
}
