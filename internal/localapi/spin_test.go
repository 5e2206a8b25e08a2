package localapi

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link/netyield"
)

// A consumer that polls (Waiting) leaves wantData clear: the producer
// then publishes without a doorbell, and the consumer sees the record.
func TestRingWaitingNoDoorbell(t *testing.T) {
	p, c := ringPair(t, RingSend, MinRing, 100)
	if c.Waiting() {
		t.Fatal("Waiting on an empty ring")
	}
	p.Add(3, []byte("x"))
	if p.Publish() {
		t.Fatal("Publish rang a consumer that polls")
	}
	if !c.Waiting() {
		t.Fatal("Waiting after a publish says nothing waits")
	}
	if from, d, ok, err := c.Next(); err != nil || !ok || from != 3 || string(d) != "x" {
		t.Fatalf("Next: %d %q %v %v", from, d, ok, err)
	}
	if c.Waiting() {
		t.Fatal("Waiting once everything is read")
	}
}

// seqpacketPair is a connected pair of SOCK_SEQPACKET sockets.
func seqpacketPair(t *testing.T) (a *net.UnixConn, b *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa := os.NewFile(uintptr(fds[0]), "a")
	c, err := net.FileConn(fa)
	fa.Close()
	if err != nil {
		t.Fatal(err)
	}
	b = os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { c.Close(); b.Close() })
	return c.(*net.UnixConn), b
}

// A PacketReader's ready function is looked at while it spins (sleep
// false) and once before it sleeps (sleep true); true ends the read with
// ErrReady, and a packet that waits is read first.
func TestPacketReaderReady(t *testing.T) {
	a, b := seqpacketPair(t)
	r, err := NewPacketReader(a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var looks []bool
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		return len(looks) == 3
	})
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) {
		t.Fatalf("Read with ready true on its third look while spinning: %v, want ErrReady", err)
	}
	if len(looks) != 3 || looks[0] || looks[1] || looks[2] {
		t.Fatalf("looks %v, want three while spinning", looks)
	}
	// No spin: one look, before sleeping.
	r.SetSpin(0)
	looks = nil
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		return true
	})
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || len(looks) != 1 || !looks[0] {
		t.Fatalf("Read without a spin: %v, looks %v; want ErrReady after one look before sleeping", err, looks)
	}
	// A packet waiting is read, ready not asked.
	looks = nil
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n, _, err := r.Read(buf); err != nil || string(buf[:n]) != "hello" || len(looks) != 0 {
		t.Fatalf("Read with a packet waiting: %q, %v, looks %v", buf[:n], err, looks)
	}
	// Ready false before sleeping: the read sleeps until a packet comes.
	looks = nil
	r.SetReady(func(sleep bool) bool {
		looks = append(looks, sleep)
		if sleep {
			b.Write([]byte("late"))
		}
		return false
	})
	if n, _, err := r.Read(buf); err != nil || string(buf[:n]) != "late" || len(looks) != 1 {
		t.Fatalf("Read that slept: %q, %v, looks %v", buf[:n], err, looks)
	}
}

// pollerWakes parks a goroutine in the network poller (a pipe's read),
// makes the pipe readable and runs poll with GOMAXPROCS=1: woken, the
// goroutine runs wake. The sleep before the write also has the scheduler
// look at the poller, so that sysmon (which looks after 10 ms without a
// look) does not while poll runs.
func pollerWakes(t *testing.T, wake func(), poll func()) {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		if _, err := pr.Read(b[:]); err == nil {
			wake()
		}
	}()
	time.Sleep(time.Millisecond)
	if _, err := pw.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	poll()
	<-done
}

