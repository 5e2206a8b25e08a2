package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Files that are no capture, or a broken one, end with exit 2 and the
// reason; none is read to its end first (/dev/zero), none panics.
func TestOddInputs(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, err := os.ReadFile(smallCapture(t, true, "three"))
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(good)
	zw.Close()
	cutGz := file("cut.pcap.gz", gz.Bytes()[:gz.Len()/2])
	empty := file("empty", nil)
	zeros := file("zeros", make([]byte, 4096))
	short := file("short", []byte("abc"))
	header := file("header.pcap", good[:10])
	ok := file("good.pcap", good)
	// pcapng: a section header alone (a capture of nothing), then broken
	// ones: a block cut short, a wrong byte-order magic, a block length
	// that is no block's, a packet of an interface never described.
	le := binary.LittleEndian
	shb := le.AppendUint32(nil, 0x0A0D0D0A)
	shb = le.AppendUint32(shb, 28)
	shb = le.AppendUint32(shb, 0x1A2B3C4D)
	shb = le.AppendUint16(le.AppendUint16(shb, 1), 0)
	shb = le.AppendUint64(shb, ^uint64(0))
	shb = le.AppendUint32(shb, 28)
	idb := le.AppendUint32(le.AppendUint32(nil, 1), 20)
	idb = le.AppendUint16(le.AppendUint16(idb, 1), 0)
	idb = le.AppendUint32(le.AppendUint32(idb, 65535), 20)
	ngEmpty := file("empty.pcapng", shb)
	ngCut := file("cut.pcapng", append(append(append([]byte{}, shb...), idb...), append(le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 6), 100), 0), make([]byte, 8)...)...))
	badBOM := append([]byte{}, shb...)
	le.PutUint32(badBOM[8:], 0xdeadbeef)
	ngBOM := file("bom.pcapng", badBOM)
	ngLen := file("len.pcapng", append(append([]byte{}, shb...), append(le.AppendUint32(le.AppendUint32(nil, 6), 7), make([]byte, 8)...)...))
	epb := le.AppendUint32(le.AppendUint32(nil, 6), 32)
	epb = append(epb, make([]byte, 20)...)
	ngNoIDB := file("noidb.pcapng", append(append([]byte{}, shb...), le.AppendUint32(epb, 32)...))
	clitest.Runner{Dir: dir}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: pcap-replay <command>"},
		{Args: []string{"timeline", "-h"}, OK: true, Want: "usage: pcap-replay timeline"},
		{Args: nil, Code: 2, Want: "usage: pcap-replay"},
		{Args: []string{"--bogus"}, Code: 2, Want: `unknown command "--bogus"`},
		{Args: []string{"timeline"}, Code: 2, Want: "want a capture FILE"},
		{Args: []string{"timeline", "-bogus", ok}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"timeline", "/dev/zero"}, Code: 2, Want: "capture /dev/zero: byte offset 0: magic 00000000 is neither pcap"},
		{Args: []string{"summary", "/dev/urandom"}, Code: 2, Want: "capture /dev/urandom: byte offset 0: magic"},
		{Args: []string{"check", empty}, Code: 2, Want: "file is 0 bytes, too short for a pcap or pcapng header"},
		{Args: []string{"check", short}, Code: 2, Want: "file is 3 bytes"},
		{Args: []string{"check", zeros}, Code: 2, Want: "magic 00000000"},
		{Args: []string{"check", header}, Code: 2, Want: "truncated pcap file header: 10 bytes of 24"},
		{Args: []string{"timeline", cutGz}, Code: 2, Want: "truncated gzip stream"},
		{Args: []string{"timeline", dir}, Code: 2, Want: "is a directory"},
		{Args: []string{"timeline", filepath.Join(dir, "none.pcap")}, Code: 2, Want: "no such file or directory"},
		{Args: []string{"timeline", ok, zeros}, Code: 2, Want: "capture " + zeros},
		{Args: []string{"timeline", "-ethertype", "", ok}, Code: 2, Want: `-ethertype "": want a 16-bit EtherType`},
		{Args: []string{"check", "-storm-window", "5", ok}, Code: 2, Want: `invalid value "5" for flag -storm-window`},
		{Args: []string{"check", "-group", "-1", ok}, Code: 2, Want: `-group "-1": want a 32-bit group id`},
		{Args: []string{"simulate", ok}, Code: 2, Want: "-node ID is required: the member id to re-run, 0..65534"},
		{Args: []string{"simulate", "-node", "-1", ok}, Code: 2, Want: "-node -1: want the member id"},
		{Args: []string{"help"}, OK: true, Want: "pcap-replay help <command>"},
		{Args: []string{"help", "simulate"}, OK: true, Want: "usage: pcap-replay simulate"},
		{Args: []string{"help", "frob"}, Code: 2, Want: `unknown command "frob"`},
		{Args: []string{"timeline", ngEmpty, ngCut}, Code: 2, Want: "capture " + ngCut + ": byte offset 48"},
		{Args: []string{"summary", ngCut}, Code: 2, Want: "capture " + ngCut + ": byte offset 48: truncated block of type 0x6: it claims 100 bytes, 20 remain"},
		{Args: []string{"check", ngBOM}, Code: 2, Want: "byte offset 8: section header byte-order magic efbeadde, want 1a2b3c4d"},
		{Args: []string{"timeline", ngLen}, Code: 2, Want: "byte offset 28: block of type 0x6 has total length 7"},
		{Args: []string{"summary", ngNoIDB}, Code: 2, Want: "Interface id 0 not present in section"},
		{Args: []string{"simulate", "-node", "0", ngCut}, Code: 2, Want: "truncated block of type 0x6"},
		{Args: []string{"simulate", "-node", "2", "-window", "-5", ok}, Code: 2, Want: "-window -5: want 0 (the default) or more"},
		{Args: []string{"simulate", "-node", "2", "-mtu", "10", ok}, Code: 2, Want: "MTU is 10"},
		{Args: []string{"simulate", "-node", "2", "-protocol", "seq", "-history", "3", ok}, Code: 2, Want: "History is 3"},
		{Args: []string{"simulate", "-node", "2", ok, "extra"}, Code: 2, Want: "open extra: no such file"},
		{Args: []string{"inject", ok}, Code: 2, Want: "-i IFACE is required"},
		{Args: []string{"inject", "-i", "lo", "-speed", "0", ok}, Code: 2, Want: "-speed 0: want > 0"},
		{Args: []string{"inject", "-i", "rbuxnosuch0", ok}, Code: 2, Want: `interface "rbuxnosuch0": no such network interface`},
	})
}

