package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
)

// BenchmarkLatency is a ping-pong of one small frame h0 → h1 → h0 through
// the bridge: h1 echoes each frame it receives straight from its RX ring
// slot into its TX ring. The reported µs/rtt is the round trip; with V3 each
// leg waits for a block to retire (Config.BlockTimeout), with V2 for the
// wake-up of one frame.
//
//	go test -run '^$' -bench Latency -benchtime 2000x ./link/ring
func BenchmarkLatency(b *testing.B) {
	topo := up(b, "l", 2, 1500)
	for _, v := range versions {
		b.Run(v.String(), func(b *testing.B) {
			ping := openOn(b, topo.Hosts[0], Config{Version: v})
			echo := openOn(b, topo.Hosts[1], Config{Version: v})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				frames := make([]Frame, 16)
				out := make([][]byte, 16)
				for {
					n, err := echo.Recv(time.Now().Add(50*time.Millisecond), frames)
					select {
					case <-stop:
						return
					default:
					}
					if errors.Is(err, os.ErrDeadlineExceeded) {
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
					for i := range n {
						out[i] = frames[i].Data
					}
					if _, err := echo.Send(out[:n]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			f := buildFrame(make([]byte, 64), ping.HardwareAddr(), link.EtherTypeRbcast, 0, 64)
			frames := make([]Frame, 16)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				binary.BigEndian.PutUint64(f[14:], uint64(i))
				if _, err := ping.Send([][]byte{f}); err != nil {
					b.Fatal(err)
				}
				for got := false; !got; {
					n, err := ping.Recv(time.Now().Add(time.Second), frames)
					if err != nil {
						b.Fatalf("ping %d: %v", i, err)
					}
					for _, r := range frames[:n] {
						got = got || binary.BigEndian.Uint64(r.Data[14:]) == uint64(i)
					}
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/rtt")
			b.StopTimer()
			close(stop)
			wg.Wait()
		})
	}
}

// BenchmarkRecvRate sends full-MTU frames from h0 to the broadcast address
// as fast as Send goes, in batches of 64, and counts what each of the other
// hosts receives. It reports per receiver the delivered frames/s and MB/s
// and the share lost (dropped by the kernel because the ring was full),
// and the process's CPU time (user and system, getrusage) per frame sent:
// everything, sender and receivers, is this process and shares the
// machine's cores, and the kernel's delivery into the receivers' rings
// runs inside the sender's sendto, so on a loaded machine this is the
// figure to compare.
//
//	go test -run '^$' -bench RecvRate -benchtime 200000x ./link/ring
func BenchmarkRecvRate(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		for _, hosts := range []int{2, 4, 8} {
			b.Run(fmt.Sprintf("mtu%d/N%d", mtu, hosts), func(b *testing.B) {
				topo := up(b, fmt.Sprintf("t%d%d", mtu/1000, hosts), hosts, mtu)
				for _, v := range versions {
					b.Run(v.String(), func(b *testing.B) {
						benchRecvRate(b, topo.Hosts[0], topo.Hosts[1:], Config{Version: v})
					})
				}
			})
		}
	}
}

func benchRecvRate(b *testing.B, from hostT, to []hostT, cfg Config) {
	tx := openOn(b, from, cfg)
	size := link.EthernetHeaderLen + tx.MTU()
	type result struct {
		received, bytes uint64
		last            time.Time
		err             error
	}
	results := make([]result, len(to))
	rxs := make([]*Link, len(to))
	for i, h := range to {
		rxs[i] = openOn(b, h, cfg)
	}
	count := uint64(b.N)
	var wg sync.WaitGroup
	for i, rx := range rxs {
		r := &results[i]
		wg.Go(func() {
			frames := make([]Frame, 256)
			for r.received < count {
				n, err := rx.Recv(time.Now().Add(300*time.Millisecond), frames)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
				if err != nil {
					r.err = err
					return
				}
				r.last = time.Now()
				r.received += uint64(n)
				for _, f := range frames[:n] {
					r.bytes += uint64(len(f.Data))
				}
			}
		})
	}
	const batch = 64
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = buildFrame(make([]byte, size), tx.HardwareAddr(), link.EtherTypeRbcast, 0, size)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		for i := range n {
			binary.BigEndian.PutUint64(bufs[i][14:], uint64(sent+i))
		}
		if _, err := tx.Send(bufs[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	sendTime := time.Since(start)
	wg.Wait()
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	var frames, bytes uint64
	var elapsed time.Duration
	for i, r := range results {
		if r.err != nil {
			b.Fatalf("receiver %d: %v", i, r.err)
		}
		frames += r.received
		bytes += r.bytes
		elapsed = max(elapsed, r.last.Sub(start))
	}
	elapsed = max(elapsed, sendTime)
	n := float64(len(results))
	b.ReportMetric(float64(frames)/n/elapsed.Seconds(), "frames/s/rcv")
	b.ReportMetric(float64(bytes)/n/elapsed.Seconds()/1e6, "MB/s/rcv")
	b.ReportMetric(100*(1-float64(frames)/n/float64(count)), "%lost")
	b.ReportMetric(float64(b.N)/sendTime.Seconds(), "sent/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/frame")
	st, _ := tx.Stats()
	b.ReportMetric(float64(st.SendRetries)/float64(b.N), "retries/frame")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWake measures waking a goroutine that sleeps in the
// netpoller, medians: ns/wake is how long the waking call takes, ns/return
// until the woken goroutine runs again; at GOMAXPROCS 1 (a process pinned
// to one CPU, as BenchmarkLiuTables' parent) and 2. Each round waits
// until the sleeper has parked. The candidates, side by side:
//
//   - ring: Link.Wake of a Recv (RxSpin off, nothing arriving, a deadline a
//     minute away): a read deadline in the past on the ring's epoll
//     instance;
//
//   - eventfd: an 8-byte write to an eventfd held in an epoll instance
//     that the netpoller watches, as the ring's socket is (the sleeper
//     drains it);
//
//   - chan: a non-blocking send on a buffered channel a goroutine waits
//     on (reliable's kicker).
//
//     go test -run '^$' -bench Wake -benchtime 2000x ./link/ring
func BenchmarkWake(b *testing.B) {
	topo := up(b, "wk", 1, 1500)
	for _, procs := range []int{1, 2} {
		b.Run(fmt.Sprintf("ring/procs%d", procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			l := openOn(b, topo.Hosts[0], Config{RxSpin: -1})
			frames := make([]Frame, 4)
			benchWake(b, l.sleeping.Load, l.Wake, func() bool {
				_, err := l.Recv(time.Now().Add(time.Minute), frames)
				return errors.Is(err, os.ErrDeadlineExceeded)
			})
			l.Close()
		})
		b.Run(fmt.Sprintf("eventfd/procs%d", procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
			if err != nil {
				b.Fatal(err)
			}
			if err := unix.SetNonblock(ep, true); err != nil {
				b.Fatal(err)
			}
			efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(efd)
			if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd)}); err != nil {
				b.Fatal(err)
			}
			f := os.NewFile(uintptr(ep), "epoll")
			defer f.Close()
			raw, err := f.SyscallConn()
			if err != nil {
				b.Fatal(err)
			}
			var sleeping, woken atomic.Bool
			one, buf := []byte{1, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 8)
			benchWake(b, sleeping.Load, func() {
				woken.Store(true)
				unix.Write(efd, one)
			}, func() bool {
				sleeping.Store(true)
				err := raw.Read(func(uintptr) bool { return woken.Load() })
				sleeping.Store(false)
				woken.Store(false)
				unix.Read(efd, buf)
				return err == nil
			})
		})
		b.Run(fmt.Sprintf("chan/procs%d", procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			ch := make(chan struct{}, 1)
			var sleeping atomic.Bool
			benchWake(b, sleeping.Load, func() {
				select {
				case ch <- struct{}{}:
				default:
				}
			}, func() bool {
				sleeping.Store(true)
				<-ch
				sleeping.Store(false)
				return true
			})
		})
	}
}

// benchWake is a round of BenchmarkWake b.N times: sleep runs in a
// goroutine of its own until it reports false (or b.N wakes), asleep
// says it is about to park, wake ends its sleep.
func benchWake(b *testing.B, asleep func() bool, wake func(), sleep func() bool) {
	var rounds atomic.Uint64
	var returned atomic.Int64
	done := make(chan bool, 1)
	n := uint64(b.N)
	go func() {
		for {
			ok := sleep()
			returned.Store(time.Now().UnixNano())
			if rounds.Add(1) == n || !ok {
				done <- ok
				return
			}
		}
	}()
	calls := make([]time.Duration, 0, b.N)
	rets := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		for rounds.Load() != uint64(i) || !asleep() {
			runtime.Gosched()
		}
		time.Sleep(20 * time.Microsecond) // parked, not about to be
		t0 := time.Now()
		wake()
		t1 := time.Now()
		for rounds.Load() != uint64(i+1) {
			runtime.Gosched()
		}
		calls = append(calls, t1.Sub(t0))
		rets = append(rets, time.Duration(returned.Load()-t0.UnixNano()))
	}
	b.StopTimer()
	if !<-done {
		b.Fatal("the sleeper did not return as woken")
	}
	slices.Sort(calls)
	slices.Sort(rets)
	b.ReportMetric(float64(calls[len(calls)/2].Nanoseconds()), "ns/wake")
	b.ReportMetric(float64(rets[len(rets)/2].Nanoseconds()), "ns/return")
}
