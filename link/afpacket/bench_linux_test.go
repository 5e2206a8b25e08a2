//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkSendRecv measures the frame rate from one host to another over
// a veth pair and a bridge: h0 sends b.N frames in batches of 64, h1
// receives them in batches. MB/s is from the frames sent (b.SetBytes);
// frames/s and loss% are from the frames received. The sender is not paced,
// so when the receiver falls behind frames are lost: rxbuf-loss% is the
// part the receiving socket counted (PACKET_STATISTICS tp_drops, buffer
// full), the rest was dropped on the segment (the per-CPU backlog holds
// 1000 frames). The link itself drops nothing.
//
//	go test -run '^$' -bench SendRecv -benchtime 200000x ./link/afpacket/
func BenchmarkSendRecv(b *testing.B) {
	topo := netnstest.Up(b, netns.Options{Hosts: 2, MTU: 9000, Prefix: "rbpbn"})
	h0 := open(b, topo.Hosts[0], Config{})
	h1 := open(b, topo.Hosts[1], Config{RecvBuffer: 64 << 20})
	for _, size := range []int{60, 1514, 9014} {
		b.Run(fmt.Sprintf("frame=%d", size), func(b *testing.B) {
			benchSendRecv(b, h0, h1, size)
		})
	}
}

func benchSendRecv(b *testing.B, h0, h1 *Link, size int) {
	const batch = 64
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = makeFrame(broadcast, h0.HardwareAddr(), link.EtherTypeRbcast, uint32(i), size)
	}
	drain(h1)
	before, err := h1.Stats()
	if err != nil {
		b.Fatal(err)
	}
	sent := make(chan struct{})
	received := make(chan int, 1)
	go func() {
		// The deadline moves only when it passes, so the socket's deadline
		// is not re-armed on every Recv; once the sender is done, a quiet
		// 200 ms means the rest was lost.
		slots := make([]link.Frame, batch)
		got := 0
		deadline := time.Now().Add(200 * time.Millisecond)
		for got < b.N {
			n, err := h1.Recv(deadline, slots)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				select {
				case <-sent:
					received <- got
					return
				default:
				}
				deadline = time.Now().Add(200 * time.Millisecond)
				continue
			}
			if err != nil {
				b.Error(err)
				break
			}
			got += n
		}
		received <- got
	}()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for left := b.N; left > 0; {
		n := min(left, batch)
		if _, err := h0.Send(frames[:n]); err != nil {
			b.Fatal(err)
		}
		left -= n
	}
	close(sent)
	got := <-received
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(got)/elapsed.Seconds(), "frames/s")
	b.ReportMetric(100*float64(b.N-got)/float64(b.N), "loss%")
	if after, err := h1.Stats(); err == nil {
		// The part of the loss the receiving socket saw: its buffer was full.
		b.ReportMetric(100*float64(after.KernelDrops-before.KernelDrops)/float64(b.N), "rxbuf-loss%")
	}
}

// drain empties h1 of frames left over from an earlier run.
func drain(l *Link) {
	slots := make([]link.Frame, 64)
	for {
		if _, err := l.Recv(time.Now().Add(20*time.Millisecond), slots); err != nil {
			return
		}
	}
}
