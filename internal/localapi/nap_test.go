package localapi

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// napReceiver is a RingReceiver on one end of a deliver ring, its
// connection on a socket pair whose other end (the daemon's) is
// returned, with SetNap(d) and a sleep that calls onNap instead of
// sleeping (virtual time).
func napReceiver(t *testing.T, d time.Duration, onNap func(time.Duration)) (rr *RingReceiver, p *Ring, daemon int) {
	t.Helper()
	p, c := ringPair(t, RingDeliver, MinRing, 2000)
	a, b := seqpacketPair(t)
	cn := &Conn{rbuf: make([]byte, 1+MaxStatus+1)}
	if err := cn.attach(a); err != nil {
		t.Fatal(err)
	}
	rr = &RingReceiver{c: cn, r: c}
	rr.SetNap(d)
	rr.nap.sleep = onNap
	return rr, p, int(b.Fd())
}

// napMsg is message i of a stream, 1000 bytes.
func napMsg(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%07d,", i)), 125)
}

// add publishes messages [from, to) and reports whether the producer
// had to ring.
func napAdd(t *testing.T, p *Ring, from, to int) (rang bool) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := p.Add(7, napMsg(i)); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	return p.Publish()
}

func napNext(t *testing.T, rr *RingReceiver, i int) {
	t.Helper()
	from, d, ok, err := rr.Next(true)
	if err != nil || !ok || from != 7 || !bytes.Equal(d, napMsg(i)) {
		t.Fatalf("message %d: from %d, %d bytes %.16q, ok %v, err %v", i, from, len(d), d, ok, err)
	}
}

