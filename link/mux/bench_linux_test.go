package mux_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/mux"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkRecv measures what the Mux costs a receiver: one host sends
// full-size frames of group 1 as fast as it can, the other receives them
// on a ring link directly, or through the view of group 1 of a Mux that
// also has a view of group 2. It reports the receiving thread's CPU time
// per frame (rx-ns/frame: the copy into the view's queue shows here) and
// the frames received per second.
//
//	go test -run '^$' -bench Recv -benchtime 200000x ./link/mux
func BenchmarkRecv(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		b.Run(fmt.Sprintf("mtu%d", mtu), func(b *testing.B) {
			topo := netnstest.Up(b, netns.Options{Hosts: 2, MTU: mtu})
			for _, via := range []string{"direct", "mux"} {
				b.Run(via, func(b *testing.B) { benchRecv(b, topo, via) })
			}
		})
	}
}

func openRing(b *testing.B, h *netns.Host) *ring.Link {
	var l *ring.Link
	if err := h.Do(func() (err error) {
		l, err = ring.Open(h.Iface, ring.Config{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return l
}

func benchRecv(b *testing.B, topo *netns.Topology, via string) {
	tx := openRing(b, topo.Hosts[0])
	defer tx.Close()
	var rx link.Link = openRing(b, topo.Hosts[1])
	if via == "mux" {
		m, err := mux.New(rx, mux.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		if rx, err = m.Open(1); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Open(2); err != nil {
			b.Fatal(err)
		}
	} else {
		defer rx.Close()
	}
	size := link.EthernetHeaderLen + tx.MTU()
	type result struct {
		received uint64
		cpu      time.Duration
		last     time.Time
		err      error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		frames := make([]link.Frame, 64)
		t0 := threadCPU()
		for r.received < uint64(b.N) {
			n, err := rx.Recv(time.Now().Add(300*time.Millisecond), frames)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				r.err = err
				break
			}
			r.received += uint64(n)
			r.last = time.Now()
		}
		r.cpu = threadCPU() - t0
		done <- r
	}()
	time.Sleep(50 * time.Millisecond)
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = groupFrame(tx.HardwareAddr(), 1, 0, size)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; {
		n := min(len(bufs), b.N-sent)
		for i := range n {
			binary.BigEndian.PutUint32(bufs[i][link.GroupOffset+4:], uint32(sent+i))
		}
		if _, err := tx.Send(bufs[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	r := <-done
	b.StopTimer()
	if r.err != nil {
		b.Fatal(r.err)
	}
	if r.received > 0 {
		b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(r.received), "rx-ns/frame")
		b.ReportMetric(float64(r.received)/r.last.Sub(start).Seconds(), "frames/s")
	}
	b.ReportMetric(100*(1-float64(r.received)/float64(b.N)), "%lost")
}

// threadCPU is the calling thread's CPU time (user and system).
func threadCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
