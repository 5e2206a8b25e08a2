package netns_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

var lossFrames = flag.Int("lossframes", 0, "frames per loss measurement (0 = each test's default); raise it to measure accuracy")

// endMarker is the EtherType of the frame that ends a run. Loss is applied
// to etherType only, so the marker always arrives and the receiver knows
// the run is over without guessing from a timeout.
const endMarker = etherType + 1

// lossRun sends n sequence-numbered broadcast frames from src, then an end
// marker, and returns which sequence numbers dst received. dst reads while
// src sends, so the socket buffer never overflows into extra loss.
func lossRun(t *testing.T, src, dst *rawSocket, srcMAC net.HardwareAddr, n int) []bool {
	t.Helper()
	// Earlier runs delivered their frames to every host, not only the one
	// they measured; start clean.
	drain(dst)
	type result struct {
		got []bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := receiveRun(dst, n)
		done <- result{got, err}
	}()
	for seq := 0; seq < n; seq++ {
		src.send(t, broadcastFrame(srcMAC, uint32(seq), 64))
	}
	end := broadcastFrame(srcMAC, 0, 64)
	binary.BigEndian.PutUint16(end[12:14], endMarker)
	src.send(t, end)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.got
}

func receiveRun(dst *rawSocket, n int) ([]bool, error) {
	got := make([]bool, n)
	buf := make([]byte, 2048)
	wait := 10 * time.Second
	for sawEnd := false; ; {
		f, err := dst.recvFrame(buf, wait)
		if err != nil {
			return nil, err
		}
		if f == nil {
			if !sawEnd {
				return nil, fmt.Errorf("end marker never arrived")
			}
			return got, nil
		}
		switch binary.BigEndian.Uint16(f[12:14]) {
		case endMarker:
			// The veth may hand frames to different CPUs, so a frame
			// can trail the marker by microseconds: drain briefly.
			sawEnd, wait = true, 100*time.Millisecond
		case etherType:
			seq := binary.BigEndian.Uint32(f[14:18])
			if int(seq) >= n || got[seq] {
				return nil, fmt.Errorf("unexpected or duplicate sequence number %d", seq)
			}
			got[seq] = true
		}
	}
}

// lossStats returns the share of frames lost and the mean length of runs of
// consecutive losses.
func lossStats(got []bool) (loss, meanRun float64) {
	lost, runs := 0, 0
	for i, ok := range got {
		if !ok {
			lost++
			if i == 0 || got[i-1] {
				runs++
			}
		}
	}
	if runs > 0 {
		meanRun = float64(lost) / float64(runs)
	}
	return float64(lost) / float64(len(got)), meanRun
}

