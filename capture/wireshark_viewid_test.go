package capture

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// The dissector shows a view id as the pair it is (docs/wire-format.md:
// number and proposer), in the header and in a ViewPrepare's next and
// base.
func TestDissectorViewIDs(t *testing.T) {
	tshark(t)
	hdr := frame.Header{Group: 7, Sender: 2, Incarnation: 9, ViewID: 0x0302}
	members := []frame.MemberInfo{{ID: 0, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1}, {ID: 2, MAC: [6]byte{2, 0, 0, 0, 0, 3}, Incarnation: 3}}
	b, err := frame.Append(nil, &hdr, &frame.ViewPrepareBody{Next: 0x0402, Base: 0x0302, Members: members})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "viewid.pcapng")
	w, err := CreateFile(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{Node: "3", Interface: "golden0", Clock: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send([][]byte{ethernet(b)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("wireshark", "rbcast.lua"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark(t), "-n", "-X", "lua_script:"+script, "-r", path, "-V")
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
	}
	for _, want := range []string{
		"View: 770 (number 3, proposed by member 2)",
		"Next view: 1026 (number 4, proposed by member 2)",
		"Base view: 770 (number 3, proposed by member 2)",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("tshark -V: no %q in\n%s", want, stdout.String())
		}
	}
}
