package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Issue 20's "Done when" on real namespaces (prefix rbfl): a file to
// three receivers under uneven loss (host 1: 20 % random, host 2: 10 % in
// bursts of 4, host 3: none), the daemons driven through the command line
// (sendfile, recvfile, run -inbox). Host 3's daemon is killed with
// SIGKILL once it holds half the file and started again: it must resume
// from its partial copy (the bytes it writes after the restart are
// counted, from its status). Host 4's daemon starts once the multicast
// pass is 70 % through: it joins the group and must get the whole file.
//
// The size is RBCAST_FILES_BYTES, or 1 GB, or 128 MB under the race
// detector or CI (1 GB takes 50–70 s here without it), or 64 MB under
// -short.

func fileTestSize(t *testing.T) int {
	if s := os.Getenv("RBCAST_FILES_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("RBCAST_FILES_BYTES=%q: want a size in bytes", s)
		}
		return n
	}
	switch {
	case testing.Short():
		return 64 << 20
	case raceOn || os.Getenv("CI") != "":
		// 1 GB takes about 70 s here without the race detector (two
		// cores shared with the other daemons), several times that with.
		return 128 << 20
	}
	return 1 << 30
}

// bigRandomFile writes n pseudo-random bytes to path and returns their
// SHA-256, without holding them all in memory.
func bigRandomFile(t *testing.T, path string, seed byte, n int) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var key [32]byte
	key[0] = seed
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8(key), int64(n)); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// blake3Of is the BLAKE3 of the file at path (what sendfile prints by
// default).
func blake3Of(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := blake3.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func hashOf(t *testing.T, path string) ([32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

func TestNetnsFiles(t *testing.T) {
	netnstest.RequireRoot(t)
	size := fileTestSize(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 5, Prefix: "rbfl"})
	loss := []netns.Loss{{}, {Percent: 20, EtherType: frame.EtherType}, {Percent: 10, BurstLen: 4, EtherType: frame.EtherType}}
	for i, l := range loss {
		if err := topo.Hosts[i].SetLoss(netns.In, l); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	sock := func(i int) string { return filepath.Join(dir, fmt.Sprintf("h%d.sock", i)) }
	inbox := func(i int) string { return filepath.Join(dir, fmt.Sprintf("inbox%d", i)) }
	for i := range topo.Hosts {
		if err := os.Mkdir(inbox(i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func(i int) *loggedDaemon {
		args := []string{"run", "-i", topo.Hosts[i].Iface, "-group", "20", "-members", "4", "-node", strconv.Itoa(i),
			"-socket", sock(i), "-failure-timeout", "1s", "-log-level", "info"}
		if i != 2 { // host 2 stores through recvfile
			args = append(args, "-inbox", inbox(i))
		}
		return startLogged(t, rbcastdCmd(context.Background(), topo.Hosts[i], args...), fmt.Sprintf("daemon on host %d", i))
	}
	statusOf := func(i int) *daemon.Status {
		st, err := status(&socketFlags{socket: sock(i)}, 0)
		if err != nil {
			return nil
		}
		return st
	}
	waitReady := func(i int) {
		if _, err := status(&socketFlags{socket: sock(i)}, 30*time.Second); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}
	ds := make([]*loggedDaemon, 5)
	for i := range 4 {
		ds[i] = start(i)
	}
	for i := range 4 {
		waitReady(i)
	}
	src := filepath.Join(dir, "disk.img")
	began := time.Now()
	sum := bigRandomFile(t, src, 20, size)
	t.Logf("%d MB written in %v", size>>20, time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	recv := rbcastdCmd(ctx, topo.Hosts[2], "recvfile", "-socket", sock(2), "-dir", inbox(2), "-count", "1")
	var recvOut bytes.Buffer
	recv.Stdout, recv.Stderr = &recvOut, &recvOut
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	for st := statusOf(2); st == nil || st.Files == nil || len(st.Files.RecvDirs) == 0; st = statusOf(2) {
		if time.Since(began) > time.Minute {
			t.Fatal("recvfile did not connect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	began = time.Now()
	send := rbcastdCmd(ctx, topo.Hosts[0], "sendfile", "-socket", sock(0), src)
	var sendOut, sendErr bytes.Buffer
	send.Stdout, send.Stderr = &sendOut, &sendErr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	sendDone := make(chan error, 1)
	go func() { sendDone <- send.Wait() }()

	// Kill host 3's daemon once it holds half the file; start it again.
	var heldAtKill uint64
	for heldAtKill == 0 {
		select {
		case err := <-sendDone:
			t.Fatalf("sendfile ended (%v) before host 3 held half the file:\n%s%s", err, sendOut.String(), sendErr.String())
		default:
		}
		if st := statusOf(3); st != nil && st.Files != nil {
			for _, tr := range st.Files.Transfers {
				if !tr.Sending && tr.Bytes >= uint64(size)/2 {
					heldAtKill = tr.Bytes
				}
			}
		}
		if heldAtKill == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	ds[3].kill()
	killedAt := time.Since(began)
	ds[3] = start(3)

	// Start host 4 once the pass is 70 % through.
	for joined := false; !joined; {
		st := statusOf(0)
		if st != nil && st.Files != nil {
			for _, tr := range st.Files.Transfers {
				if tr.Sending && (tr.State != "multicasting" || uint64(tr.Held)*10 >= uint64(tr.Blocks)*7) {
					joined = true
					t.Logf("host 4 starts with the pass at block %d of %d (%s)", tr.Held, tr.Blocks, tr.State)
				}
			}
		}
		if !joined {
			time.Sleep(10 * time.Millisecond)
		}
	}
	ds[4] = start(4)

	if err := <-sendDone; err != nil {
		t.Fatalf("sendfile: %v\n%s%s", err, sendOut.String(), sendErr.String())
	}
	took := time.Since(began)
	want := fmt.Sprintf("blake3:%x  disk.img", blake3Of(t, src))
	// Host 4 is waited for if it was in the view when the pass ended;
	// else it fetches the file as a ghost (§III.D).
	ghost := !strings.Contains(sendOut.String(), "held by members 1, 2, 3, 4")
	if !strings.HasPrefix(sendOut.String(), want) || !strings.Contains(sendOut.String(), "held by members 1, 2, 3") {
		t.Errorf("sendfile printed %q, want %q held by members 1, 2, 3 (and 4)", sendOut.String(), want)
	}
	for st := statusOf(4); st == nil || st.Files == nil || st.Files.Counters.FilesReceived == 0; st = statusOf(4) {
		if time.Since(began) > 5*time.Minute {
			t.Fatal("host 4 did not get the file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := recv.Wait(); err != nil || strings.TrimSpace(recvOut.String()) != want {
		t.Errorf("recvfile: %v, printed %q, want %q", err, recvOut.String(), want)
	}
	for i := 1; i <= 4; i++ {
		got, err := hashOf(t, filepath.Join(inbox(i), "disk.img"))
		if err != nil || got != sum {
			t.Errorf("host %d: the stored file's SHA-256 is %x (%v), want %x", i, got, err, sum)
		}
		if left, _ := filepath.Glob(filepath.Join(inbox(i), ".rbcast-partial", "*.part")); len(left) > 0 {
			t.Errorf("host %d: partial copies left: %v", i, left)
		}
	}
	// The restarted daemon wrote only what it lacked.
	st := statusOf(3)
	if st == nil || st.Files == nil || len(st.Files.Recent) == 0 {
		t.Fatalf("host 3's status has no file: %+v", st)
	}
	ev := st.Files.Recent[len(st.Files.Recent)-1]
	if ev.Kind != "received" || ev.Received == 0 || ev.Received > uint64(size)-heldAtKill+uint64(size)/20 || st.Files.Counters.Resumed != 1 {
		t.Errorf("host 3 after its restart: %s, %d bytes written, %d resumed; it held %d of %d bytes when killed", ev.Kind, ev.Received, st.Files.Counters.Resumed, heldAtKill, size)
	}
	if len(waitLog(ds[3].log, 10*time.Second, "resuming a file from its partial copy")) > 0 {
		t.Errorf("host 3's restarted daemon did not log the resume")
	}
	st4 := statusOf(4)
	if st4 == nil || st4.Files == nil || st4.Files.Counters.FilesReceived != 1 {
		t.Errorf("host 4 (the joiner): files status %+v", st4.Files)
	}
	snd := statusOf(0)
	// Repairs answered twice (issue 20's netns runs sent 1.0–1.1 M
	// repairs for 733 k blocks): the receivers that stayed up receive
	// few blocks twice.
	blocks := (uint64(size) + 1449) / 1450
	var dups []uint64
	for i := 1; i <= 4; i++ {
		if st := statusOf(i); st != nil && st.Files != nil {
			dups = append(dups, st.Files.Counters.Duplicates)
		}
	}
	k := snd.Files.Counters
	t.Logf("sender: %d blocks sent, %d repaired (%d to the group, %d again, %d of them by the timer); duplicates received at hosts 1–4: %v",
		k.BlocksSent, k.BlocksRepaired, k.RepairsToGroup, k.RepairsAgain, k.RepairsTimedOut, dups)
	// As in TestNetnsFilesUDP: a receiver starved of CPU is repaired
	// blocks it holds unread, and no load gate tells that from a broken
	// repair path; the test bounds a gross failure and logs the rate.
	limit, bound := blocks*7/20, "35 %"
	for i, d := range dups[:min(2, len(dups))] {
		if d > limit {
			t.Errorf("host %d received %d blocks twice, more than %s of the %d blocks", i+1, d, bound, blocks)
		}
	}
	t.Logf("%d MB to 4 receivers (20%% / bursty loss, a kill -9 at %v with %d MB held, a joiner at 70%% (a ghost: %v)): %v, %.1f MB/s; host 3 wrote %d MB after its restart; sender: %d blocks sent, %d repaired (%d to the group)",
		size>>20, killedAt.Round(time.Millisecond), heldAtKill>>20, ghost, took.Round(time.Millisecond), float64(size)/took.Seconds()/1e6, ev.Received>>20,
		snd.Files.Counters.BlocksSent, snd.Files.Counters.BlocksRepaired, snd.Files.Counters.RepairsToGroup)
}
