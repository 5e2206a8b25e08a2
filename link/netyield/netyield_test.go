//go:build linux

package netyield

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollerWoken has a goroutine wait in the network poller (a pipe's
// read), makes the pipe readable and then polls with yield up to
// looks times: it returns how many looks passed before the reader ran
// (looks when it never did).
func pollerWoken(t *testing.T, yield func(), looks int) int {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var ran atomic.Bool
	parked := make(chan struct{})
	go func() {
		close(parked)
		var b [1]byte
		if _, err := r.Read(b[:]); err == nil {
			ran.Store(true)
		}
	}()
	<-parked
	// The reader now waits in the poller; this sleep also has the
	// scheduler look at the poller, so that sysmon (which looks after
	// 10 ms without a look) does not during the loop below.
	time.Sleep(time.Millisecond)
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	for i := range looks {
		if ran.Load() {
			return i
		}
		yield()
	}
	return looks
}

// With one P, a goroutine the poller has ready runs at the first Yield
// of a polling goroutine; with runtime.Gosched it waits for the poll to
// end (sysmon's look, 10 ms later, at best).
func TestYieldRunsPollerReadyGoroutine(t *testing.T) {
	const looks = 200
	if n := pollerWoken(t, Yield, looks); n > 2 {
		t.Fatalf("with GOMAXPROCS=1 the poller's goroutine ran after %d Yields, want at most 2", n)
	}
	if n := pollerWoken(t, YieldPoller, looks); n > 2 {
		t.Fatalf("with GOMAXPROCS=1 the poller's goroutine ran after %d YieldPollers, want at most 2", n)
	}
}

// TestGoschedStarvesPoller documents why Yield exists: the same loop
// with runtime.Gosched does not let the poller's goroutine run.
func TestGoschedStarvesPoller(t *testing.T) {
	if n := pollerWoken(t, runtime.Gosched, 200); n < 200 {
		t.Skipf("the poller's goroutine ran after %d Goscheds (sysmon looked at the poller): nothing to show", n)
	}
}

// Yield with several Ps, and concurrently from several goroutines,
// returns (each goroutine its own eventfd).
func TestYieldConcurrent(t *testing.T) {
	for _, procs := range []int{1, 2} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			done := make(chan struct{})
			for range 4 {
				go func() {
					for range 1000 {
						YieldPoller()
						Yield()
					}
					done <- struct{}{}
				}()
			}
			for range 4 {
				<-done
			}
		}()
	}
}

func BenchmarkYield(b *testing.B) {
	for _, procs := range []int{1, 2} {
		b.Run(map[int]string{1: "procs=1", 2: "procs=2"}[procs], func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for b.Loop() {
				Yield()
			}
		})
	}
	b.Run("Gosched", func(b *testing.B) {
		for b.Loop() {
			runtime.Gosched()
		}
	})
}

// BenchmarkGiveWay is what each way a poll could give the CPU away costs
// the poller: sched_yield (GiveCPU's), a raw nanosleep on a locked thread
// with the default timer slack (50 µs) and with 1 µs
// (PR_SET_TIMERSLACK), and time.Sleep, which waits on the runtime's
// timers. ns/op is the time until the poller looks again.
func BenchmarkGiveWay(b *testing.B) {
	nanosleep := func(d time.Duration, slack uintptr) func(*testing.B) {
		return func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			old, _, _ := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_TIMERSLACK, 0, 0)
			defer unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, old, 0)
			if slack > 0 {
				if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, slack, 0); e != 0 {
					b.Fatalf("prctl(PR_SET_TIMERSLACK, %d): %v", slack, e)
				}
			}
			ts := unix.NsecToTimespec(int64(d))
			for b.Loop() {
				unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
			}
		}
	}
	b.Run("sched_yield", func(b *testing.B) {
		for b.Loop() {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	})
	b.Run("nanosleep=0/slack=1us", nanosleep(0, 1000))
	b.Run("nanosleep=5us/slack=1us", nanosleep(5*time.Microsecond, 1000))
	b.Run("nanosleep=5us/slack=default", nanosleep(5*time.Microsecond, 0))
	b.Run("time.Sleep=5us", func(b *testing.B) {
		for b.Loop() {
			time.Sleep(5 * time.Microsecond)
		}
	})
}

// gives has goroutines polls poll at once, each looks times with Mark,
// Yield and GiveCPU between looks, and returns how many of the
// GiveCPUs gave the CPU away.
func gives(polls, looks int) int {
	var n atomic.Int64
	done := make(chan struct{})
	for range polls {
		go func() {
			defer func() { done <- struct{}{} }()
			for range looks {
				m := Mark()
				Yield()
				if GiveCPU(m) {
					n.Add(1)
				}
			}
		}()
	}
	for range polls {
		<-done
	}
	return int(n.Load())
}

