package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/link/udp"
	"github.com/rbcast/rbcast/testnet/netns"
)

func TestUDPFilesConfig(t *testing.T) {
	ap := netip.MustParseAddrPort
	cfg := udp.Config{Group: ap("239.1.2.3:7000"), Interface: "rbnone0", TTL: 2, NoGSO: true}
	got, err := udpFilesConfig(cfg)
	if err != nil || got.Group != ap("239.1.2.3:7001") || got.Interface != "rbnone0" || got.TTL != 2 || !got.NoGSO || got.Local.IsValid() {
		t.Errorf("multicast: %+v, %v", got, err)
	}
	cfg = udp.Config{Peers: []netip.AddrPort{ap("10.0.0.1:7000"), ap("[fd00::2]:9000")}, Local: ap("10.0.0.1:7000"), Learn: true}
	got, err = udpFilesConfig(cfg)
	if err != nil || len(got.Peers) != 2 || got.Peers[0] != ap("10.0.0.1:7001") || got.Peers[1] != ap("[fd00::2]:9001") || got.Local != ap("10.0.0.1:7001") || !got.Learn {
		t.Errorf("fan-out: %+v, %v", got, err)
	}
	if cfg.Peers[0] != ap("10.0.0.1:7000") {
		t.Errorf("udpFilesConfig changed its argument's peers: %v", cfg.Peers)
	}
	if _, err := udpFilesConfig(udp.Config{Local: ap("10.0.0.1:65535"), Peers: cfg.Peers}); err == nil || !strings.Contains(err.Error(), "-udp-listen 10.0.0.1:65535 has port 65535") {
		t.Errorf("port 65535: %v", err)
	}
	// Two peers on one host at consecutive ports: the first one's files
	// port is the second one's group port.
	consecutive := udp.Config{Peers: []netip.AddrPort{ap("127.0.0.1:7000"), ap("127.0.0.1:7001")}}
	if _, err := udpFilesConfig(consecutive); err == nil || !strings.Contains(err.Error(), "127.0.0.1:7001 is both a peer's files address and a peer in -udp-peers/-udp-seed: space the peers' ports by 2, or -files=false") {
		t.Errorf("consecutive peers: %v", err)
	}
}

// freePorts returns n ports p on 127.0.0.1 with p and p+1 free for UDP
// (a daemon's group link and its files' link), each two apart.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for base := 20000 + os.Getpid()%20000; len(out) < n && base < 65000; base += 2 {
		ok := true
		var held []net.PacketConn
		for _, p := range []int{base, base + 1} {
			c, err := net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if ok {
			out = append(out, base)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d free port pairs on 127.0.0.1, want %d", len(out), n)
	}
	return out
}

// udpDaemons starts n daemons of group (-members n) over -link udp on
// 127.0.0.1 (unicast fan-out; no netns, no privilege), daemon 1 storing
// files in inbox, each with args(i) besides, and waits until all answer
// status. sock(i) is daemon i's socket, dir a directory for the test's
// files.
func udpDaemons(t *testing.T, n, group int, args func(i int) []string) (sock func(int) string, dir, inbox string) {
	t.Helper()
	ports := freePorts(t, n)
	var peers []string
	for _, p := range ports {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p))
	}
	dir = t.TempDir()
	sock = func(i int) string { return filepath.Join(dir, fmt.Sprintf("u%d.sock", i)) }
	inbox = filepath.Join(dir, "inbox")
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range ports {
		a := []string{"run", "-link", "udp", "-udp-peers", strings.Join(peers, ","), "-udp-listen", peers[i], "-udp-mtu", "1500",
			"-group", fmt.Sprint(group), "-members", fmt.Sprint(n), "-socket", sock(i)}
		if i == 1 {
			a = append(a, "-inbox", inbox)
		}
		cmd := exec.Command(os.Args[0], append(a, args(i)...)...)
		cmd.Env = append(os.Environ(), "RBCASTD_TEST_MAIN=1")
		startLogged(t, cmd, fmt.Sprintf("daemon %d", i))
	}
	for i := range ports {
		if _, err := status(&socketFlags{socket: sock(i)}, 30*time.Second); err != nil {
			t.Fatalf("daemon %d: %v", i, err)
		}
	}
	return sock, dir, inbox
}

