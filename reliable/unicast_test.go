package reliable

import (
	"context"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// dataSeen drains the watcher's queue and returns how many Data frames
// of group it held: a station outside the group sees only what goes to
// broadcast.
func dataSeen(t *testing.T, w *rtnet.Link, group uint32) int {
	t.Helper()
	frames := make([]link.Frame, 64)
	seen := 0
	for {
		n, err := w.Recv(time.Now(), frames)
		for _, f := range frames[:n] {
			v, perr := frame.Parse(f.Data[frame.EthernetHeaderLen:])
			if perr == nil && v.Group() == group && v.Type() == frame.Data {
				seen++
			}
		}
		if n == 0 || err != nil {
			return seen
		}
	}
}

// Unicast over Views: a view of two members sends its Data to the peer's
// MAC, so a station on the segment outside the group sees none of it; a
// third member's join installs a view of three, which broadcasts again.
func TestViewsUnicastPair(t *testing.T) {
	r := rtnet.New(t, 35)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watcher := r.Attach(t, testnet.EndpointConfig{QueueLen: 1 << 14})
	groups, _ := foundViews(t, ctx, r, testnet.EndpointConfig{}, 2, func(_ int, c *Config) { c.Unicast = true })
	awaitMembers(t, groups, 2)
	dataSeen(t, watcher, 21)
	exchange(t, groups, 100)
	if n := dataSeen(t, watcher, 21); n != 0 {
		t.Errorf("a view of two sent %d Data frames the watcher received (want 0: to the peer's MAC)", n)
	}

	c := viewsConfig(1)
	c.Unicast = true
	g3, err := Join(ctx, r.Attach(t, testnet.EndpointConfig{}), c)
	if err != nil {
		t.Fatalf("third member: %v", err)
	}
	t.Cleanup(func() { g3.abort(); <-g3.Done() })
	groups = append(groups, g3)
	awaitMembers(t, groups, 3)
	dataSeen(t, watcher, 21)
	exchange(t, groups, 100)
	if n := dataSeen(t, watcher, 21); n == 0 {
		t.Error("a view of three sent no Data frame the watcher received (want its frames: broadcast)")
	}
}
