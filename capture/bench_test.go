package capture

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/rbcast/rbcast/link"
)

// BenchmarkSend measures Send through a capture decorator writing to
// io.Discard: the node's copy into the queue plus, on another goroutine,
// pcapgo's encoding. allocs/op counts both goroutines; the node's side
// alone allocates nothing (TestNodePathAllocs).
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{64, 1400} {
		b.Run(map[int]string{64: "64B", 1400: "1400B"}[size], func(b *testing.B) {
			w, err := NewWriter(io.Discard, WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{})
			if err != nil {
				b.Fatal(err)
			}
			batch := [][]byte{testFrame(b, 1, size)}
			b.SetBytes(int64(len(batch[0])))
			b.ReportAllocs()
			for b.Loop() {
				c.Send(batch)
			}
			w.Flush()
			st := w.Stats()
			// Sending as fast as the loop can outruns the writer goroutine
			// on purpose: what it does write per second is its ceiling.
			b.ReportMetric(float64(st.Dropped)/float64(st.Dropped+st.Frames), "dropped/frame")
			b.ReportMetric(float64(st.Frames)/b.Elapsed().Seconds(), "written/s")
			w.Close()
		})
	}
}

// BenchmarkRecorder measures Recv through a decorator feeding only a
// flight recorder (no goroutine involved).
func BenchmarkRecorder(b *testing.B) {
	r, err := NewRecorder(0)
	if err != nil {
		b.Fatal(err)
	}
	l := &rxLink{memLink: memLink{mac: net.HardwareAddr(testSrc[:])}}
	f := testFrame(b, 1, 1400)
	l.rx = []link.Frame{{Data: f, Time: time.Unix(1, 0)}}
	c, err := Wrap(l, nil, Options{Recorder: r})
	if err != nil {
		b.Fatal(err)
	}
	frames := make([]link.Frame, 1)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		c.Recv(time.Time{}, frames)
	}
}

// BenchmarkDecodingLayerParser decodes a Data frame with gopacket.
func BenchmarkDecodingLayerParser(b *testing.B) {
	var (
		eth     layers.Ethernet
		rb      Rbcast
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &rb, &payload)
	decoded := make([]gopacket.LayerType, 0, 4)
	data := testFrame(b, 1, 1400)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parser.DecodeLayers(data, &decoded); err != nil {
			b.Fatal(err)
		}
	}
}