// A reader of a stream that finds its ring empty after a burst naps
// instead of asking for a doorbell: the daemon publishes meanwhile
// without ringing, and what the nap found comes out whole and in order;
// a nap that finds nothing goes back to the doorbell, which then wakes
// the reader for the next message.
func TestRingNapStream(t *testing.T) {
	const burst = 40 // 40 000 bytes, past NapBurst
	var p *Ring
	var naps []time.Duration
	rangInNap := false
	onNap := func(d time.Duration) {
		naps = append(naps, d)
		if len(naps) == 1 { // the daemon publishes the next burst meanwhile
			rangInNap = napAdd(t, p, burst, 2*burst)
		}
	}
	rr, p0, daemon := napReceiver(t, 300*time.Microsecond, onNap)
	p = p0
	if napAdd(t, p, 0, burst) {
		t.Fatal("the first publish rang a reader that was not asleep")
	}
	// A reader that did not nap would wait for a doorbell that never
	// comes: the deadline turns that into a failure.
	rr.c.SetDeadline(time.Now().Add(5 * time.Second))
	for i := range 2 * burst {
		napNext(t, rr, i) // the second burst after a nap
	}
	rr.c.SetDeadline(time.Time{})
	if len(naps) != 1 || naps[0] != 300*time.Microsecond || rangInNap {
		t.Fatalf("after the first burst: naps %v, the daemon rang during the nap: %v", naps, rangInNap)
	}
	if n, found := rr.Naps(); n != 1 || found != 1 || rr.Sleeps() != 0 {
		t.Fatalf("Naps %d, %d found, Sleeps %d; want 1, 1, 0", n, found, rr.Sleeps())
	}
	// The stream pauses: the second nap finds nothing, and the reader
	// asks for a doorbell (wantData) and sleeps on the socket.
	type res struct {
		from uint16
		d    []byte
		err  error
	}
	got := make(chan res, 1)
	go func() {
		from, d, _, err := rr.Next(true)
		got <- res{from, bytes.Clone(d), err}
	}()
	for p.wantData.Load() == 0 {
		runtime.Gosched()
	}
	if !napAdd(t, p, 2*burst, 2*burst+1) {
		t.Fatal("a publish after the reader asked for a doorbell did not ring")
	}
	if _, err := unix.Write(daemon, (&DaemonDoorbell{Ring: RingDeliver}).Append(nil)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.from != 7 || !bytes.Equal(r.d, napMsg(2*burst)) {
		t.Fatalf("after the doorbell: from %d, %d bytes, err %v", r.from, len(r.d), r.err)
	}
	if n, found := rr.Naps(); n != 2 || found != 1 || rr.Sleeps() != 1 {
		t.Fatalf("Naps %d, %d found, Sleeps %d; want 2, 1, 1", n, found, rr.Sleeps())
	}
}

// Single messages (less than NapBurst read since the ring was last
// empty) are never napped on: the reader asks for a doorbell at once,
// so a ping waits for no timer.
func TestRingNapNotForSingleMessages(t *testing.T) {
	rr, p, daemon := napReceiver(t, time.Millisecond, func(time.Duration) {
		t.Error("napped after a single message")
	})
	napAdd(t, p, 0, 1)
	napNext(t, rr, 0)
	for i := 1; i < 4; i++ {
		errs := make(chan error, 1)
		go func() {
			from, d, _, err := rr.Next(true)
			if err == nil && (from != 7 || !bytes.Equal(d, napMsg(i))) {
				err = fmt.Errorf("message %d: from %d, %d bytes", i, from, len(d))
			}
			errs <- err
		}()
		for p.wantData.Load() == 0 { // the reader asked for a doorbell
			runtime.Gosched()
		}
		if !napAdd(t, p, i, i+1) {
			t.Fatalf("message %d: the publish did not ring", i)
		}
		if _, err := unix.Write(daemon, (&DaemonDoorbell{Ring: RingDeliver}).Append(nil)); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rr.Naps(); n != 0 || rr.Sleeps() != 3 {
		t.Fatalf("Naps %d, Sleeps %d; want 0, 3", n, rr.Sleeps())
	}
}

// TestNapKeepsP: a nap (napSleep, the default) keeps the process's P
// through its sleep and hands it to the other goroutines at its end: at
// GOMAXPROCS=1 a goroutine that counts while it has the P counts at most
// a few times during a 2 ms nap, and at least once. By time.Sleep the P
// went idle at every nap and the runtime's sysmon slept until the nap's
// timer and woke with it (docs/local-api.md, "The data path"); the
// counter then ran all through the nap.
func TestNapKeepsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const nap = 2 * time.Millisecond
	rr, p, _ := napReceiver(t, nap, nil)
	rr.nap.sleep = nil // the default
	count := pCounter(t)
	const burst = 40 // 40 000 bytes, past NapBurst
	kept, woke := 0, 0
	for round := range 5 {
		napAdd(t, p, round*burst, (round+1)*burst)
		for i := round * burst; i < (round+1)*burst; i++ {
			napNext(t, rr, i)
		}
		if err := rr.Release(); err != nil {
			t.Fatal(err)
		}
		before, start := count.Load(), time.Now()
		if rr.napped() {
			t.Fatal("a nap found a record, though none was published")
		}
		took, ran := time.Since(start), count.Load()-before
		if took < nap {
			t.Errorf("round %d: the nap took %v, want at least %v", round, took, nap)
		}
		if ran > 0 {
			woke++
		}
		if ran <= 10 {
			kept++
		}
	}
	if naps, _ := rr.Naps(); naps != 5 {
		t.Errorf("%d naps, want 5", naps)
	}
	// The nap's Gosched lets the other goroutine run at its end; once in
	// a while the scheduler runs something else there first (seen once in
	// 46 runs under -race on a loaded machine), so four rounds of five.
	if woke < 4 {
		t.Errorf("the other goroutine ran at the end of %d of 5 naps; want 4 at least (the nap's Gosched)", woke)
	}
	if kept < 5 {
		t.Errorf("with GOMAXPROCS=1 the P was kept through %d of 5 naps of %v; want all (another goroutine ran more than 10 times during the others)", kept, nap)
	}
}
