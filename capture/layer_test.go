package capture

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/rbcast/rbcast/frame"
)

type golden struct {
	name string
	b    []byte // the rbcast frame, no Ethernet header
}

// goldenFrames reads frame/testdata/golden: one vector per frame type.
func goldenFrames(tb testing.TB) []golden {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "frame", "testdata", "golden", "*.hex"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no golden vectors in ../frame/testdata/golden: %v", err)
	}
	slices.Sort(paths)
	var out []golden
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
		if err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		out = append(out, golden{strings.TrimSuffix(filepath.Base(p), ".hex"), b})
	}
	return out
}

var (
	testSrc = [6]byte{0x02, 0, 0, 0, 0, 0x03}
)

// ethernet wraps an rbcast frame for the broadcast address and pads it to
// the 60-byte Ethernet minimum, as a NIC would.
func ethernet(b []byte) []byte {
	f := frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType)
	f = append(f, b...)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}

func checkLayer(t *testing.T, r *Rbcast, b []byte) {
	t.Helper()
	v, err := frame.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Contents, v) || r.Type != v.Type() || r.Seq != v.Seq() || r.Sender != v.Sender() ||
		r.Group != v.Group() || r.Incarnation != v.Incarnation() || r.Flags != v.Flags() || int(r.Length) != len(b) ||
		r.CRC != v.CRC() || r.AckBase != v.AckBase() || len(r.Acks) != v.AckCount() || !bytes.Equal(r.Body, v.Body()) ||
		!bytes.Equal(r.Payload, v.Payload()) || r.Version != frame.Version {
		t.Fatalf("layer %+v differs from frame.Parse", r)
	}
	for i, a := range r.Acks {
		if a != v.Ack(i) {
			t.Fatalf("ack %d = %d, want %d", i, a, v.Ack(i))
		}
	}
	if alg, tag, ok := v.Auth(); ok != (r.AuthTag != nil) || alg != r.AuthAlgorithm || !bytes.Equal(tag, r.AuthTag) {
		t.Fatalf("auth %d %x, want %d %x", r.AuthAlgorithm, r.AuthTag, alg, tag)
	}
	if s := r.Summary(); !strings.HasPrefix(s, v.Type().String()+" from ") || !strings.Contains(s, fmt.Sprintf("seq %d group 48879", v.Seq())) {
		t.Fatalf("summary %q", s)
	}
}

func TestLayerGolden(t *testing.T) {
	for _, g := range goldenFrames(t) {
		t.Run(g.name, func(t *testing.T) {
			p := gopacket.NewPacket(ethernet(g.b), layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("decode failed: %v", el.Error())
			}
			l, ok := p.Layer(LayerTypeRbcast).(*Rbcast)
			if !ok {
				t.Fatalf("no rbcast layer in %v", p)
			}
			checkLayer(t, l, g.b)
			if len(l.Payload) > 0 {
				app := p.ApplicationLayer()
				if app == nil || !bytes.Equal(app.Payload(), l.Payload) {
					t.Fatalf("application layer %v, want payload %q", app, l.Payload)
				}
			}
			t.Log(l.Summary())
		})
	}
}

func TestLayerBodySummaries(t *testing.T) {
	want := map[string]string{
		"nack":         "target 1 ranges 5-7,9-9,4294967294-1",
		"start":        "members 0=02:00:00:00:00:01/inc 1 1=02:00:00:00:00:02/inc 9",
		"data_bundle":  "3 message(s), 6 bytes",
		"welcome":      "nonce 0x0102030405060708 assigned 4 members 8 config 0xdeadbeefcafef00d",
		"seq_election": "candidate",
	}
	for _, g := range goldenFrames(t) {
		w, ok := want[g.name]
		if !ok {
			continue
		}
		var r Rbcast
		if err := r.DecodeFromBytes(g.b, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if s := r.BodySummary(); !strings.Contains(s, w) {
			t.Errorf("%s: body summary %q, want it to contain %q", g.name, s, w)
		}
	}
}

// TestDecodingLayerParser decodes every golden vector, plain and behind an
// 802.1Q tag, with preallocated layers, and checks that the parser
// allocates nothing once warmed up.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth     layers.Ethernet
		dot1q   layers.Dot1Q
		rb      Rbcast
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &dot1q, &rb, &payload)
	decoded := make([]gopacket.LayerType, 0, 4)
	for _, g := range goldenFrames(t) {
		plain := ethernet(g.b)
		tagged := append(append(append([]byte{}, plain[:12]...), 0x81, 0x00, 0x00, 0x05), plain[12:]...)
		for _, data := range [][]byte{plain, tagged} {
			if err := parser.DecodeLayers(data, &decoded); err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
			if !slices.Contains(decoded, LayerTypeRbcast) {
				t.Fatalf("%s: decoded %v, no rbcast layer", g.name, decoded)
			}
			checkLayer(t, &rb, g.b)
		}
	}
	data := ethernet(goldenFrames(t)[0].b)
	allocs := testing.AllocsPerRun(100, func() { _ = parser.DecodeLayers(data, &decoded) })
	if allocs != 0 {
		t.Errorf("DecodeLayers allocates %.1f times per frame, want 0", allocs)
	}
}

// TestLayerCorrupt checks that a frame frame.Parse rejects becomes a
// gopacket DecodeFailure carrying frame's error, kind and offset.
func TestLayerCorrupt(t *testing.T) {
	g := goldenFrames(t)
	var data []byte
	for _, x := range g {
		if x.name == "data" {
			data = x.b
		}
	}
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		kind   error
		text   string
	}{
		{"crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, frame.ErrChecksum, "CRC32C mismatch at offset"},
		{"version", func(b []byte) []byte { b[0] = 9; return b }, frame.ErrVersion, fmt.Sprintf("version 9, this build speaks %d", frame.Version)},
		{"short", func(b []byte) []byte { return b[:20] }, frame.ErrShort, "20 bytes, need at least 32"},
		{"type", func(b []byte) []byte { b[1] = 0x7f; return b }, frame.ErrType, "type 0x7f"},
		{"length", func(b []byte) []byte { b[4], b[5] = 0xff, 0xff; return b }, frame.ErrLength, "length field 65535"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mutate(bytes.Clone(data))
			// Unpadded, so that "short" stays short.
			eth := append(frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType), b...)
			p := gopacket.NewPacket(eth, layers.LayerTypeEthernet, gopacket.Default)
			el := p.ErrorLayer()
			if el == nil {
				t.Fatalf("no decode failure for %s", c.name)
			}
			if _, ok := el.(*gopacket.DecodeFailure); !ok {
				t.Fatalf("error layer is %T, want *gopacket.DecodeFailure", el)
			}
			err := el.Error()
			var de *frame.DecodeError
			if !errors.Is(err, c.kind) || !errors.As(err, &de) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %q (%T), want kind %v containing %q", err, err, c.kind, c.text)
			}
			if p.Layer(LayerTypeRbcast) != nil {
				t.Fatal("a corrupt frame still produced an rbcast layer")
			}
		})
	}
}
