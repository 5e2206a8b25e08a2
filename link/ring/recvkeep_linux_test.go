package ring

import (
	"bytes"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// batchOf receives exactly n frames with recv (lockstep: they were sent
// already) and returns them with copies of their bytes.
func batchOf(t *testing.T, recv func(time.Time, []Frame) (int, error), n int) (views, copies [][]byte) {
	t.Helper()
	frames := make([]Frame, n)
	got, err := recv(time.Now().Add(time.Second), frames)
	if err != nil || got != n {
		t.Fatalf("receive = %d, %v; want %d frames", got, err, n)
	}
	for _, f := range frames[:got] {
		views = append(views, f.Data)
		copies = append(copies, bytes.Clone(f.Data))
	}
	return views, copies
}

func intact(views, copies [][]byte) bool {
	for i := range views {
		if !bytes.Equal(views[i], copies[i]) {
			return false
		}
	}
	return true
}

// TestRecvKeep: the frames one RecvKeep returned are still intact after
// the next RecvKeep, even when the kernel has new frames for the ring and
// the ring is full (with Recv, the control, the kernel writes the new
// frames over them); the call after gives them back. Over several laps
// of a small ring, in lockstep, every frame arrives in order and intact,
// with V2 and V3.
func TestRecvKeep(t *testing.T) {
	topo := up(t, "p", 2, 1500)
	small := func(v Version) Config {
		return Config{Version: v, BlockSize: 4096, BlockCount: 16, BlockTimeout: time.Millisecond}
	}
	src := topo.Hosts[0].MAC
	send := func(t *testing.T, tx *Link, first, n int) {
		t.Helper()
		frames := make([][]byte, n)
		for i := range frames {
			seq := uint64(first + i)
			size := frameLen(seq, tx.MTU())
			frames[i] = buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, seq, size)
		}
		if got, err := tx.Send(frames); got != n || err != nil {
			t.Fatalf("Send = %d, %v; want %d", got, err, n)
		}
		time.Sleep(10 * time.Millisecond) // let the kernel deliver (and drop)
	}

	for _, keep := range []bool{true, false} {
		name := map[bool]string{true: "RecvKeep", false: "Recv (control)"}[keep]
		t.Run("V2 full ring/"+name, func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{})
			rx := openOn(t, topo.Hosts[1], small(V2))
			recv := rx.Recv
			if keep {
				recv = rx.RecvKeep
			}
			capacity := rx.RXGeometry().FrameCount
			send(t, tx, 0, capacity) // the ring is full
			const batch = 8
			a, aCopy := batchOf(t, recv, batch)
			b, bCopy := batchOf(t, recv, batch)
			send(t, tx, capacity, batch) // lands where a was, if a was given back
			switch {
			case keep && !intact(a, aCopy):
				t.Fatal("the batch before the last RecvKeep was overwritten: it was given back too early")
			case !keep && intact(a, aCopy):
				t.Fatal("control: with Recv the kernel did not overwrite the given-back batch; the test cannot tell keeping from not")
			}
			if !keep {
				return
			}
			if !intact(b, bCopy) {
				t.Fatal("the last batch was overwritten")
			}
			batchOf(t, recv, batch) // gives a back, keeps b
			if !intact(b, bCopy) {
				t.Fatal("the batch before the last RecvKeep was overwritten after the next call")
			}
		})
	}
	for _, v := range versions {
		t.Run(v.String()+" laps", func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{})
			rx := openOn(t, topo.Hosts[1], small(v))
			const batch, laps = 8, 4 // a kept batch, the one received and the one sent fit the ring
			total := laps * rx.RXGeometry().FrameCount
			var prev, prevCopy [][]byte
			for sent := 0; sent < total; sent += batch {
				send(t, tx, sent, batch)
				var got [][]byte
				frames := make([]Frame, batch)
				for len(got) < batch {
					n, err := rx.RecvKeep(time.Now().Add(time.Second), frames)
					if err != nil {
						t.Fatalf("RecvKeep after %d frames: %v", sent+len(got), err)
					}
					if !intact(prev, prevCopy) {
						t.Fatalf("after %d frames: the previous batch was overwritten", sent+len(got))
					}
					prev, prevCopy = prev[:0], prevCopy[:0]
					for _, f := range frames[:n] {
						seq, err := checkFrame(f.Data, src, link.EtherTypeRbcast, tx.MTU())
						if err != nil {
							t.Fatal(err)
						}
						if want := uint64(sent + len(got)); seq != want {
							t.Fatalf("frame %d arrived where %d was due", seq, want)
						}
						got = append(got, f.Data)
						prev, prevCopy = append(prev, f.Data), append(prevCopy, bytes.Clone(f.Data))
					}
				}
			}
			if st, _ := rx.Stats(); st.KernelDrops != 0 {
				t.Errorf("%d kernel drops in lockstep", st.KernelDrops)
			}
		})
	}
}
