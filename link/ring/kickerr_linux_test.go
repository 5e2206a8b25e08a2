package ring

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// TestKickRefusedError: the kernel refuses a staged frame (the device's
// MTU shrank under the link); Kick's error must name it as Send's does:
// the slot, its length and the link's limit, and the frames dropped with
// it. The link then works again.
func TestKickRefusedError(t *testing.T) {
	topo := up(t, "f", 2, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			tx, rx, mk := refusingPair(t, topo, v)
			if n, err := tx.Stage([][]byte{mk(0, 500), mk(1, 1200), mk(2, 500), mk(3, 500)}); n != 4 || err != nil {
				t.Fatalf("Stage = %d, %v; want 4, nil", n, err)
			}
			err := tx.Kick()
			want := "kernel refused the staged frame in TX slot 1 (1200 bytes, TP_STATUS_WRONG_FORMAT; the link allows 1514 for its MTU of 1500, the device now less?); it and the 2 frames staged after it were dropped unsent"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Kick of a frame over the device's MTU: %v; want an error saying %q", err, want)
			}
			t.Logf("Kick: %v", err)
			if n, err := tx.Stage([][]byte{mk(4, 500)}); n != 1 || err != nil {
				t.Fatalf("Stage after the refused Kick = %d, %v", n, err)
			}
			if err := tx.Kick(); err != nil {
				t.Fatalf("Kick after the refused Kick: %v", err)
			}
			// Stage counted the dropped frames as sent; Kick took them off.
			if st, _ := tx.Stats(); st.FramesSent != 2 || st.BytesSent != 1000 {
				t.Errorf("Stats after the refused Kick: %d frames, %d bytes sent; want 2 and 1000", st.FramesSent, st.BytesSent)
			}
			got, err := recvUntil(rx, 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || binary.BigEndian.Uint64(got[0][14:]) != 0 || binary.BigEndian.Uint64(got[1][14:]) != 4 {
				t.Errorf("received %d frames, want frames 0 and 4", len(got))
			}
		})
	}
}