// With one P, two polls of one process that take turns give the CPU to
// other processes about once a round of their looks, not once a look
// each; a poll alone, and polls with several Ps, give it every look.
func TestGiveCPUOnceARound(t *testing.T) {
	const looks = 400
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		if n := gives(1, looks); n != looks {
			t.Errorf("one poll at GOMAXPROCS=1 gave the CPU away %d times in %d looks, want every look", n, looks)
		}
		// Most rounds are one look of each poll; a garbage collection
		// or a timer may run one poll twice in a row.
		if n := gives(2, looks); n > looks*5/4 || n < looks/2 {
			t.Errorf("two polls at GOMAXPROCS=1 gave the CPU away %d times in 2 × %d looks, want about %d (one a round)", n, looks, looks)
		}
	}()
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		if n := gives(2, looks); n != 2*looks {
			t.Errorf("two polls at GOMAXPROCS=2 gave the CPU away %d times in 2 × %d looks, want every look", n, looks)
		}
	}()
}

// syscr is the process's read system calls so far (/proc/self/io).
func syscr(t *testing.T) int64 { return ioCount(t, "syscr:") }

// A yield makes no read: the eventfd's write and the poller's look are
// its only system calls (a third, the counter's read, was one a look of
// every spin at one P). It still returns each time, the eventfd's
// counter undrained.
func TestYieldPollerReadsNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	YieldPoller() // the eventfd, made outside the count
	const n = 2000
	before := syscr(t)
	for range n {
		YieldPoller()
	}
	if got := syscr(t) - before; got > n/10 {
		t.Fatalf("%d yields made %d read system calls, want none of their own (at most %d from the rest of the process)", n, got, n/10)
	}
}

// Hold, at one P, has a poll that took its Mark before it keep the CPU at
// its next GiveCPU (a goroutine it handed work to runs first); the round
// after gives it away again. With more Ps it changes nothing.
func TestHold(t *testing.T) {
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		mark := Mark()
		Hold()
		if GiveCPU(mark) {
			t.Error("GiveCPU after a Hold at GOMAXPROCS=1 gave the CPU away")
		}
		if !GiveCPU(Mark()) {
			t.Error("GiveCPU in the round after a Hold kept the CPU")
		}
	}()
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		mark := Mark()
		Hold()
		if !GiveCPU(mark) {
			t.Error("GiveCPU after a Hold at GOMAXPROCS=2 kept the CPU")
		}
	}()
}

// BenchmarkSpinIdle is one look of an idle poll at one P, as rbcastd's
// daemons run: Spin.Turn, then GiveCPU, with the real poller, asking it
// once per 20 µs (the daemon's spins), once per 50 µs (a client's) and
// at every Turn. ns/op is a look's wall time; cpu-ns/op and sys-ns/op the
// process's CPU time (getrusage) and its part in the kernel, cpu-s/s the
// CPU time per second of polling; writes/op the eventfd writes
// (/proc/self/io syscw), one per ask of the poller.
func BenchmarkSpinIdle(b *testing.B) {
	for _, c := range []struct {
		name   string
		poller time.Duration
	}{{"poller=20us", 20 * time.Microsecond}, {"poller=50us", 50 * time.Microsecond}, {"poller=every", 0}} {
		b.Run(c.name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			s := Spin{Poller: c.poller}
			GiveCPU(s.Turn(s.Now())) // the eventfd, made outside the count
			var r0, r1 unix.Rusage
			w0 := ioCount(b, "syscw:")
			unix.Getrusage(unix.RUSAGE_SELF, &r0)
			for b.Loop() {
				GiveCPU(s.Turn(s.Now()))
			}
			unix.Getrusage(unix.RUSAGE_SELF, &r1)
			w1 := ioCount(b, "syscw:")
			n := float64(b.N)
			user := time.Duration(unix.TimevalToNsec(r1.Utime) - unix.TimevalToNsec(r0.Utime))
			sys := time.Duration(unix.TimevalToNsec(r1.Stime) - unix.TimevalToNsec(r0.Stime))
			b.ReportMetric(float64(user+sys)/n, "cpu-ns/op")
			b.ReportMetric(float64(user+sys)/float64(b.Elapsed()), "cpu-s/s")
			b.ReportMetric(float64(sys)/n, "sys-ns/op")
			b.ReportMetric(float64(w1-w0)/n, "writes/op")
		})
	}
}

// ioCount is a counter of /proc/self/io (key with its colon).
func ioCount(tb testing.TB, key string) int64 {
	bs, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Skipf("no I/O accounting: %v", err)
	}
	for _, l := range strings.Split(string(bs), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				tb.Fatalf("/proc/self/io: %q: %v", l, err)
			}
			return n
		}
	}
	tb.Skipf("/proc/self/io has no %s", key)
	return 0
}