// openAll opens a raw socket for every EtherType (ETH_P_ALL), so it
// sees both rbcast frames and the end marker.
func openAll(t testing.TB, h *netns.Host) *rawSocket {
	t.Helper()
	var s rawSocket
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(h.Iface)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		s = rawSocket{fd: fd, ifindex: ifi.Index}
		return nil
	})
	if err != nil {
		t.Fatalf("opening ETH_P_ALL socket in %s: %v", h.Namespace, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return &s
}

func frames(def int) int {
	if *lossFrames > 0 {
		return *lossFrames
	}
	return def
}

func TestRandomLoss(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbnrand"})
	h0, h1 := topo.Hosts[0], topo.Hosts[1]
	src, dst := openAll(t, h0), openAll(t, h1)
	n := frames(2000)

	if err := h1.SetLoss(netns.In, netns.Loss{Percent: 30, EtherType: etherType}); err != nil {
		t.Fatal(err)
	}
	loss, run := lossStats(lossRun(t, src, dst, h0.MAC, n))
	t.Logf("random 30%% on h1 in, %d frames: lost %.2f%%, mean run %.2f", n, 100*loss, run)
	if loss < 0.20 || loss > 0.40 {
		t.Errorf("lost %.1f%% of %d frames with 30%% random loss, want 20%%..40%%", 100*loss, n)
	}

	if err := h1.SetLoss(netns.In, netns.Loss{}); err != nil {
		t.Fatal(err)
	}
	if loss, _ := lossStats(lossRun(t, src, dst, h0.MAC, n)); loss != 0 {
		t.Errorf("lost %.1f%% of %d frames after loss was removed, want none", 100*loss, n)
	}
}

func TestBurstLoss(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbnburst"})
	h0, h1 := topo.Hosts[0], topo.Hosts[1]
	src, dst := openAll(t, h0), openAll(t, h1)
	n := frames(5000)

	if err := h1.SetLoss(netns.In, netns.Loss{Percent: 20, BurstLen: 4, EtherType: etherType}); err != nil {
		t.Fatal(err)
	}
	loss, run := lossStats(lossRun(t, src, dst, h0.MAC, n))
	t.Logf("burst 20%% mean 4 on h1 in, %d frames: lost %.2f%%, mean run %.2f", n, 100*loss, run)
	if loss < 0.12 || loss > 0.28 {
		t.Errorf("lost %.1f%% of %d frames with 20%% burst loss, want 12%%..28%%", 100*loss, n)
	}
	// Independent 20% loss would give runs of 1.25 on average.
	if run < 2.5 {
		t.Errorf("mean run of consecutive losses %.2f with bursts of mean 4, want > 2.5", run)
	}

	// Replacing the setting with none restores full delivery.
	if err := h1.SetLoss(netns.In, netns.Loss{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	if loss, _ := lossStats(lossRun(t, src, dst, h0.MAC, n)); loss != 0 {
		t.Errorf("lost %.1f%% after loss was removed, want none", 100*loss)
	}
}

func TestOutLossCutsSender(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbnout"})
	h0 := topo.Hosts[0]
	src := openAll(t, h0)
	dsts := []*rawSocket{openAll(t, topo.Hosts[1]), openAll(t, topo.Hosts[2])}

	if err := h0.SetLoss(netns.Out, netns.Loss{Percent: 100, EtherType: etherType}); err != nil {
		t.Fatal(err)
	}
	for i, dst := range dsts {
		if loss, _ := lossStats(lossRun(t, src, dst, h0.MAC, 200)); loss != 1 {
			t.Errorf("host %d: lost %.1f%% of frames with 100%% loss on h0 out, want all", i+1, 100*loss)
		}
	}
	// Setting In on h0 leaves Out in place; Both none clears everything.
	if err := h0.SetLoss(netns.In, netns.Loss{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	if loss, _ := lossStats(lossRun(t, src, dsts[0], h0.MAC, 100)); loss != 1 {
		t.Errorf("after setting In, Out loss changed: lost %.1f%%, want all", 100*loss)
	}
	if err := h0.SetLoss(netns.Both, netns.Loss{}); err != nil {
		t.Fatal(err)
	}
	for i, dst := range dsts {
		if loss, _ := lossStats(lossRun(t, src, dst, h0.MAC, 200)); loss != 0 {
			t.Errorf("host %d: lost %.1f%% after Both none, want none", i+1, 100*loss)
		}
	}
}

// drain discards whatever is queued on s.
func drain(s *rawSocket) {
	buf := make([]byte, 2048)
	for {
		if _, _, err := unix.Recvfrom(s.fd, buf, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// TestSegmentIsQuiet checks that a fresh segment carries no frames of its
// own (router solicitations, DAD, MLD reports would appear within a second
// of the links coming up if IPv6 were on). Proving absence needs a window.
func TestSegmentIsQuiet(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbnquiet"})
	s := openAll(t, topo.Hosts[1])
	buf := make([]byte, 2048)
	if f, err := s.recvFrame(buf, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	} else if f != nil {
		t.Fatalf("unexpected frame on a fresh segment: % x", f[:min(len(f), 64)])
	}
}
