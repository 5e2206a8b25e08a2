package reliable

import "testing"

// A MaxPayload that only a jumbo-frame link carries is Join's to judge
// against the link's MTU: Check, which has no link, accepts it (it
// refused it against its 1500-byte trial link, though Join on an MTU
// 9000 link runs it).
func TestConfigCheckJumboMaxPayload(t *testing.T) {
	for _, cfg := range []Config{
		{Group: 1, Size: 3, MaxPayload: 8000},
		{Group: 1, Size: 3, Order: Total, MaxPayload: 8000},
		{Group: 1, Views: true, MaxPayload: 8000},
	} {
		if err := cfg.Check(); err != nil {
			t.Errorf("%+v: %v, want accepted (Join checks the link's MTU)", cfg, err)
		}
	}
	if err := (Config{Group: 1, Size: 3, MaxPayload: -1}).Check(); err == nil {
		t.Errorf("MaxPayload -1 accepted")
	}
}
