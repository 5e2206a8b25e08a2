package capture

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/rbcast/rbcast/frame"
)

// FuzzDecode feeds arbitrary bytes to the gopacket layer, directly and
// behind an Ethernet header: it must never panic, and a frame it accepts
// must describe itself consistently.
func FuzzDecode(f *testing.F) {
	for _, g := range goldenFrames(f) {
		f.Add(g.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Rbcast
		if err := r.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err == nil {
			if int(r.Length) != len(r.Contents) || len(r.Acks) != r.View.AckCount() || r.Version != frame.Version {
				t.Fatalf("inconsistent layer: length %d, %d content bytes, %d acks", r.Length, len(r.Contents), len(r.Acks))
			}
			_ = r.Summary()
			_ = r.NextLayerType()
		}
		eth := append(frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType), data...)
		p := gopacket.NewPacket(eth, layers.LayerTypeEthernet, gopacket.Default)
		if l, ok := p.Layer(LayerTypeRbcast).(*Rbcast); ok {
			_ = l.Summary()
		}
	})
}
