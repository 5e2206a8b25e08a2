package capture

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/rbcast/rbcast/frame"
)

// FuzzDecode feeds arbitrary bytes to the gopacket layer, directly and
// behind an Ethernet header: it must never panic, it must accept what
// frame.Parse accepts and refuse the rest with Parse's error, a frame it
// accepts must describe itself consistently (its fields those of the
// frame's header), and a layer reused for the next frame (as a
// DecodingLayerParser does) keeps nothing of a refused one's.
func FuzzDecode(f *testing.F) {
	for _, g := range goldenFrames(f) {
		f.Add(g.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Rbcast
		v, perr := frame.Parse(data)
		err := r.DecodeFromBytes(data, gopacket.NilDecodeFeedback)
		if (err == nil) != (perr == nil) || err != nil && err.Error() != perr.Error() {
			t.Fatalf("layer: %v, frame.Parse: %v", err, perr)
		}
		if err == nil {
			if int(r.Length) != len(r.Contents) || len(r.Acks) != r.View.AckCount() || r.Version != frame.Version {
				t.Fatalf("inconsistent layer: length %d, %d content bytes, %d acks", r.Length, len(r.Contents), len(r.Acks))
			}
			h := v.Header()
			if r.Type != v.Type() || r.Sender != h.Sender || r.Group != h.Group || r.Seq != h.Seq || r.AckBase != h.AckBase ||
				r.Incarnation != h.Incarnation || r.ViewID != h.ViewID || !bytes.Equal(r.Contents, v) || !bytes.Equal(r.Payload, v.Payload()) {
				t.Fatalf("layer %+v, frame header %+v", r, h)
			}
			_ = r.Summary()
			_ = r.NextLayerType()
			// The same layer, handed bytes that do not parse: reset.
			if r.DecodeFromBytes(data[:len(data)/2], gopacket.NilDecodeFeedback) != nil && (r.View != nil || len(r.Acks) != 0 || r.Payload != nil) {
				t.Fatalf("a refused frame left the layer holding %+v", r)
			}
		}
		eth := append(frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType), data...)
		p := gopacket.NewPacket(eth, layers.LayerTypeEthernet, gopacket.Default)
		if l, ok := p.Layer(LayerTypeRbcast).(*Rbcast); ok {
			_ = l.Summary()
		}
	})
}
