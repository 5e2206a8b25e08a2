package capture

import (
	"bytes"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// wrapPair wraps a and b, each into a Writer of its own, and returns the
// pair with A's outbound frames in its file as Pair.Sent.
func wrapPair(t *testing.T, a, b link.Link, settle func()) linktest.Pair {
	t.Helper()
	var files [2]*syncbuf.Buffer
	var ws [2]*Writer
	var cs [2]*Link
	for i, l := range []link.Link{a, b} {
		files[i] = &syncbuf.Buffer{}
		w, err := NewWriter(files[i], WriterOptions{QueueBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		c, err := Wrap(l, w, Options{Node: string(rune('0' + i))})
		if err != nil {
			t.Fatal(err)
		}
		ws[i], cs[i] = w, c
	}
	sent := func() uint64 {
		if err := ws[0].Flush(); err != nil {
			t.Fatal(err)
		}
		if st := ws[0].Stats(); st.Dropped != 0 {
			t.Fatalf("the Writer dropped %d frames", st.Dropped)
		}
		var n uint64
		for _, d := range readAll(t, bytes.NewReader(files[0].Bytes())).dirs {
			if d == pcapgo.NgEpbFlagDirectionOutbound {
				n++
			}
		}
		return n
	}
	return linktest.Pair{A: cs[0], B: cs[1], Settle: settle, Sent: sent}
}

// simPair attaches two endpoints to a fresh simulated segment.
func simPair(t *testing.T) (a, b *testnet.Endpoint, settle func()) {
	t.Helper()
	n, err := testnet.New(1, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err = n.Attach(testnet.EndpointConfig{}); err != nil {
		t.Fatal(err)
	}
	if b, err = n.Attach(testnet.EndpointConfig{}); err != nil {
		t.Fatal(err)
	}
	return a, b, func() {
		for n.Step() {
		}
	}
}

// TestConformance runs the link conformance suite on capture.Link over
// simulated links: testnet endpoints, linktest.Staging over them (staged
// and now-sent frames recorded), and rtnet (a waiting Recv, Wake).
func TestConformance(t *testing.T) {
	t.Run("testnet", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			a, b, settle := simPair(t)
			return wrapPair(t, a, b, settle)
		})
	})
	t.Run("staging", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			a, b, settle := simPair(t)
			return wrapPair(t, linktest.NewStaging(a), linktest.NewStaging(b), settle)
		})
	})
	t.Run("rtnet", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			r := rtnet.New(t, 1)
			return wrapPair(t, r.Attach(t, testnet.EndpointConfig{}), r.Attach(t, testnet.EndpointConfig{}), nil)
		})
	})
}

// TestStagedFramesRecorded: frames staged, sent past the queue and sent
// are in the file byte for byte, outbound, in the order the calls were
// made, and the other end received them all.
func TestStagedFramesRecorded(t *testing.T) {
	a, b, settle := simPair(t)
	var file syncbuf.Buffer
	w, err := NewWriter(&file, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(linktest.NewStaging(a), w, Options{Node: "1"})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := link.StagerOf(c)
	if !ok || st != link.Stager(c) {
		t.Fatalf("StagerOf(capture over a Stager) = %v, %v; want the capture.Link", st, ok)
	}
	var frames [][]byte
	for i := range 6 {
		frames = append(frames, testFrame(t, uint32(i), 10+i))
	}
	if n, err := c.Stage(frames[:3]); n != 3 || err != nil {
		t.Fatalf("Stage = %d, %v", n, err)
	}
	if n, err := c.SendNow(frames[3:5]); n != 2 || err != nil {
		t.Fatalf("SendNow = %d, %v", n, err)
	}
	if err := c.Kick(); err != nil {
		t.Fatalf("Kick: %v", err)
	}
	if n, err := c.Send(frames[5:]); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, bytes.NewReader(file.Bytes()))
	if len(got.data) != len(frames) {
		t.Fatalf("%d frames in the file, want %d", len(got.data), len(frames))
	}
	for i, f := range frames {
		if !bytes.Equal(got.data[i], f) || got.dirs[i] != pcapgo.NgEpbFlagDirectionOutbound {
			t.Errorf("frame %d in the file: direction %d, %x; want outbound, %x", i, got.dirs[i], got.data[i], f)
		}
	}
	// On the wire the frames sent past the queue came first.
	settle()
	rx := make([]link.Frame, 8)
	n, err := b.Recv(time.Time{}, rx)
	if n != len(frames) || err != nil {
		t.Fatalf("the other end received %d frames, %v; want %d", n, err, len(frames))
	}
	for i, want := range append(append(append([][]byte{}, frames[3:5]...), frames[:3]...), frames[5]) {
		if !bytes.Equal(rx[i].Data, want) {
			t.Errorf("frame %d on the wire is %x, want %x", i, rx[i].Data, want)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCapabilitiesTruthful: over a link that cannot stage, capture.Link
// has the methods but reports no Stager or NowSender, and Stage and
// SendNow send.
func TestCapabilitiesTruthful(t *testing.T) {
	a, b, settle := simPair(t)
	c, err := Wrap(a, nil, Options{Recorder: newRecorderForTest(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := link.StagerOf(c); ok {
		t.Error("StagerOf(capture over a testnet endpoint) reports a Stager")
	}
	if _, ok := link.NowSenderOf(c); ok {
		t.Error("NowSenderOf(capture over a testnet endpoint) reports a NowSender")
	}
	f := testFrame(t, 1, 10)
	if n, err := c.Stage([][]byte{f}); n != 1 || err != nil {
		t.Fatalf("Stage = %d, %v", n, err)
	}
	settle() // before Kick: Stage sent it
	rx := make([]link.Frame, 2)
	if n, err := b.Recv(time.Time{}, rx); n != 1 || err != nil || !bytes.Equal(rx[0].Data, f) {
		t.Fatalf("after Stage the other end received %d frames, %v", n, err)
	}
	if err := c.Kick(); err != nil {
		t.Fatalf("Kick: %v", err)
	}
}
