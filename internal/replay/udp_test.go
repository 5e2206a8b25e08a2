package replay

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// carried wraps an Ethernet frame in an IP/UDP datagram between the
// ports, under an outer Ethernet header (raw: IP only).
func carried(t testing.TB, frame []byte, v6, raw bool, srcPort, dstPort uint16) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	u := &layers.UDP{SrcPort: layers.UDPPort(srcPort), DstPort: layers.UDPPort(dstPort)}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x0a, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0x01, 0, 0x5e, 0x4d, 0, 1}}
	if v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 2, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("fd77::1"), DstIP: net.ParseIP("ff05::77:1")}
		u.SetNetworkLayerForChecksum(ip)
		eth.EthernetType = layers.EthernetTypeIPv6
		ls = []gopacket.SerializableLayer{ip, u, gopacket.Payload(frame)}
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 2, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(10, 77, 0, 1), DstIP: net.IPv4(239, 77, 0, 1)}
		u.SetNetworkLayerForChecksum(ip)
		eth.EthernetType = layers.EthernetTypeIPv4
		ls = []gopacket.SerializableLayer{ip, u, gopacket.Payload(frame)}
	}
	if !raw {
		ls = append([]gopacket.SerializableLayer{eth}, ls...)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// A tcpdump capture of link/udp's carriage (Ethernet, or raw IP as on a
// tunnel, IPv4 and IPv6) reads as the frames it carried: the same bytes,
// the datagrams' addresses, no violations; datagrams of other ports, other
// traffic and IP fragments are named as not ours.
func TestUDPCarriage(t *testing.T) {
	_, c := goodCapture(t)
	txs := Frames(c, false)
	for _, tc := range []struct {
		name string
		lt   layers.LinkType
		v6   bool
	}{{"ethernet-ipv4", layers.LinkTypeEthernet, false}, {"raw-ipv6", layers.LinkTypeRaw, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := pcapgo.NewWriter(&buf)
			if err := w.WriteFileHeader(65535, tc.lt); err != nil {
				t.Fatal(err)
			}
			raw := tc.lt != layers.LinkTypeEthernet
			write := func(data []byte, r *Record) {
				if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(data), Length: len(data)}, data); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range txs {
				write(carried(t, r.Data, tc.v6, raw, 40000, 7000), r)
				if i == 3 {
					write(carried(t, []byte("someone else's datagram"), tc.v6, raw, 53, 54), r)
				}
			}
			frag := carried(t, txs[0].Data, false, raw, 40000, 7000)
			off := 0
			if !raw {
				off = 14
			}
			frag[off+6] |= 0x20 // more fragments
			write(frag, txs[0])
			pc, err := Parse("udp.pcap", buf.Bytes(), ReadOptions{UDP: true, UDPPorts: []uint16{7000}})
			if err != nil {
				t.Fatal(err)
			}
			var bad []*Record
			var good []Record
			for i := range pc.Records {
				if r := &pc.Records[i]; r.Err != nil {
					bad = append(bad, r)
				} else {
					good = append(good, *r)
				}
			}
			if len(good) != len(txs) || len(bad) != 2 {
				t.Fatalf("%d frames decoded and %d not, want %d and 2", len(good), len(bad), len(txs))
			}
			if !strings.Contains(bad[0].Err.Error(), "ports 53 -> 54") {
				t.Errorf("another port's datagram: %v", bad[0].Err)
			}
			if !errors.Is(bad[1].Err, errNotCarriage) || !strings.Contains(bad[1].Err.Error(), "IPv4 fragment") {
				t.Errorf("a fragment: %v", bad[1].Err)
			}
			for i := range good {
				if !bytes.Equal(good[i].Data, txs[i].Data) {
					t.Fatalf("frame %d: the carried frame differs from the one sent", i)
				}
				if good[i].UDPDst.Port() != 7000 || good[i].UDPSrc.Port() != 40000 {
					t.Fatalf("frame %d: datagram %s > %s", i, good[i].UDPSrc, good[i].UDPDst)
				}
			}
			if vs := Check(pc, CheckOptions{}); len(vs) != 0 {
				t.Fatalf("%d violations, first %v", len(vs), vs[0])
			}
			var tl bytes.Buffer
			WriteTimeline(&tl, pc)
			if !strings.Contains(tl.String(), "[udp 10.77.0.1:40000 > 239.77.0.1:7000]") && !strings.Contains(tl.String(), "[udp [fd77::1]:40000 > [ff05::77:1]:7000]") {
				t.Errorf("the timeline does not name the datagrams:\n%s", firstLines(tl.String(), 4))
			}
			// Without the option the same file is not Ethernet frames of ours.
			np, err := Parse("udp.pcap", buf.Bytes(), ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if np.Records[0].Err == nil {
				t.Error("read without UDP, a datagram decoded as a frame")
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
