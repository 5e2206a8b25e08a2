package reliable

import (
	"strings"
	"testing"
	"time"
)

// Config.Check refuses, without a link, what Join would: the runtime's
// settings and the core's own (a window beyond the core's, a failure
// timeout within the heartbeat), so that a program can refuse its flags
// before it opens a socket (rbcastd run).
func TestConfigCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" accepted
	}{
		{Config{Group: 1, Views: true}, ""},
		{Config{Group: 1, Size: 3, Order: Total}, ""},
		{Config{Group: 1, Views: true, Window: 100000}, "Window is 100000, want 1..32768"},
		{Config{Group: 1, Size: 2, Window: 100000}, "Window is 100000, want 1..32768"},
		{Config{Group: 1, Views: true, Order: Total, Window: 5000}, "Window is 5000, want 0..4096"},
		{Config{Group: 1, Views: true, HeartbeatInterval: 3 * time.Second}, "FailureTimeout (2000000000 ns) must exceed HeartbeatInterval (3000000000 ns)"},
		{Config{Group: 1, Size: 3, Order: Total, FailureTimeout: 150 * time.Millisecond}, "must exceed twice HeartbeatInterval"},
		{Config{Group: 1, Views: true, MaxMembers: 61}, "MaxMembers is 61, want 0..60"},
		{Config{Group: 1, Size: 41}, "registration needs Size (members to register) in 1..40"},
	} {
		err := c.cfg.Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want accepted", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
