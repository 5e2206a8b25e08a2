package capture

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/frame"
)

// writeUDPCapture writes, as tcpdump would on a member's interface, every
// golden frame carried by link/udp (a whole Ethernet frame per datagram,
// IPv4 multicast to port 45210, one Wireshark has no dissector for), then a hello, then a datagram on another
// port that is not ours.
func writeUDPCapture(t *testing.T) (string, []golden) {
	t.Helper()
	gs := goldenFrames(t)
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(payload []byte, dport uint16) {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x0a, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0x01, 0, 0x5e, 0x4d, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 2, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(10, 77, 0, 1), DstIP: net.IPv4(239, 77, 0, 1)}
		u := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(ip)
		sb := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, u, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		ts = ts.Add(time.Millisecond)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(sb.Bytes()), Length: len(sb.Bytes())}, sb.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gs {
		write(ethernet(g.b), 45210)
	}
	// A hello asking, naming 10.77.0.2:7000 heard from 1.5 s ago.
	hello := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, testSrc[:]...), 0x88, 0xb6,
		1, 1, 0, 1, 4, 10, 77, 0, 2, 0x1b, 0x58, 0, 0, 0x05, 0xdc)
	write(hello, 45210)
	write([]byte("an unrelated datagram of 40 bytes, no frame"), 45211)
	path := filepath.Join(t.TempDir(), "udp.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, gs
}

// TestDissectorUDP decodes link/udp's carriage: the heuristic finds our
// frames in UDP datagrams on any port, the UDP port preference names the
// port outright, every field is the one frame's decoder gives, the hello
// is decoded, and an unrelated datagram is left alone.
func TestDissectorUDP(t *testing.T) {
	tshark(t)
	path, gs := writeUDPCapture(t)
	fields := append([]string{"rbcast_hello.kind", "rbcast_hello.addr", "rbcast_hello.port", "rbcast_hello.age", "rbcast_udp"}, udpFields...)
	for _, prefs := range [][]string{nil, {"-o", "rbcast.udp_heuristic:FALSE", "-o", "rbcast.udp_port:45210"}} {
		rows := runTsharkWith(t, path, fields, prefs)
		if len(rows) != len(gs)+2 {
			t.Fatalf("prefs %v: tshark decoded %d packets, wrote %d", prefs, len(rows), len(gs)+2)
		}
		for i, g := range gs {
			v, err := frame.Parse(g.b)
			if err != nil {
				t.Fatal(err)
			}
			want := expectFields(v)
			for _, f := range udpFields {
				if rows[i][f] != want[f] {
					t.Errorf("prefs %v: %s: %s = %q, want %q", prefs, g.name, f, rows[i][f], want[f])
				}
			}
		}
		h := rows[len(gs)]
		if h["rbcast_hello.kind"] != "1" || h["rbcast_hello.addr"] != "10.77.0.2" || h["rbcast_hello.port"] != "7000" || h["rbcast_hello.age"] != "1500" {
			t.Errorf("prefs %v: the hello decoded as %v", prefs, h)
		}
		if last := rows[len(gs)+1]; last["rbcast_udp"] != "" || last["rbcast.type"] != "" {
			t.Errorf("prefs %v: an unrelated datagram was taken for ours: %v", prefs, last)
		}
	}
	// With the heuristic off and no port, the datagrams are UDP only.
	rows := runTsharkWith(t, path, []string{"rbcast.type"}, []string{"-o", "rbcast.udp_heuristic:FALSE"})
	for i, r := range rows {
		if r["rbcast.type"] != "" {
			t.Fatalf("heuristic off, no port: packet %d decoded as rbcast", i+1)
		}
	}
}

// udpFields are the rbcast fields checked over UDP: those of the golden
// test but the pcapng direction, which a tcpdump pcap does not have.
var udpFields = func() []string {
	var out []string
	for _, f := range dissectorFields {
		if !strings.HasPrefix(f, "frame.") {
			out = append(out, f)
		}
	}
	return out
}()
