package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/replay"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestNetnsFilesCapture: a daemon run with -files -capture records the
// file frames (its files' link, an interface "IFACE/files" of the same
// pcapng) beside the group's, and pcap-replay check of the capture finds
// nothing: the file frames are held to their own group (prefix rbf3).
func TestNetnsFilesCapture(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbf3"})
	// Loss at the capturing receiver, so that the capture holds repairs.
	if err := topo.Hosts[1].SetLoss(netns.In, netns.Loss{Percent: 10, EtherType: frame.EtherType}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	capFile := filepath.Join(dir, "h1.pcapng")
	inbox := filepath.Join(dir, "inbox")
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, topo, ringCarriage, 31, func(i int) []string {
		if i == 1 {
			return []string{"-capture", capFile, "-inbox", inbox}
		}
		return nil
	})
	const size = 3 << 20
	src := filepath.Join(dir, "img")
	sum := bigRandomFile(t, src, 31, size)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := run(c.cli(ctx, 0, "sendfile", src)); err != nil {
		t.Fatal(err)
	}
	if got, err := hashOf(t, filepath.Join(inbox, "img")); err != nil || got != sum {
		t.Fatalf("the stored file's SHA-256 is %x (%v), want %x", got, err, sum)
	}
	// SIGTERM closes the capture file.
	for _, d := range c.daemons {
		d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range c.daemons {
		if err := d.exit(t, 15*time.Second); err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", d.name, err, d.log)
		}
	}

	capt, err := replay.ReadFiles([]string{capFile}, replay.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	filesGroup := daemon.FilesGroup(31)
	byType := map[frame.Type]int{}
	groupFrames := 0 // of the message group (31): its views' frames, data, heartbeats
	var ifaces []string
	for _, intf := range capt.Interfaces {
		ifaces = append(ifaces, intf.Label())
	}
	for _, r := range capt.Records {
		if r.View == nil {
			continue
		}
		if r.View.Type() >= frame.FileOffer && r.View.Type() <= frame.FileGone && r.View.Group() != filesGroup {
			t.Errorf("frame %d: %v of group %d, want the files' group %d", r.N, r.View.Type(), r.View.Group(), filesGroup)
		}
		byType[r.View.Type()]++
		if r.View.Group() == 31 {
			groupFrames++
		}
	}
	blocks := (size + 1400) / 1450 // at least this many FileData (MTU 1500)
	if byType[frame.FileOffer] == 0 || byType[frame.FileEnd] == 0 || byType[frame.FileStatus] == 0 || byType[frame.FileData] < blocks*8/10 || groupFrames == 0 {
		t.Errorf("the capture (interfaces %q) holds %v, %d of group 31; want offers, ends, statuses, at least %d FileData (the 90 %% not lost) and the group's frames", ifaces, byType, groupFrames, blocks*8/10)
	}
	if len(capt.Interfaces) != 2 || !strings.HasSuffix(capt.Interfaces[1].Name, "/files") {
		t.Errorf("the capture's interfaces are %q, want the group's and IFACE/files", ifaces)
	}
	vs := replay.Check(capt, replay.CheckOptions{})
	if replay.Judged(vs) > 0 {
		var b strings.Builder
		replay.WriteViolations(&b, capt, vs)
		t.Errorf("pcap-replay check found %d violations:\n%s", replay.Judged(vs), b.String())
	}
	// The files' group given explicitly, and a wrong one.
	g := uint32(31)
	if vs := replay.Check(capt, replay.CheckOptions{Group: &g, FilesGroup: &filesGroup}); replay.Judged(vs) > 0 {
		t.Errorf("check with -group 31 -files-group %d: %d violations", filesGroup, replay.Judged(vs))
	}
	wrong := filesGroup + 1
	vs = replay.Check(capt, replay.CheckOptions{Group: &g, FilesGroup: &wrong})
	if replay.Judged(vs) == 0 || vs[0].Kind != "foreign-group" || !strings.Contains(vs[0].Detail, fmt.Sprintf("the -files-group given is %d", wrong)) {
		t.Errorf("check with a wrong -files-group: %v, want foreign-group findings naming it", vs[:min(len(vs), 1)])
	}
	t.Logf("capture: %v", byType)
}
