package ring

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// TestLoopback opens the ring on lo (MTU 65536), which used to be refused
// with "interface MTU 65536 out of range": the link works as if the MTU
// were 65535, and a frame that large crosses it intact.
func TestLoopback(t *testing.T) {
	topo := up(t, "l", 1, 1500)
	h := topo.Hosts[0]
	var tx, rx *Link
	err := h.Do(func() error {
		var err error
		if tx, err = Open("lo", Config{}); err != nil {
			return err
		}
		rx, err = Open("lo", Config{})
		return err
	})
	if err != nil {
		t.Fatalf("Open(lo): %v", err)
	}
	defer tx.Close()
	defer rx.Close()
	if got := rx.MTU(); got != maxMTU {
		t.Errorf("MTU() on lo = %d, want %d", got, maxMTU)
	}
	sizes := []int{200, 14 + maxMTU}
	var batch [][]byte
	for i, n := range sizes {
		batch = append(batch, buildFrame(make([]byte, n), tx.HardwareAddr(), link.EtherTypeRbcast, uint64(i), n))
	}
	if n, err := tx.Send(batch); n != len(batch) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	got, err := recvUntil(rx, len(sizes), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sizes) {
		t.Fatalf("received %d frames on lo, want %d", len(got), len(sizes))
	}
	for i, f := range got {
		if string(f) != string(batch[i]) {
			t.Errorf("frame %d: received %d bytes that differ from the %d sent", i, len(f), len(batch[i]))
		}
	}
}