// With one P, a goroutine the network poller woke (a client's doorbell,
// in the daemon) runs while a PacketReader spins: its packet is found by
// the spin. With runtime.Gosched between looks it ran only after the spin
// (5 ms, shorter than sysmon's look) and the read slept in the poller.
// A contended yield (other processes held the CPU for longer than the
// spin: CI's other test binaries) ends a spin early by design; such tries
// say nothing and are tried again, up to oneTries. Most of five
// uncontended tries must find the packet by the spin.
func TestPacketReaderSpinOneP(t *testing.T) {
	spun, clear, contended := 0, 0, 0
	for clear < 5 && clear+contended < oneTries {
		a, b := seqpacketPair(t)
		r, err := NewPacketReader(a, 5*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		pollerWakes(t, func() { b.Write([]byte("bell")) }, func() {
			n, _, err := r.Read(buf)
			if err != nil || string(buf[:n]) != "bell" {
				t.Fatalf("Read = %q, %v; want the packet", buf[:n], err)
			}
		})
		switch {
		case r.spin.pace.Pause() > 0:
			contended++
		case !r.polled:
			spun++
			clear++
		default:
			clear++
		}
	}
	oneVerdict(t, "spinning Reads let the poller's goroutine write the packet they found", spun, clear, contended)
}

// oneTries bounds the tries of the GOMAXPROCS=1 tests when other
// processes keep taking the CPU.
const oneTries = 50

// oneVerdict wants most of the clear (uncontended) tries to have done
// it; with fewer than three clear tries there is nothing to judge.
func oneVerdict(t *testing.T, what string, did, clear, contended int) {
	t.Helper()
	if clear < 3 {
		t.Skipf("the CPU was contended in %d of %d tries: too few clear tries to judge", contended, contended+clear)
	}
	if 2*did <= clear {
		t.Errorf("with GOMAXPROCS=1 %d of %d uncontended %s; want most (%d contended tries not counted)", did, clear, what, contended)
	}
}

// The same for a RingReceiver's poll (spinner): the flag a poller-woken
// goroutine sets is seen before the 5 ms poll ends.
func TestSpinnerOneP(t *testing.T) {
	seen, clear, contended := 0, 0, 0
	for clear < 5 && clear+contended < oneTries {
		var flag atomic.Bool
		saw := false
		s := spinner{d: 5 * time.Millisecond, pace: netyield.Spin{Poller: spinPoller}}
		pollerWakes(t, func() { flag.Store(true) }, func() {
			if !s.begin(s.pace.Now()) {
				return
			}
			for !flag.Load() && s.yield() {
			}
			saw = flag.Load()
		})
		switch {
		case s.pace.Pause() > 0:
			contended++
		case saw:
			seen++
			clear++
		default:
			clear++
		}
	}
	oneVerdict(t, "polls let the poller's goroutine run", seen, clear, contended)
}

// A spinner lets the network poller run (netyield.Yield, two system
// calls at one P) at most once per spinPoller, not at every look: the
// looks between are runtime.Gosched.
func TestSpinnerPollerEvery(t *testing.T) {
	calls := 0
	s := spinner{d: time.Second, pace: netyield.Spin{Poller: spinPoller, Yield: func() { calls++ }}}
	if !s.begin(s.pace.Now()) {
		t.Fatal("begin refused a poll")
	}
	start := time.Now()
	looks := 0
	for looks < 1000 && s.yield() {
		looks++
	}
	limit := 1 + int(time.Since(start)/spinPoller)
	if looks < 1000 {
		t.Fatalf("the poll ended after %d looks, want 1000", looks)
	}
	if calls == 0 || calls > limit {
		t.Fatalf("%d looks in %v let the poller run %d times, want 1 to %d (once per %v)", looks, time.Since(start), calls, limit, spinPoller)
	}
}

// A PacketReader's spin lets the network poller run (netyield.Yield: at
// one P an eventfd write, a park and epoll_pwait) at most once per
// readerPoller, at its first look and not at every one: the looks between
// are runtime.Gosched. On a clock of the test's own, each reading 1 µs
// after the last, a 1 ms spin makes 500 looks (two readings each; the
// 501st finds the spin over and sleeps, which ready ends), with the
// poller at the first and every tenth after it. A Read that begins
// within readerPoller of the last look does not ask at once.
func TestPacketReaderPollerEvery(t *testing.T) {
	a, _ := seqpacketPair(t)
	r, err := NewPacketReader(a, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	polls := 0
	r.spin.pace.Yield = func() { polls++ }
	clock := time.Now()
	r.spin.pace.Clock = func() time.Time { clock = clock.Add(time.Microsecond); return clock }
	looks := 0
	r.SetReady(func(sleep bool) bool {
		if !sleep {
			looks++
		}
		return sleep
	})
	buf := make([]byte, 16)
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) {
		t.Fatalf("Read on an idle socket: %v, want ErrReady before it sleeps", err)
	}
	if looks != 500 || polls != 50 {
		t.Fatalf("a 1 ms spin made %d looks and let the poller run %d times; want 500 and 50, once per %v", looks, polls, readerPoller)
	}
	if r.spin.pace.Pause() > 0 {
		t.Fatalf("the spin met contention on the test's clock")
	}
	// The last look that asked was the 491st (980 µs in, 20 µs before
	// the spin ended). With the clock set back to it, a Read of a 3 µs
	// spin makes 2 looks, 1 and 3 µs after it, without asking; one that
	// begins 20 µs later asks at its first look.
	polls, looks = 0, 0
	clock = r.spin.pace.Polled()
	r.SetSpin(3 * time.Microsecond)
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || looks != 2 || polls != 0 {
		t.Fatalf("a Read %v after the poller's last look: %v, %d looks, %d asked the poller; want ErrReady, 2 looks, none", r.spin.start.Sub(r.spin.pace.Polled()), err, looks, polls)
	}
	clock = clock.Add(readerPoller)
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || looks != 4 || polls != 1 {
		t.Fatalf("a Read %v later: %v, %d looks in all, %d asked the poller; want ErrReady, 4, one", readerPoller, err, looks, polls)
	}
}

// The localapi polls back off as netyield.Spin says, on a clock of the
// test's own (each reading 1 µs after the last): a contended yield ends
// the poll, no poll starts while its pause holds, and a poll that runs
// out uncontended halves the pause — a spinner's (a RingReceiver's) and
// a PacketReader's alike.
func TestSpinnerBackOff(t *testing.T) {
	clock := time.Unix(1000, 0)
	tick := func() time.Time { clock = clock.Add(time.Microsecond); return clock }
	// away is how long the next ask of the poller keeps the CPU away.
	var away time.Duration
	yield := func() { clock, away = clock.Add(away), 0 }

	s := spinner{d: 100 * time.Microsecond, pace: netyield.Spin{Poller: spinPoller, Clock: tick, Yield: yield}}
	if !s.begin(s.pace.Now()) {
		t.Fatal("begin refused the first poll")
	}
	away = 2 * netyield.Contended
	if s.yield() {
		t.Fatalf("a yield away %v in a poll of %v did not end it", 2*netyield.Contended, s.d)
	}
	if s.pace.Pause() != netyield.PauseMin || s.begin(s.pace.Now()) {
		t.Fatalf("after a contended yield: pause %v, want %v, and no poll while it holds", s.pace.Pause(), netyield.PauseMin)
	}
	clock = clock.Add(netyield.PauseMin)
	if !s.begin(s.pace.Now()) {
		t.Fatal("begin refused a poll after the pause")
	}
	looks := 0
	for s.yield() {
		looks++
	}
	if looks == 0 || s.pace.Pause() != netyield.PauseMin/2 {
		t.Fatalf("a poll that ran out after %d looks left the pause at %v, want %v", looks, s.pace.Pause(), netyield.PauseMin/2)
	}

	a, _ := seqpacketPair(t)
	r, err := NewPacketReader(a, 100*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	r.spin.pace.Clock, r.spin.pace.Yield = tick, yield
	looks = 0
	r.SetReady(func(sleep bool) bool {
		if !sleep {
			looks++
		}
		return sleep
	})
	buf := make([]byte, 16)
	r.spin.pace.Contended(clock, 2*netyield.Contended, r.spin.d)
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || looks != 0 {
		t.Fatalf("a Read while the pause holds: %v after %d looks, want ErrReady at once", err, looks)
	}
	clock = clock.Add(2*netyield.Contended + netyield.PauseMin)
	if _, _, err := r.Read(buf); !errors.Is(err, ErrReady) || looks == 0 || r.spin.pace.Pause() != netyield.PauseMin/2 {
		t.Fatalf("a Read after the pause: %v, %d looks, pause %v; want ErrReady after a spin, the pause halved to %v", err, looks, r.spin.pace.Pause(), netyield.PauseMin/2)
	}
}
