package link_test

import (
	"net"
	"strings"
	"time"

	"testing"

	"github.com/rbcast/rbcast/link"
)

type plain struct{ link.Link }

type wakes struct {
	link.Link
	n int
}

func (w *wakes) Wake() { w.n++ }

type wrapper struct{ link.Link }

func (w wrapper) Unwrap() link.Link { return w.Link }

// TestWakerOf: the Waker is the link itself or the one under wrappers
// with Unwrap; a link that cannot be woken, or a wrapper without Unwrap
// (it hides what is under it), has none.
func TestWakerOf(t *testing.T) {
	inner := &wakes{}
	for _, tc := range []struct {
		name string
		l    link.Link
		ok   bool
	}{
		{"a Waker", inner, true},
		{"a Waker under two wrappers", wrapper{wrapper{inner}}, true},
		{"a Waker under a wrapper without Unwrap", plain{inner}, false},
		{"a link that cannot be woken", plain{}, false},
		{"a wrapper of nothing", wrapper{}, false},
		{"nil", nil, false},
	} {
		w, ok := link.WakerOf(tc.l)
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if ok {
			before := inner.n
			w.Wake()
			if inner.n != before+1 {
				t.Errorf("%s: the Waker returned is not the inner link", tc.name)
			}
		}
	}
}

// stages is a link with the send-side capabilities; it logs what it was
// asked to do.
type stages struct {
	link.Link
	log []string
}

func (s *stages) Send(f [][]byte) (int, error)    { s.log = append(s.log, "send"); return len(f), nil }
func (s *stages) Stage(f [][]byte) (int, error)   { s.log = append(s.log, "stage"); return len(f), nil }
func (s *stages) Kick() error                     { s.log = append(s.log, "kick"); return nil }
func (s *stages) SendNow(f [][]byte) (int, error) { s.log = append(s.log, "now"); return len(f), nil }

// forwards is a decorator that forwards the send-side capabilities with
// link.Stage, link.Kick and link.SendNow, as capture.Link does.
type forwards struct{ link.Link }

func (f forwards) Unwrap() link.Link                { return f.Link }
func (f forwards) Stage(fr [][]byte) (int, error)   { return link.Stage(f.Link, fr) }
func (f forwards) Kick() error                      { return link.Kick(f.Link) }
func (f forwards) SendNow(fr [][]byte) (int, error) { return link.SendNow(f.Link, fr) }

// TestSendCapabilities: StagerOf and NowSenderOf report a link that has
// the methods, and a decorator that has them only when every link under
// it has them too; a decorator without them hides them (Unwrap alone does
// not pass a send-side capability). The forwarding functions use the
// capability where StagerOf finds it and fall back to Send where not.
func TestSendCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rootStage bool // the root link has the capabilities
		l         func(root link.Link) link.Link
		ok        bool
		calls     string // what Stage, Kick, SendNow through l did at the root
	}{
		{"a Stager", true, func(r link.Link) link.Link { return r }, true, "stage kick now"},
		{"a forwarding decorator", true, func(r link.Link) link.Link { return forwards{r} }, true, "stage kick now"},
		{"two forwarding decorators", true, func(r link.Link) link.Link { return forwards{forwards{r}} }, true, "stage kick now"},
		{"a forwarding decorator over one that hides", true, func(r link.Link) link.Link { return forwards{wrapper{r}} }, false, "send send"},
		{"a decorator without the methods", true, func(r link.Link) link.Link { return wrapper{r} }, false, ""},
		{"a forwarding decorator over a link that cannot stage", false, func(r link.Link) link.Link { return forwards{r} }, false, "send send"},
	} {
		s := &stages{}
		var root link.Link = sendOnly{s}
		if tc.rootStage {
			root = s
		}
		l := tc.l(root)
		_, sok := link.StagerOf(l)
		_, nok := link.NowSenderOf(l)
		if sok != tc.ok || nok != tc.ok {
			t.Errorf("%s: StagerOf ok = %v, NowSenderOf ok = %v, want %v", tc.name, sok, nok, tc.ok)
		}
		if tc.calls == "" {
			continue
		}
		fr := [][]byte{nil}
		if n, err := link.Stage(l, fr); n != 1 || err != nil {
			t.Errorf("%s: Stage = %d, %v", tc.name, n, err)
		}
		if err := link.Kick(l); err != nil {
			t.Errorf("%s: Kick = %v", tc.name, err)
		}
		if n, err := link.SendNow(l, fr); n != 1 || err != nil {
			t.Errorf("%s: SendNow = %d, %v", tc.name, n, err)
		}
		if got := strings.Join(s.log, " "); got != tc.calls {
			t.Errorf("%s: the root link was asked to %q, want %q", tc.name, got, tc.calls)
		}
	}
	if _, ok := link.StagerOf(nil); ok {
		t.Error("StagerOf(nil) reports a Stager")
	}
	if _, ok := link.NowSenderOf(nil); ok {
		t.Error("NowSenderOf(nil) reports a NowSender")
	}
}

// sendOnly shows only Send of a stages.
type sendOnly struct{ s *stages }

func (o sendOnly) Send(f [][]byte) (int, error) { return o.s.Send(f) }
func (o sendOnly) Recv(time.Time, []link.Frame) (int, error) {
	return 0, nil
}
func (o sendOnly) MTU() int                       { return 1500 }
func (o sendOnly) HardwareAddr() net.HardwareAddr { return nil }
func (o sendOnly) Stats() (link.Stats, error)     { return link.Stats{}, nil }
func (o sendOnly) Close() error                   { return nil }
