package capture

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
)

// BenchmarkInvariantsKeyed measures the online checker per frame, on
// streams of distinct Data frames as one sender sends them through a
// wrapped link's Send, filling an MTU of 1500 and of 9000 bytes: "none",
// frames without an auth section to a checker without keys; "mac" and
// "gcm", frames sealed by auth.Link (AES-GMAC, AES-GCM: every frame a
// new counter, so none is dropped as a replay) to a checker given the
// key (SetKeys), which verifies, and under "gcm" decrypts, a copy of
// each before checking it. One op is a round: a batch of 256 frames of
// each mode in turn, each batch made untimed and fed timed, so that the
// three share the machine's load; the metrics are each mode's ns/frame
// and MB/s (of payload) and the keyed modes' ratios to "none".
func BenchmarkInvariantsKeyed(b *testing.B) {
	key, err := auth.NewKey(bytes.Repeat([]byte{7}, auth.KeySize))
	if err != nil {
		b.Fatal(err)
	}
	modes := []string{"none", "mac", "gcm"}
	for _, mtu := range []int{1500, 9000} {
		b.Run(fmt.Sprintf("mtu%d", mtu), func(b *testing.B) {
			type lane struct {
				iv     *Invariants
				c      *Link
				src    *frameSource
				ns     time.Duration
				frames int
			}
			lanes := make([]*lane, len(modes))
			for i, mode := range modes {
				iv := NewInvariants(0, nil)
				if mode != "none" {
					if err := iv.SetKeys(key); err != nil {
						b.Fatal(err)
					}
				}
				c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, nil, Options{Node: "3", Invariants: iv})
				if err != nil {
					b.Fatal(err)
				}
				lanes[i] = &lane{iv: iv, c: c, src: newFrameSource(b, mtu, mode, key)}
			}
			one := make([][]byte, 1)
			for b.Loop() {
				for _, l := range lanes {
					batch := l.src.next(256)
					t0 := time.Now()
					for _, f := range batch {
						one[0] = f
						l.c.Send(one)
					}
					l.ns += time.Since(t0)
					l.frames += len(batch)
				}
			}
			perFrame := make([]float64, len(lanes))
			for i, l := range lanes {
				verified, dropped := l.iv.AuthStats()
				if modes[i] != "none" && (verified != uint64(l.frames) || len(dropped) != 0) {
					b.Fatalf("%s: %d of %d frames verified, dropped %v", modes[i], verified, l.frames, dropped)
				}
				if n := l.iv.Counts(); len(n) != 0 {
					b.Fatalf("%s: violations %v", modes[i], n)
				}
				perFrame[i] = float64(l.ns.Nanoseconds()) / float64(l.frames)
				b.ReportMetric(perFrame[i], modes[i]+"-ns/frame")
				b.ReportMetric(float64(l.src.payload)/perFrame[i]*1e3, modes[i]+"-MB/s")
			}
			b.ReportMetric(perFrame[1]/perFrame[0], "mac/none")
			b.ReportMetric(perFrame[2]/perFrame[0], "gcm/none")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// frameSource makes distinct Data frames of one sender filling an MTU,
// sealed by an auth.Link under mode "mac" or "gcm".
type frameSource struct {
	tb      testing.TB
	seal    *auth.Link // nil: mode "none"
	sink    *batchLink
	payload int
	data    []byte
	seq     uint32
	bufs    [][]byte
	plain   [][]byte
}

func newFrameSource(tb testing.TB, mtu int, mode string, key *auth.Key) *frameSource {
	s := &frameSource{tb: tb, sink: &batchLink{mtu: mtu}}
	empty, err := frame.Append(nil, &frame.Header{Group: 1, Sender: 3, Incarnation: 1}, &frame.Payload{T: frame.Data})
	if err != nil {
		tb.Fatal(err)
	}
	s.payload = mtu - len(empty)
	if mode != "none" {
		s.payload -= auth.Overhead
		if s.seal, err = auth.Wrap(s.sink, auth.Config{Group: 1, Key: key, Encrypt: mode == "gcm"}); err != nil {
			tb.Fatal(err)
		}
	}
	s.data = bytes.Repeat([]byte{0x5a}, s.payload)
	return s
}

// next returns n new frames, valid until the next call.
func (s *frameSource) next(n int) [][]byte {
	s.plain = s.plain[:0]
	for i := range n {
		if i == len(s.bufs) {
			s.bufs = append(s.bufs, nil)
		}
		b := frame.AppendEthernet(s.bufs[i][:0], frame.Broadcast, testSrc, frame.EtherType)
		b, err := frame.Append(b, &frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: s.seq}, &frame.Payload{T: frame.Data, Data: s.data})
		if err != nil {
			s.tb.Fatal(err)
		}
		s.bufs[i] = b
		s.seq++
		s.plain = append(s.plain, b)
	}
	if s.seal == nil {
		return s.plain
	}
	s.sink.out = s.sink.out[:0]
	if _, err := s.seal.Send(s.plain); err != nil {
		s.tb.Fatal(err)
	}
	return s.sink.out
}

// batchLink keeps copies of the frames sent to it.
type batchLink struct {
	mtu  int
	out  [][]byte
	bufs [][]byte
}

func (l *batchLink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		i := len(l.out)
		if i == len(l.bufs) {
			l.bufs = append(l.bufs, make([]byte, 0, l.mtu+64))
		}
		l.bufs[i] = append(l.bufs[i][:0], f...)
		l.out = append(l.out, l.bufs[i])
	}
	return len(frames), nil
}
func (l *batchLink) Recv(time.Time, []link.Frame) (int, error) { return 0, nil }
func (l *batchLink) MTU() int                                  { return l.mtu }
func (l *batchLink) HardwareAddr() net.HardwareAddr            { return net.HardwareAddr(testSrc[:]) }
func (l *batchLink) Stats() (link.Stats, error)                { return link.Stats{}, nil }
func (l *batchLink) Close() error                              { return nil }
