package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestNetnsFilesKeyed (issue 25, prefix rbfk): three daemons run with
// -key-file and -encrypt; a file sent with rbcastd sendfile reaches both
// receivers' inboxes with the sender's SHA-256, over a files' link that
// authenticated (and decrypted) every frame: each daemon's status shows
// the files' link under the group's key, frames verified, none dropped.
func TestNetnsFilesKeyed(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbfk"})
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "group.key")
	key, err := auth.Generate(keyPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	sock := func(i int) string { return filepath.Join(dir, fmt.Sprintf("h%d.sock", i)) }
	inbox := func(i int) string { return filepath.Join(dir, fmt.Sprintf("inbox%d", i)) }
	for i := range topo.Hosts {
		args := []string{"run", "-i", topo.Hosts[i].Iface, "-group", "25", "-members", "3", "-node", strconv.Itoa(i),
			"-socket", sock(i), "-failure-timeout", "1s", "-log-level", "warn", "-key-file", keyPath, "-encrypt"}
		if i > 0 {
			if err := os.Mkdir(inbox(i), 0o755); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-inbox", inbox(i))
		}
		startLoggedDaemon(t, topo.Hosts[i], i, args, nil)
	}
	for i := range topo.Hosts {
		if _, err := status(&socketFlags{socket: sock(i)}, 30*time.Second); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}
	const size = 16 << 20
	src := filepath.Join(dir, "keyed.img")
	sum := bigRandomFile(t, src, 25, size)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	send := rbcastdCmd(ctx, topo.Hosts[0], "sendfile", "-socket", sock(0), src)
	var out bytes.Buffer
	send.Stdout, send.Stderr = &out, &out
	began := time.Now()
	if err := send.Run(); err != nil {
		t.Fatalf("sendfile: %v\n%s", err, out.String())
	}
	took := time.Since(began)
	if want := fmt.Sprintf("blake3:%x  keyed.img", blake3Of(t, src)); !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), "held by members 1, 2") {
		t.Fatalf("sendfile printed %q, want %q held by members 1, 2", out.String(), want)
	}
	for i := 1; i < 3; i++ {
		got, err := hashOf(t, filepath.Join(inbox(i), "keyed.img"))
		if err != nil || got != sum {
			t.Errorf("host %d: the stored file's SHA-256 is %x (%v), want %x", i, got, err, sum)
		}
	}
	want := fmt.Sprintf("%016x", key.Fingerprint())
	for i := range topo.Hosts {
		st, err := status(&socketFlags{socket: sock(i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := st.Files.Auth
		if a == nil || a.Active != want || !a.Encrypt || a.Verified == 0 || st.Files.KeyMismatch != "" {
			t.Fatalf("host %d: files' auth status %+v (%s), want key %s, encrypted, frames verified", i, a, st.Files.KeyMismatch, want)
		}
		for r, n := range a.Dropped {
			if n != 0 {
				t.Errorf("host %d: the files' link dropped %d frames (%s)", i, n, r)
			}
		}
		t.Logf("host %d: files' link: %d frames sent, %d verified", i, a.Sent, a.Verified)
	}
	t.Logf("%d MB to 2 receivers, encrypted: %v, %.1f MB/s", size>>20, took.Round(time.Millisecond), float64(size)/took.Seconds()/1e6)
}
