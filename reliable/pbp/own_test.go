package pbp

import (
	"bytes"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestOwnFramed: ProposeFramed writes head and msg into the frame as one
// message (alone, or bundled with the next); Own returns this member's
// frame body as sent, also once it is stable; a pinned frame's body
// stays unchanged while later frames take its slot (they get a new
// buffer), and an unpinned slot's buffer is reused.
func TestOwnFramed(t *testing.T) {
	cfg := testConfig(PBP2, 0, 1) // alone: every frame is stable once sent
	cfg.Window = 4
	c := newCore(t, cfg)
	seq := c.Sent()
	if err := c.ProposeFramed(t0, []byte{1}, []byte("alone")); err != nil {
		t.Fatal(err)
	}
	c.Ready()
	c.Advance()
	body, bundled, ok := c.Own(seq)
	if !ok || bundled || string(body) != "\x01alone" {
		t.Fatalf("Own(%d) = %q, %v, %v; want \\x01alone, not bundled", seq, body, bundled, ok)
	}
	if !c.Pin(0, seq, body[1:]) {
		t.Fatal("Pin of this member's own frame refused")
	}
	// Two framed messages in one turn share a frame.
	for _, m := range []string{"ab", "cde"} {
		if err := c.ProposeFramed(t0, []byte{2}, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	c.Ready()
	c.Advance()
	if body, bundled, ok := c.Own(seq + 1); !ok || !bundled || string(body) != "\x00\x03\x02ab\x00\x04\x02cde" {
		t.Fatalf("Own(%d) = %q, %v, %v; want the two framed messages bundled", seq+1, body, bundled, ok)
	}
	// Enough frames that seq's slot is taken twice over.
	for i := range 4 * int(c.cfg.histSize) {
		if err := c.Propose(t0, bytes.Repeat([]byte{byte(i)}, 40)); err != nil {
			t.Fatal(err)
		}
		c.Ready()
		c.Advance()
	}
	if string(body) != "\x01alone" {
		t.Fatalf("the pinned body changed to %q", body)
	}
	if _, _, ok := c.Own(seq); ok {
		t.Fatalf("Own(%d) still answers once later frames took its slot", seq)
	}
	c.Unpin(0, seq) // its slot holds another frame: nothing
	if c.Pin(frame.MemberID(0), seq, body[1:]) {
		t.Fatal("Pin of a frame whose slot was taken")
	}
}
