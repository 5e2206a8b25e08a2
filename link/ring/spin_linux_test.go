package ring

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/netyield"
)

// TestRxSpin: with Config.RxSpin a receiver that polls the ring before
// sleeping still gets every frame byte for byte, in order, without
// duplicates (the broadcast test, full speed, receivers spinning); a Recv
// on an idle link still ends at its deadline with the deadline error.
// (TestClose checks that Close ends a Recv that is spinning.)
func TestRxSpin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "s", 3, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			t.Run("broadcast", func(t *testing.T) {
				testBroadcast(t, topo.Hosts[0], topo.Hosts[1:], Config{Version: v, RxSpin: 50 * time.Microsecond}, 20000)
			})
			t.Run("deadline", func(t *testing.T) {
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: time.Second})
				start := time.Now()
				n, err := rx.Recv(start.Add(50*time.Millisecond), make([]Frame, 4))
				if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Recv on an idle link = %d, %v; want 0 and a deadline error", n, err)
				}
				// The deadline comes before the spin's end: Recv returns at it.
				if waited := time.Since(start); waited < 50*time.Millisecond || waited > 900*time.Millisecond {
					t.Errorf("Recv with a 50 ms deadline and a 1 s spin returned after %v", waited)
				}
			})
			t.Run("one at a time", func(t *testing.T) {
				// A frame that lands while Recv spins is read; each Recv
				// waits for one frame sent after it started. Every other
				// Recv starts in a back-off (as after a contended spin)
				// and so waits in the netpoller.
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: time.Second, BlockTimeout: time.Millisecond})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				frames := make([]Frame, 4)
				var spun uint64 // Recvs that spun and found their frame spinning
				for seq := uint64(0); seq < 20; seq++ {
					found := rx.spinFound
					if seq%2 == 1 {
						rx.spinPace.PauseUntil(time.Now().Add(time.Hour))
					} else {
						rx.spinPace.PauseUntil(time.Time{})
					}
					sent := make(chan error, 1)
					go func() {
						time.Sleep(time.Millisecond)
						size := frameLen(seq, tx.MTU())
						f := buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, seq, size)
						_, err := tx.Send([][]byte{f})
						sent <- err
					}()
					n, err := rx.Recv(time.Now().Add(10*time.Second), frames)
					if err != nil || n != 1 {
						t.Fatalf("Recv of frame %d = %d, %v", seq, n, err)
					}
					if err := <-sent; err != nil {
						t.Fatal(err)
					}
					if got, err := checkFrame(frames[0].Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil || got != seq {
						t.Fatalf("received frame %d (%v), want %d", got, err, seq)
					}
					switch {
					case seq%2 == 1 && rx.spinFound != found:
						t.Fatalf("frame %d was found spinning during a back-off", seq)
					case seq%2 == 0 && rx.spinFound != found:
						spun++
					}
				}
				// Each spinning Recv waits up to a second of yields for a
				// frame sent 1 ms after it started, so the spin, not the
				// netpoller, finds it, unless a yield met contention (a
				// loaded machine: tests of other packages run beside this
				// one) and the spin backed off. At least one must.
				if spun == 0 {
					t.Errorf("none of 10 spinning Recvs found its frame while spinning")
				}
				t.Logf("%d of 10 spinning Recvs found their frame while spinning", spun)
			})
			t.Run("adaptive", func(t *testing.T) {
				// With AdaptiveSpin the spin adapts (spinPolicy): waits whose frame comes a millisecond
				// later, five spins' length, stop it, so later Recvs
				// sleep at once (skips); waits whose frame comes at once
				// bring it back (TPACKET_V2: a V3 block with one frame is
				// handed over when it retires, after BlockTimeout, 1 ms,
				// so there every wait is a miss). An explicit RxSpin
				// keeps its spin without AdaptiveSpin, the default.
				rx := openOn(t, topo.Hosts[1], Config{Version: v, AdaptiveSpin: true, BlockTimeout: time.Millisecond})
				fixed := openOn(t, topo.Hosts[2], Config{Version: v, BlockTimeout: time.Millisecond})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				frames := make([]Frame, 4)
				seq := uint64(0)
				wait := func(after time.Duration) {
					sent := make(chan error, 1)
					go func() {
						time.Sleep(after)
						size := frameLen(seq, tx.MTU())
						f := buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, seq, size)
						_, err := tx.Send([][]byte{f})
						sent <- err
					}()
					for _, l := range []*Link{rx, fixed} {
						l.spinPace.PauseUntil(time.Time{}) // no back-off from contention: the policy's choice only
						if n, err := l.Recv(time.Now().Add(10*time.Second), frames); err != nil || n != 1 {
							t.Fatalf("Recv of frame %d = %d, %v", seq, n, err)
						}
					}
					if err := <-sent; err != nil {
						t.Fatal(err)
					}
					seq++
				}
				for range 14 {
					wait(time.Millisecond)
				}
				st, _ := rx.Stats()
				if got := rx.spinLength(); got != 0 || st.SpinSkips < 3 {
					t.Errorf("after 14 waits of 1 ms: spin %v, %d skips (%d hits, %d misses); want none, and the last 3 Recvs or more sleeping at once",
						got, st.SpinSkips, st.SpinHits, st.SpinMisses)
				}
				if got := fixed.spinLength(); got != DefaultRxSpin {
					t.Errorf("the default spin (%v, no AdaptiveSpin): spin %v after 14 waits of 1 ms", DefaultRxSpin, got)
				}
				for range 40 {
					wait(0)
				}
				st, _ = rx.Stats()
				if got := rx.spinLength(); got == 0 && v == V2 {
					t.Errorf("after 40 frames sent at once: no spin (%d hits, %d misses, %d skips)", st.SpinHits, st.SpinMisses, st.SpinSkips)
				}
				t.Logf("adaptive: %d hits, %d misses, %d skips; spin now %v", st.SpinHits, st.SpinMisses, st.SpinSkips, rx.spinLength())
			})
			t.Run("one P", func(t *testing.T) {
				// With GOMAXPROCS=1 a goroutine woken by the network
				// poller (here a pipe's read; in rbcastd a client's
				// doorbell) runs while Recv spins: it sends the frame the
				// spin then finds. With runtime.Gosched between looks it
				// ran only once the spin had ended and Recv slept (or
				// after sysmon's look at the poller, 10 ms: the spin is
				// shorter), and the frame was found by the poller.
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: 5 * time.Millisecond, BlockTimeout: time.Millisecond})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				frames := make([]Frame, 4)
				// A yield that met contention (other processes held the
				// CPU past netyield.Contended: CI's other test binaries) ends
				// a spin early and backs off, by design; such tries say
				// nothing and are tried again, up to oneTries.
				spun, clear, contended := 0, 0, 0
				for try := uint64(0); clear < 10 && clear+contended < oneTries; try++ {
					pr, pw, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					sent := make(chan error, 1)
					go func() {
						var b [1]byte
						if _, err := pr.Read(b[:]); err != nil {
							sent <- err
							return
						}
						size := frameLen(try, tx.MTU())
						_, err := tx.Send([][]byte{buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, try, size)})
						sent <- err
					}()
					// The sender parks in the poller; the sleep also has
					// the scheduler look at the poller, so sysmon does not
					// during the spin.
					time.Sleep(time.Millisecond)
					if _, err := pw.Write([]byte{1}); err != nil {
						t.Fatal(err)
					}
					found := rx.spinFound
					rx.spinPace.PauseUntil(time.Time{})
					n, err := rx.Recv(time.Now().Add(10*time.Second), frames)
					if err != nil || n != 1 {
						t.Fatalf("Recv of frame %d = %d, %v", try, n, err)
					}
					if err := <-sent; err != nil {
						t.Fatal(err)
					}
					pr.Close()
					pw.Close()
					if got, err := checkFrame(frames[0].Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil || got != try {
						t.Fatalf("received frame %d (%v), want %d", got, err, try)
					}
					switch {
					case rx.spinPace.Pause() > 0:
						contended++
					case rx.spinFound != found:
						spun++
						clear++
					default:
						clear++
					}
				}
				// A garbage collection during a spin looks at the poller
				// when it restarts the world (with Gosched 0 or 1 of 5
				// found theirs so): most uncontended spins must.
				if clear < 3 {
					t.Skipf("the CPU was contended in %d of %d tries: too few clear tries to judge", contended, contended+clear)
				}
				if 2*spun <= clear {
					t.Errorf("with GOMAXPROCS=1 %d of %d uncontended spinning Recvs let the poller's goroutine send the frame they found; want most (%d contended tries not counted)", spun, clear, contended)
				}
				t.Logf("%d of %d uncontended spinning Recvs found their frame while spinning (%d contended)", spun, clear, contended)
			})
			t.Run("woken during a yield", func(t *testing.T) {
				// At one P a Wake from another goroutine of the process
				// (a Send that left its frame to the loop) comes during
				// the spin's Yield: the spin ends then, before it gives
				// the CPU to other processes (the loop's turn would wait
				// for them), and Recv returns for the Wake.
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: 50 * time.Millisecond, BlockTimeout: time.Millisecond})
				gaveWoken := 0
				defer func(g func(uint64) bool) { giveCPU = g }(giveCPU)
				giveCPU = func(m uint64) bool {
					if rx.woken.Load() {
						gaveWoken++
					}
					return netyield.GiveCPU(m)
				}
				for range 5 {
					rx.spinPace.PauseUntil(time.Time{})
					go rx.Wake() // runs at the spin's first Yield
					n, err := rx.Recv(time.Now().Add(10*time.Second), make([]Frame, 4))
					if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("Recv woken while spinning = %d, %v; want 0 and the Wake's deadline error", n, err)
					}
				}
				if gaveWoken > 0 {
					t.Errorf("the spin gave the CPU away %d times after a Wake during its Yield; want it to end first", gaveWoken)
				}
				// Nor does the waker's own poll, in the round of the Wake.
				mark := netyield.Mark()
				rx.Wake()
				if netyield.GiveCPU(mark) {
					t.Error("a poll that took its mark before a Wake gave the CPU away after it; want the loop's turn first")
				}
			})
			t.Run("CPU given by another poll", func(t *testing.T) {
				// At one P another poll of the process (a daemon's read
				// of a client) may give the CPU away during each of the
				// spin's Yields; the spin then gives it no more
				// (netyield.GiveCPU) and still ends after RxSpin, the
				// Yields' time counted: a frame sent 200 ms after Recv
				// began, long after a 2 ms spin, is found by the
				// netpoller, not by the spin.
				defer func(g func(uint64) bool) { giveCPU = g }(giveCPU)
				giveCPU = func(uint64) bool { return false }
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: 2 * time.Millisecond, BlockTimeout: time.Millisecond})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				sent := make(chan error, 1)
				go func() {
					time.Sleep(200 * time.Millisecond)
					size := frameLen(7, tx.MTU())
					_, err := tx.Send([][]byte{buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, 7, size)})
					sent <- err
				}()
				found := rx.spinFound
				rx.spinPace.PauseUntil(time.Time{})
				frames := make([]Frame, 4)
				n, err := rx.Recv(time.Now().Add(10*time.Second), frames)
				if err != nil || n != 1 {
					t.Fatalf("Recv = %d, %v", n, err)
				}
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
				if got, err := checkFrame(frames[0].Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil || got != 7 {
					t.Fatalf("received frame %d (%v), want 7", got, err)
				}
				if rx.spinFound != found {
					t.Errorf("a 2 ms spin that never yielded the CPU itself found a frame sent after 200 ms: it did not end")
				}
			})
			t.Run("poller once per spinPoller", func(t *testing.T) {
				// A spin lets the network poller run (netyield.Yield: at
				// one P an eventfd write, a park and epoll_pwait) at most
				// once per spinPoller, the looks between yielding with
				// runtime.Gosched; at the first look it runs. On a clock
				// of the test's own, each reading 1 µs after the last, a
				// 1 ms spin on an idle link makes 1001 looks (the last
				// finds 1 ms spent), two readings each: 2002 µs, with the
				// poller at the first look and every tenth after it.
				rx := openOn(t, topo.Hosts[2], Config{Version: v, RxSpin: time.Millisecond, BlockTimeout: time.Millisecond})
				defer func(g func(uint64) bool) { giveCPU = g }(giveCPU)
				polls := 0
				rx.spinPace.Yield = func() { polls++ }
				giveCPU = func(uint64) bool { return false }
				start := time.Now()
				clock := start
				rx.spinPace.Clock = func() time.Time { clock = clock.Add(time.Microsecond); return clock }
				if rx.spinRun(time.Time{}, rx.cfg.RxSpin) {
					t.Fatal("a spin on an idle link found a frame")
				}
				if elapsed := clock.Sub(start); elapsed != 2002*time.Microsecond {
					t.Fatalf("the spin ended after %v of the test's clock, want 2002 µs (1001 looks of 2 µs)", elapsed)
				}
				if polls != 101 {
					t.Errorf("1001 looks in 2002 µs let the poller run %d times; want 101, once per %v", polls, spinPoller)
				}
				// The next spin does not look at once if the last look
				// was within spinPoller, and does after that.
				polls = 0
				rx.spinRun(time.Time{}, time.Nanosecond)
				if polls != 0 {
					t.Errorf("a spin %v after the poller's last look let it run again", clock.Sub(rx.spinPace.Polled()))
				}
				clock = clock.Add(spinPoller)
				rx.spinRun(time.Time{}, time.Nanosecond)
				if polls != 1 {
					t.Errorf("a spin %v after the poller's last look let it run %d times, want once", spinPoller, polls)
				}
			})
			t.Run("idle", func(t *testing.T) {
				// A Recv that asked to wait twice RxSpin or longer and
				// ended at its deadline with nothing read has the next one
				// sleep at once: its frame, sent 1 ms after it started, is
				// found by the netpoller, not by a spin. A shorter wait
				// that ends at its deadline (a caller's near timer) does
				// not count, however late the timer fired: CI once saw a
				// 300 µs timer take over 2 ms on a loaded machine. Once
				// a Recv has read frames, the next spins again.
				rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: time.Millisecond, BlockTimeout: time.Millisecond})
				tx := openOn(t, topo.Hosts[0], Config{Version: v})
				frames := make([]Frame, 4)
				if n, err := rx.Recv(time.Now().Add(300*time.Microsecond), frames); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Recv on an idle link = %d, %v; want 0 and a deadline error", n, err)
				}
				if rx.rxIdle {
					t.Errorf("a 300 µs wait (under twice RxSpin, 2 ms) that ended at its deadline marked the link idle")
				}
				if n, err := rx.Recv(time.Now().Add(5*time.Millisecond), frames); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Recv on an idle link = %d, %v; want 0 and a deadline error", n, err)
				}
				if !rx.rxIdle {
					t.Errorf("a 5 ms wait that ended at its deadline did not mark the link idle")
				}
				found := rx.spinFound
				sent := make(chan error, 1)
				go func() {
					time.Sleep(time.Millisecond)
					size := frameLen(0, tx.MTU())
					_, err := tx.Send([][]byte{buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, 0, size)})
					sent <- err
				}()
				if n, err := rx.Recv(time.Now().Add(10*time.Second), frames); err != nil || n != 1 {
					t.Fatalf("Recv after a deadline = %d, %v; want the frame sent", n, err)
				}
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
				if rx.spinFound != found {
					t.Errorf("the Recv after one that ended at its deadline spun (and found its frame spinning)")
				}
				if rx.rxIdle {
					t.Errorf("a Recv that read a frame left the link idle: the next would not spin")
				}
			})
		})
	}
}

// oneTries bounds the tries of the GOMAXPROCS=1 subtests when other
// processes keep taking the CPU.
const oneTries = 50