// A pcapng of a section header alone is a capture of nothing: read, not
// refused; the same file cut in a block fails, and with -partial goes on
// with the frames before the cut, saying so.
func TestEmptyAndPartialPcapng(t *testing.T) {
	dir := t.TempDir()
	le := binary.LittleEndian
	shb := le.AppendUint32(nil, 0x0A0D0D0A)
	shb = le.AppendUint32(shb, 28)
	shb = le.AppendUint32(shb, 0x1A2B3C4D)
	shb = le.AppendUint16(le.AppendUint16(shb, 1), 0)
	shb = le.AppendUint64(shb, ^uint64(0))
	shb = le.AppendUint32(shb, 28)
	empty := filepath.Join(dir, "empty.pcapng")
	cut := filepath.Join(dir, "cut.pcapng")
	if err := os.WriteFile(empty, shb, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, append(append([]byte{}, shb...), le.AppendUint32(le.AppendUint32(nil, 6), 100)...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"summary", empty}, 0, "pcapng, 0 frames", ""},
		{[]string{"check", "-partial", cut}, 0, "0 frames, all invariants hold", "-partial: going on with the 0 frames before it"},
	} {
		var out, errs bytes.Buffer
		code := run(c.args, &out, &errs)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errs.String(), c.errs) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, %q and %q", c.args, code, out.String(), errs.String(), c.code, c.out, c.errs)
		}
	}
}