// TestFilesUDPLoopback: files between two daemons over -link udp
// (unicast fan-out on 127.0.0.1; no netns, no privilege needed): the
// files' link on each port + 1, the stored file's hash the sent one's,
// and the group's frames and the files' counted on their own links.
func TestFilesUDPLoopback(t *testing.T) {
	sock, dir, inbox := udpDaemons(t, 2, 41, func(i int) []string {
		args := []string{"-failure-timeout", "1s", "-log-level", "info", "-file-rate", "200"}
		if i == 0 {
			args = append(args, "-node", "0")
		}
		return args
	})
	const size = 8 << 20
	src := filepath.Join(dir, "blob")
	sum := bigRandomFile(t, src, 41, size)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	send := exec.CommandContext(ctx, os.Args[0], "sendfile", "-socket", sock(0), "-hash", "sha256", src)
	send.Env = append(os.Environ(), "RBCASTD_TEST_MAIN=1")
	var out bytes.Buffer
	send.Stdout, send.Stderr = &out, &out
	if err := send.Run(); err != nil {
		t.Fatalf("sendfile: %v\n%s", err, out.String())
	}
	if want := fmt.Sprintf("sha256:%x  blob", sum); !strings.HasPrefix(out.String(), want) {
		t.Errorf("sendfile printed %q, want %q", out.String(), want)
	}
	if got, err := hashOf(t, filepath.Join(inbox, "blob")); err != nil || got != sum {
		t.Fatalf("the stored file's SHA-256 is %x (%v), want %x", got, err, sum)
	}
	st := func(i int) *daemon.Status {
		s, err := status(&socketFlags{socket: sock(i)}, 0)
		if err != nil || s.Files == nil {
			t.Fatalf("status of daemon %d: %v (files %v)", i, err, s)
		}
		return s
	}
	s0, s1 := st(0), st(1)
	if s1.Files.Counters.FilesReceived != 1 || s0.Files.Counters.BlocksSent == 0 {
		t.Errorf("files counters: sender %+v, receiver %+v", s0.Files.Counters, s1.Files.Counters)
	}
	t.Logf("%d MB over -link udp on loopback; sender: %+v; receiver: %+v", size>>20, s0.Files.Counters, s1.Files.Counters)
}

// TestNetnsFilesUDP: files over -link udp on real namespaces, multicast
// and unicast fan-out, with 10 % loss of UDP at one receiver: the
// repairs go point to point to the member's files' link (its MAC is
// learned from its frames), and every receiver stores the file.
func TestNetnsFilesUDP(t *testing.T) {
	over(t, []carriage{ringCarriage, udpCarriage, {name: "udp-fanout", udp: true, fanout: true}}, 3, "rbf3", func(t *testing.T, topo *netns.Topology, cr carriage) {
		if err := topo.Hosts[1].SetLoss(netns.In, cr.loss(netns.Loss{Percent: 10, EtherType: frame.EtherType})); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		inbox := func(i int) string { return filepath.Join(dir, fmt.Sprintf("inbox%d", i)) }
		c := startCluster(t, topo, cr, 42, func(i int) []string {
			if i == 0 {
				return nil
			}
			if err := os.Mkdir(inbox(i), 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"-inbox", inbox(i)}
		})
		const size = 16 << 20
		src := filepath.Join(dir, "img")
		sum := bigRandomFile(t, src, 42, size)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := run(c.cli(ctx, 0, "sendfile", src)); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(topo.Hosts); i++ {
			if got, err := hashOf(t, filepath.Join(inbox(i), "img")); err != nil || got != sum {
				t.Errorf("host %d: the stored file's SHA-256 is %x (%v), want %x", i, got, err, sum)
			}
		}
		s0 := c.status(0)
		k := s0.Files.Counters
		if k.BlocksRepaired == 0 || k.RepairsToGroup*2 > k.BlocksRepaired {
			t.Errorf("sender: %d repairs, %d of them to the group; want repairs, most of them point to point", k.BlocksRepaired, k.RepairsToGroup)
		}
		var dups []uint64
		// A receiver whose CPU is taken from it (CI runs two packages at
		// once on two CPUs) queues more in its sockets than the repair
		// timer allows for, and is repaired what it holds unread: up to
		// 18 % of the blocks twice in CI, and 8 % once with a one-minute
		// load average still under the CPU count, so no load gate here
		// can tell a starved host from a broken one. The mechanism (one
		// repair per loss) is pinned in virtual time by reliable/files
		// TestRepairsOncePerLoss; this test bounds a gross failure only
		// and logs the rate.
		limit, bound := k.BlocksSent*7/20, "35 %"
		for i := 1; i < len(topo.Hosts); i++ {
			d := c.status(i).Files.Counters.Duplicates
			dups = append(dups, d)
			// Repairs answered twice: over link/udp multicast the group's
			// socket lagged the unicast one at the receiver, and the pass's
			// tail still queued there was repaired (thousands of blocks
			// twice, before the repair timer took the longer path's
			// round trip).
			if d > limit {
				t.Errorf("host %d received %d blocks twice, more than %s of the %d blocks", i, d, bound, k.BlocksSent)
			}
		}
		t.Logf("%s: %d MB, 10 %% loss at host 1: %d blocks sent, %d repaired (%d to the group, %d again, %d of them by the timer); duplicates received at hosts 1, 2: %v",
			cr.name, size>>20, k.BlocksSent, k.BlocksRepaired, k.RepairsToGroup, k.RepairsAgain, k.RepairsTimedOut, dups)
	})
}
