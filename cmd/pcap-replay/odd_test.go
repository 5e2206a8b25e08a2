package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
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
		{Args: []string{"simulate", ok}, Code: 2, Want: "-node -1: want the member id"},
		{Args: []string{"simulate", "-node", "2", "-window", "-5", ok}, Code: 2, Want: "Window is -5"},
		{Args: []string{"simulate", "-node", "2", "-mtu", "10", ok}, Code: 2, Want: "MTU is 10"},
		{Args: []string{"simulate", "-node", "2", "-protocol", "seq", "-history", "3", ok}, Code: 2, Want: "History is 3"},
		{Args: []string{"simulate", "-node", "2", ok, "extra"}, Code: 2, Want: "open extra: no such file"},
		{Args: []string{"inject", ok}, Code: 2, Want: "-i IFACE is required"},
		{Args: []string{"inject", "-i", "lo", "-speed", "0", ok}, Code: 2, Want: "-speed 0: want > 0"},
		{Args: []string{"inject", "-i", "rbuxnosuch0", ok}, Code: 2, Want: `interface "rbuxnosuch0": no such network interface`},
	})
}
