package link_test

import (
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
