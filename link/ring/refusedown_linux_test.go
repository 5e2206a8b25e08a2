package ring

import (
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSendOwnFramesRefused: Send fills the TX ring, waits for a slot, and
// meanwhile the kernel has refused one of the frames this Send already
// filled (the device's MTU shrank under the link, and the refusal surfaced
// in the kick of what was still pending, not in the wait itself: after an
// EAGAIN, say). That frame and the ones after it are taken back unsent.
// Send used to fill on over them and report the whole batch sent; it must
// stop there, report only the frames that went out, and say why. The
// kernel's side cannot be timed from a test, so waitHook plays it: after
// the wait it leaves the batch's third frame refused and its fourth
// pending, as the kernel would have.
func TestSendOwnFramesRefused(t *testing.T) {
	tx, frames := fourSlotRing(t, "h")
	fired := false
	waitHook = func(l *Link) {
		if fired {
			return
		}
		fired = true
		slots := uint64(len(l.txSlot))
		atomic.StoreUint32(status(l.tx.ring, l.txSlot[2%slots]), unix.TP_STATUS_AVAILABLE|unix.TP_STATUS_WRONG_FORMAT)
		atomic.StoreUint32(status(l.tx.ring, l.txSlot[3%slots]), unix.TP_STATUS_SEND_REQUEST)
	}
	t.Cleanup(func() { waitHook = nil })
	n, err := tx.Send(frames)
	if !fired {
		t.Fatal("Send never waited for a slot: the ring is not full at the fifth frame?")
	}
	want := "frames 2 to 3 of the batch were dropped unsent: kernel refused the staged frame in TX slot 2 (500 bytes, TP_STATUS_WRONG_FORMAT"
	if n != 2 || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Send = %d, %v; want 2 and an error saying %q", n, err, want)
	}
	if st, _ := tx.Stats(); st.FramesSent != 2 || st.BytesSent != 1000 {
		t.Errorf("Stats: %d frames, %d bytes sent; want 2 and 1000", st.FramesSent, st.BytesSent)
	}
	// The ring is usable again, from the slot taken back.
	if n, err := tx.Send(frames[2:]); n != 4 || err != nil {
		t.Fatalf("Send after the refusal = %d, %v; want 4, nil", n, err)
	}
	if st, _ := tx.Stats(); st.FramesSent != 6 {
		t.Errorf("Stats after the second Send: %d frames sent, want 6", st.FramesSent)
	}
}

// TestSendBehindRefused: the kernel's transmit head is a frame an earlier
// Stage put there and the kernel refused (its Kick has not taken the ring
// back yet), and Send meets it waiting for a slot. Send used to return
// 0 and an error, leaving its frames in the ring uncounted; the next
// dropRefused took them off Stats anyway, and FramesSent wrapped below
// zero. Send must take the ring back itself, count nothing of its own,
// say why, and leave the ring usable.
func TestSendBehindRefused(t *testing.T) {
	tx, frames := fourSlotRing(t, "hb")
	if n, err := tx.Stage(frames[:2]); n != 2 || err != nil {
		t.Fatalf("Stage = %d, %v", n, err)
	}
	// The kernel refused the first staged frame, as it would in a Kick.
	atomic.StoreUint32(status(tx.tx.ring, tx.txSlot[0]), unix.TP_STATUS_WRONG_FORMAT)
	n, err := tx.Send(frames[2:])
	want := "frames 0 to 1 of the batch were dropped unsent: kernel refused the staged frame in TX slot 0 (500 bytes, TP_STATUS_WRONG_FORMAT"
	if n != 0 || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Send = %d, %v; want 0 and an error saying %q", n, err, want)
	}
	if st, _ := tx.Stats(); st.FramesSent != 0 || st.BytesSent != 0 {
		t.Errorf("Stats: %d frames, %d bytes sent; want 0 and 0", st.FramesSent, st.BytesSent)
	}
	if err := tx.Kick(); err != nil {
		t.Errorf("Kick after Send took the ring back: %v", err)
	}
	if n, err := tx.Send(frames[2:]); n != 4 || err != nil {
		t.Fatalf("Send after the refusal = %d, %v; want 4, nil", n, err)
	}
	if st, _ := tx.Stats(); st.FramesSent != 4 {
		t.Errorf("Stats after the second Send: %d frames sent, want 4", st.FramesSent)
	}
}

// fourSlotRing opens a link whose TX ring holds four frames (two 4 KiB
// blocks of two 1552-byte slots) on a new 2-host topology, and builds six
// 500-byte frames from it: more than the ring takes at once.
func fourSlotRing(t *testing.T, prefix string) (*Link, [][]byte) {
	t.Helper()
	topo := up(t, prefix, 2, 1500)
	tx := openOn(t, topo.Hosts[0], Config{TxBlockSize: 4096, TxBlockCount: 2})
	if n := tx.TXGeometry().FrameCount; n != 4 {
		t.Fatalf("TX ring of %d frames, want 4", n)
	}
	var frames [][]byte
	for seq := range 6 {
		frames = append(frames, buildFrame(make([]byte, 500), tx.HardwareAddr(), 0x88b5, uint64(seq), 500))
	}
	return tx, frames
}
