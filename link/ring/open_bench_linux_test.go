package ring

import (
	"fmt"
	"testing"
)

// BenchmarkOpen is what opening a link costs at MTU 1500 by ring size:
// OpenSockets alone (the step that needs CAP_NET_RAW), and Open, most of
// which is the kernel allocating and zeroing the rings in Setup.
//
//	go test -run '^$' -bench Open -benchtime 20x ./link/ring
func BenchmarkOpen(b *testing.B) {
	topo := up(b, "o", 1, 1500)
	h := topo.Hosts[0]
	b.Run("sockets", func(b *testing.B) {
		for b.Loop() {
			if err := h.Do(func() error {
				s, err := OpenSockets(h.Iface, Config{})
				if err != nil {
					return err
				}
				b.StopTimer() // closing waits for an RCU grace period
				defer b.StartTimer()
				return s.Close()
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		rx, tx int // MiB
		v      Version
	}{{16, 4, V2}, {8, 4, V2}, {4, 4, V2}, {2, 1, V2}, {1, 1, V2}, {16, 4, V3}} {
		b.Run(fmt.Sprintf("%v/rx%dMiB/tx%dMiB", c.v, c.rx, c.tx), func(b *testing.B) {
			cfg := Config{Version: c.v, BlockCount: c.rx << 4, TxBlockCount: c.tx << 4} // 64 KiB blocks, the default at 1500
			for b.Loop() {
				if err := h.Do(func() error {
					l, err := Open(h.Iface, cfg)
					if err != nil {
						return err
					}
					b.StopTimer()
					defer b.StartTimer()
					return l.Close()
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
