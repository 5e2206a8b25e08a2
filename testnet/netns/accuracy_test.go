package netns_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestLossAccuracy measures every loss model against its target. It runs
// only when asked, e.g.
//
//	go test ./testnet/netns -run LossAccuracy -v -args -lossframes=200000
//
// and logs a table (docs/netns.md quotes it). It fails only on gross errors.
func TestLossAccuracy(t *testing.T) {
	if *lossFrames == 0 {
		t.Skip("measurement only; run with -args -lossframes=N")
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: "rbnacc"})
	h0, h1 := topo.Hosts[0], topo.Hosts[1]
	src, dst := openAll(t, h0), openAll(t, h1)
	n := *lossFrames
	t.Logf("%d frames of 78 bytes per row, h0 -> h1", n)
	t.Logf("%-5s %-14s %9s %9s %9s %9s", "dir", "model", "want%", "lost%", "wantrun", "meanrun")
	for _, tc := range []struct {
		host *netns.Host
		dir  netns.Direction
		loss netns.Loss
	}{
		{h1, netns.In, netns.Loss{Percent: 1}},
		{h1, netns.In, netns.Loss{Percent: 5}},
		{h1, netns.In, netns.Loss{Percent: 30}},
		{h0, netns.Out, netns.Loss{Percent: 5}},
		{h1, netns.In, netns.Loss{Percent: 1, BurstLen: 2}},
		{h1, netns.In, netns.Loss{Percent: 5, BurstLen: 3}},
		{h1, netns.In, netns.Loss{Percent: 20, BurstLen: 4}},
		{h1, netns.In, netns.Loss{Percent: 40, BurstLen: 10}},
		{h0, netns.Out, netns.Loss{Percent: 20, BurstLen: 4}},
	} {
		tc.loss.EtherType = etherType
		if err := tc.host.SetLoss(tc.dir, tc.loss); err != nil {
			t.Fatal(err)
		}
		loss, run := lossStats(lossRun(t, src, dst, h0.MAC, n))
		if err := tc.host.SetLoss(netns.Both, netns.Loss{}); err != nil {
			t.Fatal(err)
		}
		p := tc.loss.Percent / 100
		wantRun := 1 / (1 - p) // independent losses
		model := fmt.Sprintf("random %g", tc.loss.Percent)
		if tc.loss.BurstLen > 0 {
			wantRun = float64(tc.loss.BurstLen)
			model = fmt.Sprintf("burst %g %d", tc.loss.Percent, tc.loss.BurstLen)
		}
		t.Logf("%-5v %-14s %9.2f %9.2f %9.2f %9.2f", tc.dir, model, 100*p, 100*loss, wantRun, run)
		if loss < p*0.7 || loss > p*1.3 {
			t.Errorf("%v %s: lost %.2f%%, want about %.2f%%", tc.dir, model, 100*loss, 100*p)
		}
	}
}

// BenchmarkForward measures frames per second that h0 pushes through the
// bridge to h1 with no loss rules, a random-loss chain, and a burst-loss
// chain (which writes one map element per frame) on h1's port. Sending a
// frame into a veth runs the bridge and the nft chains in the sender's
// context, so the send rate is the forwarding rate. Nothing reads at h1.
// Loss is 0.0001% so nearly every frame goes the whole way.
func BenchmarkForward(b *testing.B) {
	for _, tc := range []struct {
		name string
		loss netns.Loss
	}{
		{"none", netns.Loss{}},
		{"random", netns.Loss{Percent: 0.0001}},
		{"burst", netns.Loss{Percent: 0.0001, BurstLen: 2}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			topo := netnstest.Up(b, netns.Options{Hosts: 2, Prefix: "rbnbench"})
			h0, h1 := topo.Hosts[0], topo.Hosts[1]
			src := openRaw(b, h0)
			if err := h1.SetLoss(netns.In, tc.loss); err != nil {
				b.Fatal(err)
			}
			frame := broadcastFrame(h0.MAC, 0, 64)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				binary.BigEndian.PutUint32(frame[14:18], uint32(i))
				src.send(b, frame)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
		})
	}
}
