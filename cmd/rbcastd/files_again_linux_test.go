package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestNetnsFilesSendAgain (issue 20): sendfile sends a file (its hash in
// FileEnd), the daemons are killed and started again on the same inbox,
// and the same file sent again is held at the receiver — no byte written,
// the stored file untouched, and the sender's pass stopped once the
// receiver said it held every block — while a changed file of the same name and
// size is received again and replaces it (prefix rbfa).
func TestNetnsFilesSendAgain(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbfa"})
	if err := topo.Hosts[1].SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "img")
	stored := filepath.Join(inbox, "img")
	const size = 4 << 20
	var k daemon.FileCounters // the sender's, after each send
	send := func(group int) daemon.FileEvent {
		t.Helper()
		c := startCluster(t, topo, ringCarriage, group, func(i int) []string {
			if i == 1 {
				return []string{"-inbox", inbox}
			}
			return nil
		})
		defer func() {
			for _, d := range c.daemons {
				d.kill()
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := run(c.cli(ctx, 0, "sendfile", src)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if st := c.status(1); st.Files != nil && len(st.Files.Recent) == 1 {
				ev := st.Files.Recent[0]
				t.Logf("group %d: %s %q, %d bytes written: %s", group, ev.Kind, ev.Name, ev.Received, ev.Detail)
				if s := c.status(0); s.Files != nil {
					k = s.Files.Counters
				}
				t.Logf("group %d: the sender sent %d blocks, skipped %d in %d passes, repaired %d", group, k.BlocksSent, k.BlocksSkipped, k.PassesSkipped, k.BlocksRepaired)
				return ev
			}
			if time.Now().After(deadline) {
				t.Fatal("the receiver's status shows no file")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sum := bigRandomFile(t, src, 41, size)
	if ev := send(41); ev.Kind != "received" || ev.Received != size {
		t.Fatalf("first send: %+v", ev)
	}
	before, err := os.Stat(stored)
	if err != nil {
		t.Fatal(err)
	}
	if ev := send(42); ev.Kind != "received" || ev.Received != 0 || !strings.Contains(ev.Detail, "held already") {
		t.Fatalf("the same file again, the receiver restarted: %+v, want held, nothing written", ev)
	}
	// Stopped early: in the first half of the pass. Where in it depends
	// on when the receiver's report of the blocks it holds gets through
	// its 5 % loss and the two CPUs' load: 305-602 of 2865 blocks in ten
	// idle runs, 723 once in CI (a bound of a quarter failed it).
	if k.PassesSkipped != 1 || k.BlocksSent >= k.BlocksSkipped {
		t.Fatalf("the same file again: the sender sent %d blocks, skipped %d in %d passes; want the pass stopped in its first half", k.BlocksSent, k.BlocksSkipped, k.PassesSkipped)
	}
	after, err := os.Stat(stored)
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("the stored file was replaced, though the receiver held it")
	}
	if got, err := hashOf(t, stored); err != nil || got != sum {
		t.Fatalf("the stored file's SHA-256 is %x (%v), want %x", got, err, sum)
	}
	sum = bigRandomFile(t, src, 43, size) // other bytes, the same size
	if ev := send(43); ev.Kind != "received" || ev.Received != size || !strings.Contains(ev.Detail, "replaced another file") {
		t.Fatalf("a changed file of the same name and size: %+v, want received again, replacing", ev)
	}
	if got, err := hashOf(t, stored); err != nil || got != sum {
		t.Fatalf("the stored file's SHA-256 is %x (%v), want the changed file's %x", got, err, sum)
	}
}

// TestNetnsFilesOldReceiver (issue 20): an rbcastd from before offers
// without a hash receives a file offered without one, judges it against
// the offer's zeros and empties its copy; the sender's verdict names it
// as too old at that first mismatch and sends it no block again (the file
// once, not twice), its FileGone ends the old receiver's transfer, and
// nothing is stored (prefix rbfo). Such binaries no longer join a group
// of this version (later wire changes), so host 1 runs this test binary
// as rbcastd with RBCASTD_TEST_OLD_RECEIVER=1: its files' link plays that
// receiver's decoder and hash check (oldReceiverLink).
func TestNetnsFilesOldReceiver(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbfo"})
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := func(i int) string { return filepath.Join(dir, fmt.Sprintf("h%d.sock", i)) }
	var logs [2]*syncbuf.Buffer
	for i, h := range topo.Hosts {
		args := []string{"run", "-i", h.Iface, "-group", "44", "-members", "2", "-node", strconv.Itoa(i),
			"-socket", sock(i), "-failure-timeout", "1s", "-log-level", "info"}
		if i == 1 {
			args = append(args, "-inbox", inbox)
		}
		var env []string
		if i == 1 {
			env = []string{"RBCASTD_TEST_OLD_RECEIVER=1"}
		}
		logs[i] = startLoggedDaemon(t, h, i, args, env)
	}
	awaitStatus(t, len(topo.Hosts), sock)
	src := filepath.Join(dir, "img")
	bigRandomFile(t, src, 44, 1<<20)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	// SHA-256: a receiver from before offers without a hash is from
	// before BLAKE3 too, and would be named for that first.
	cmd := rbcastdCmd(ctx, topo.Hosts[0], "sendfile", "-socket", sock(0), "-hash", "sha256", src)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("sendfile: %v\n%s", err, out.String())
	if err == nil || !strings.Contains(out.String(), "does not hold it: hash mismatch: an rbcastd too old for a file offered without its hash") {
		t.Fatalf("sendfile: %v, %q; want exit 1 naming the receiver as too old", err, out.String())
	}
	m := regexp.MustCompile(`\((\d+) of (\d+) blocks\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("sendfile's verdict %q names no block count", out.String())
	}
	blocks, _ := strconv.Atoi(m[2])
	st, err := status(&socketFlags{socket: sock(0)}, 30*time.Second)
	if err != nil || st.Files == nil {
		t.Fatalf("the sender's status: %v", err)
	}
	k := st.Files.Counters
	t.Logf("the sender sent %d blocks and repaired %d, of a file of %d", k.BlocksSent, k.BlocksRepaired, blocks)
	if sent := k.BlocksSent + k.BlocksRepaired; sent >= uint64(blocks)*3/2 {
		t.Fatalf("the sender sent %d blocks and repaired %d of a file of %d: the file again after the old receiver's mismatch", k.BlocksSent, k.BlocksRepaired, blocks)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs[1].String(), "file incomplete") {
		if time.Now().After(deadline) {
			t.Fatalf("the old receiver's log does not say file incomplete:\n%s", logs[1].String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range []string{"as an old receiver: took an offer without a hash", "as an old receiver: dropped a FileEnd with the file's hash"} {
		if !strings.Contains(logs[1].String(), w) {
			t.Fatalf("the old receiver's log lacks %q: the emulation did not run:\n%s", w, logs[1].String())
		}
	}
	for _, l := range strings.Split(logs[1].String(), "\n") {
		if strings.Contains(l, "img") {
			t.Logf("old receiver: %s", l)
		}
	}
	if _, err := os.Stat(filepath.Join(inbox, "img")); err == nil {
		t.Fatal("the old receiver stored the file")
	}
}

// TestNetnsFilesOldHashAlg: an rbcastd from before the offer's hash
// algorithm byte cannot receive a file hashed with BLAKE3 (sendfile's
// default): it drops the offer and asks for it without FlagHashAlg. The
// sender names it too old at that report, its FileGone ends the old
// receiver's transfer, nothing is stored there, and the receiver of this
// version holds the file; the same file sent with -hash sha256 reaches
// both (prefix rbfh). Host 1 runs this test binary as rbcastd with
// RBCASTD_TEST_OLD_RECEIVER=2: its files' link plays that receiver
// (oldHashAlgLink).
func TestNetnsFilesOldHashAlg(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbfh"})
	dir := t.TempDir()
	inbox := func(i int) string { return filepath.Join(dir, fmt.Sprintf("inbox%d", i)) }
	sock := func(i int) string { return filepath.Join(dir, fmt.Sprintf("h%d.sock", i)) }
	var logs [3]*syncbuf.Buffer
	for i, h := range topo.Hosts {
		args := []string{"run", "-i", h.Iface, "-group", "45", "-members", "3", "-node", strconv.Itoa(i),
			"-socket", sock(i), "-failure-timeout", "1s", "-log-level", "info"}
		if i > 0 {
			if err := os.Mkdir(inbox(i), 0o755); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-inbox", inbox(i))
		}
		var env []string
		if i == 1 {
			env = []string{"RBCASTD_TEST_OLD_RECEIVER=2"}
		}
		logs[i] = startLoggedDaemon(t, h, i, args, env)
	}
	awaitStatus(t, len(topo.Hosts), sock)
	src := filepath.Join(dir, "img")
	sum := bigRandomFile(t, src, 45, 1<<20)
	send := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd := rbcastdCmd(ctx, topo.Hosts[0], append([]string{"sendfile", "-socket", sock(0)}, append(args, src)...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("sendfile %v: %v\n%s", args, err, out.String())
		return out.String(), err
	}
	out, err := send()
	if err == nil || !strings.Contains(out, "member 1 does not hold it: an rbcastd too old for a file not hashed with SHA-256") ||
		!strings.HasPrefix(out, fmt.Sprintf("blake3:%x  img", blake3Of(t, src))) || !strings.Contains(out, "held by members 2") {
		t.Fatalf("sendfile: %v, %q; want exit 1 naming member 1 too old, member 2 holding the file", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs[1].String(), "file incomplete") {
		if time.Now().After(deadline) {
			t.Fatalf("the old receiver's log does not say file incomplete:\n%s", logs[1].String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs[1].String(), "as a receiver from before hash algorithms: dropped an offer of a blake3 file") {
		t.Fatalf("the old receiver's log: the emulation did not run:\n%s", logs[1].String())
	}
	if _, err := os.Stat(filepath.Join(inbox(1), "img")); err == nil {
		t.Fatal("the old receiver stored the file")
	}
	if got, err := hashOf(t, filepath.Join(inbox(2), "img")); err != nil || got != sum {
		t.Fatalf("host 2's copy: %x, %v", got, err)
	}
	out, err = send("-hash", "sha256")
	if err != nil || !strings.HasPrefix(out, fmt.Sprintf("sha256:%x  img", sum)) || !strings.Contains(out, "held by members 1, 2") {
		t.Fatalf("sendfile -hash sha256: %v, %q; want both members holding the file", err, out)
	}
	if got, err := hashOf(t, filepath.Join(inbox(1), "img")); err != nil || got != sum {
		t.Fatalf("the old receiver's copy of the SHA-256 file: %x, %v", got, err)
	}
}

// awaitStatus waits until the daemons of hosts 0..n-1 answer status.
func awaitStatus(t *testing.T, n int, sock func(int) string) {
	t.Helper()
	for i := range n {
		if _, err := status(&socketFlags{socket: sock(i)}, 30*time.Second); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}
}
