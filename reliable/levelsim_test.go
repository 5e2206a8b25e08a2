package reliable

import (
	"fmt"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet"
)

// levelSimResult is one run of levelSim.
type levelSimResult struct {
	bytes  uint64            // delivered at the slowest receiver
	frames map[string]uint64 // sent, by frame type, by all members
	data   uint64            // Data frames sent by the sender
	turns  uint64            // Steps of all members
	cpu    time.Duration     // wall time of the sending and draining
}

// levelSim has member 0 of a group with views at level lvl (fifo,
// agreed, safe; or registered, no views) send its largest messages
// for d of virtual time to rx receivers over a lossless segment of MTU
// mtu (10 Gbit/s ports), as BenchmarkLevels does on a netns segment,
// and counts the frames every member sent. The cores run on the
// caller's goroutine, so the wall time it takes is their CPU (and the
// simulator's).
func levelSim(tb testing.TB, lvl string, rx, mtu int, d time.Duration) levelSimResult {
	n := rx + 1
	net, err := testnet.New(1, testnet.Config{Bandwidth: 10e9 / 8})
	if err != nil {
		tb.Fatal(err)
	}
	start := net.Now()
	res := levelSimResult{frames: map[string]uint64{}}
	var members []frame.MemberInfo
	var eps []*testnet.Endpoint
	for i := range n {
		ep, err := net.Attach(testnet.EndpointConfig{MTU: mtu, QueueLen: 4096})
		if err != nil {
			tb.Fatal(err)
		}
		eps = append(eps, ep)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
	}
	got := make([]uint64, n)
	drivers := make([]*Driver, n)
	for i, ep := range eps {
		cfg := Config{Group: 9, Logger: quiet, Deliver: func(from frame.MemberID, data []byte) {
			if from == 0 && i > 0 {
				got[i] += uint64(len(data))
			}
		}}
		switch lvl {
		case "registered":
			cfg.Members, cfg.Self = members, frame.MemberID(i)
		default:
			cfg.Views, cfg.Size, cfg.RequestID, cfg.Incarnation = true, n, frame.MemberID(i), 1
			if lvl != "fifo" {
				cfg.Order, cfg.Safe = Total, lvl == "safe"
			}
		}
		drv, err := NewDriver(ep, cfg, net.Now())
		if err != nil {
			tb.Fatal(err)
		}
		drivers[i] = drv
		ep.Bind(testnet.NodeFunc(func(now time.Time) time.Time {
			res.turns++
			return drv.Step(now)
		}))
	}
	for net.RunFor(10 * time.Millisecond); lvl != "registered"; net.RunFor(10 * time.Millisecond) {
		formed := true
		for _, drv := range drivers {
			v := 0
			for _, ev := range drv.Stats().Events {
				if ev.Kind == ViewInstalled && ev.View != nil {
					v = len(ev.View.Members)
				}
			}
			formed = formed && v == n
		}
		if formed {
			break
		}
		if net.Now().Sub(start) > 5*time.Second {
			tb.Fatalf("%s: no view of %d members in 5 s", lvl, n)
		}
	}
	net.RunFor(50 * time.Millisecond)
	res.turns = 0
	t0 := time.Now()
	net.Trace(func(ev testnet.Event) {
		if ev.Kind != testnet.EventSend {
			return
		}
		v, err := frame.Parse(ev.Frame[frame.EthernetHeaderLen:])
		if err != nil {
			return
		}
		res.frames[v.Type().String()]++
		if v.Type() == frame.Data && v.Sender() == 0 {
			res.data++
		}
	})
	snd := drivers[0]
	msg := make([]byte, snd.MaxMessage())
	var sent uint64
	end := net.Now().Add(d)
	for net.Now().Before(end) {
		for snd.Propose(net.Now(), msg) == nil {
			sent += uint64(len(msg))
		}
		net.RunFor(20 * time.Microsecond)
	}
	for limit := net.Now().Add(time.Second); net.Now().Before(limit); net.RunFor(time.Millisecond) {
		done := true
		for i := 1; i < n; i++ {
			done = done && got[i] == sent
		}
		if done {
			break
		}
	}
	res.cpu = time.Since(t0)
	res.bytes = sent
	for i := 1; i < n; i++ {
		res.bytes = min(res.bytes, got[i])
	}
	if res.bytes != sent {
		tb.Fatalf("%s MTU %d: the slowest receiver has %d of %d bytes", lvl, mtu, res.bytes, sent)
	}
	return res
}

// BenchmarkLevelsSim is BenchmarkLevels's goodput run in the simulator:
// the cores' own cost per megabyte delivered (ns/op is per run of
// 50 ms of virtual sending) and the frames per Data frame of the
// sender, per level, side by side, at 1 and 3 receivers. No root, no
// netns: for profiling the cores (-cpuprofile) while the kernel's share
// is left out.
func BenchmarkLevelsSim(b *testing.B) {
	for _, rx := range []int{1, 3} {
		for _, mtu := range []int{1500, 9000} {
			for _, lvl := range []string{"registered", "fifo", "agreed", "safe"} {
				b.Run(fmt.Sprintf("rx=%d/mtu=%d/%s", rx, mtu, lvl), func(b *testing.B) {
					var r levelSimResult
					var mb float64
					var cpu time.Duration
					for b.Loop() {
						r = levelSim(b, lvl, rx, mtu, 50*time.Millisecond)
						mb += float64(r.bytes) / 1e6
						cpu += r.cpu
					}
					b.ReportMetric(float64(cpu.Microseconds())/mb, "µs/MB")
					for t, k := range r.frames {
						b.ReportMetric(float64(k)/float64(r.data), t+"/data")
					}
					b.ReportMetric(float64(r.turns)/float64(r.data), "turns/data")
				})
			}
		}
	}
}

// TestLevelsSimSafeAcks: a Safe stream of one sender to three receivers
// costs no more Ack frames per Data frame than FIFO's (0.023: each
// receiver acknowledges half a window of receipts), not 0.19 (each asked
// every 16th frame), at both MTUs: every Ack wakes every member's loop,
// and on a netns segment those were a third of the CPU Safe spent over
// Agreed.
func TestLevelsSimSafeAcks(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		per := map[string]float64{}
		for _, lvl := range []string{"fifo", "safe"} {
			r := levelSim(t, lvl, 3, mtu, 20*time.Millisecond)
			per[lvl] = float64(r.frames[frame.Ack.String()]) / float64(r.data)
		}
		t.Logf("MTU %d: Acks per Data frame: fifo %.4f, safe %.4f", mtu, per["fifo"], per["safe"])
		if per["safe"] > per["fifo"]+0.01 {
			t.Errorf("MTU %d: safe sends %.4f Acks per Data frame, fifo %.4f: want at most fifo's + 0.01", mtu, per["safe"], per["fifo"])
		}
	}
}
