package testnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

var broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// makeFrame builds an Ethernet frame of size bytes carrying seq right after
// the header.
func makeFrame(dst [6]byte, src *Endpoint, seq uint32, size int) []byte {
	b := make([]byte, size)
	copy(b[0:6], dst[:])
	copy(b[6:12], src.mac[:])
	binary.BigEndian.PutUint16(b[12:14], link.EtherTypeRbcast)
	binary.BigEndian.PutUint32(b[14:18], seq)
	for i := 18; i < size; i++ {
		b[i] = byte(seq) + byte(i)
	}
	return b
}

func seqOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[14:18]) }

func newNet(t testing.TB, seed uint64, cfg Config) *Network {
	t.Helper()
	n, err := New(seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func attach(t testing.TB, n *Network, cfg EndpointConfig) *Endpoint {
	t.Helper()
	e, err := n.Attach(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func send(t testing.TB, e *Endpoint, frames ...[]byte) {
	t.Helper()
	if k, err := e.Send(frames); err != nil || k != len(frames) {
		t.Fatalf("Send: %d of %d, %v", k, len(frames), err)
	}
}

// drain returns copies of every frame queued at e.
func drain(t testing.TB, e *Endpoint) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]link.Frame, 16)
	for {
		k, err := e.Recv(time.Time{}, buf)
		if k == 0 {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Recv: %v", err)
			}
			return out
		}
		for _, f := range buf[:k] {
			out = append(out, bytes.Clone(f.Data))
		}
	}
}

// oneWay sends count frames from a to b, spaced by gap, with b's In
// impairment im, and returns the sequence numbers b received, in order.
func oneWay(t *testing.T, seed uint64, im Impairment, count int, gap time.Duration) []uint32 {
	t.Helper()
	n := newNet(t, seed, Config{Bandwidth: Unlimited})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{In: im, QueueLen: count * 2})
	frame := makeFrame(b.mac, a, 0, 64)
	for i := range count {
		binary.BigEndian.PutUint32(frame[14:], uint32(i))
		send(t, a, frame)
		n.RunFor(gap)
	}
	n.RunFor(time.Second)
	var seqs []uint32
	for _, f := range drain(t, b) {
		seqs = append(seqs, seqOf(f))
	}
	return seqs
}

func TestDeliveryBytesAndTime(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	frame := makeFrame(broadcast, a, 7, 1514)
	sent := bytes.Clone(frame)
	t0 := n.Now()
	send(t, a, frame)
	frame[20] ^= 0xff // the caller may reuse its buffer at once
	n.RunFor(time.Millisecond)

	buf := make([]link.Frame, 4)
	k, err := b.Recv(time.Time{}, buf)
	if err != nil || k != 1 {
		t.Fatalf("Recv = %d, %v; want 1 frame", k, err)
	}
	if !bytes.Equal(buf[0].Data, sent) {
		t.Fatalf("received bytes differ from sent bytes")
	}
	// Switch at 1 Gbit/s: uplink and switch port each carry 1514+4 FCS+20
	// preamble/IFG bytes at 8 ns/byte, then 50µs latency.
	want := t0.Add(2*1538*8*time.Nanosecond + DefaultLatency)
	if !buf[0].Time.Equal(want) {
		t.Fatalf("arrival at %v, want %v", buf[0].Time.Sub(t0), want.Sub(t0))
	}
	if _, err := a.Recv(time.Time{}, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("sender got its own frame back: %v", err)
	}
	sa, _ := a.Stats()
	sb, _ := b.Stats()
	if sa.FramesSent != 1 || sa.BytesSent != 1514 || sb.FramesReceived != 1 || sb.BytesReceived != 1514 || sb.KernelPackets != 1 {
		t.Fatalf("stats: sender %+v receiver %+v", sa, sb)
	}
}

func TestSharedBusSerializes(t *testing.T) {
	n := newNet(t, 1, Config{Medium: SharedBus, Latency: time.Microsecond})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	c := attach(t, n, EndpointConfig{})
	t0 := n.Now()
	send(t, a, makeFrame(c.mac, a, 1, 1000))
	send(t, b, makeFrame(c.mac, b, 2, 1000))
	n.RunFor(time.Millisecond)
	buf := make([]link.Frame, 4)
	k, _ := c.Recv(time.Time{}, buf)
	if k != 2 {
		t.Fatalf("got %d frames, want 2", k)
	}
	ser := time.Duration(1000+4+20) * 8 // frame+FCS+preamble+IFG, 8 ns per byte at 1 Gbit/s
	if got, want := buf[1].Time.Sub(t0), 2*ser+time.Microsecond; got != want {
		t.Fatalf("second frame on a shared bus arrives after %v, want %v (after the first one's wire time)", got, want)
	}
}

func TestRecvEmptyReturnsAtOnce(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	k, err := a.Recv(time.Time{}, make([]link.Frame, 1))
	if k != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv on empty queue = %d, %v; want 0 and os.ErrDeadlineExceeded", k, err)
	}
	if !strings.Contains(err.Error(), "virtual time") {
		t.Fatalf("error %q does not explain that time is virtual", err)
	}
}

func TestFrameTooLarge(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{MTU: 1500})
	attach(t, n, EndpointConfig{})
	ok := makeFrame(broadcast, a, 0, 1514)
	big := makeFrame(broadcast, a, 1, 1515)
	k, err := a.Send([][]byte{ok, big})
	if k != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Send = %d, %v; want 1 and ErrFrameTooLarge", k, err)
	}
	want := "send testnet endpoint 0 (02:00:00:00:00:01): frame 1 is 1515 bytes, more than 1514 (14-byte header + MTU 1500): frame larger than link MTU"
	if err.Error() != want {
		t.Fatalf("error text\n got %q\nwant %q", err, want)
	}
	if _, err := a.Send([][]byte{make([]byte, 10)}); err == nil || !strings.Contains(err.Error(), "shorter than the 14-byte Ethernet header") {
		t.Fatalf("short frame: %v", err)
	}

	jumbo := attach(t, n, EndpointConfig{MTU: 9000})
	send(t, jumbo, makeFrame(broadcast, jumbo, 0, 9014))
	if _, err := jumbo.Send([][]byte{makeFrame(broadcast, jumbo, 0, 9015)}); !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("jumbo: %v", err)
	}
	huge := attach(t, n, EndpointConfig{MTU: MaxMTU})
	send(t, huge, makeFrame(broadcast, huge, 0, 14+MaxMTU))
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Latency: -1}, "Config.Latency is -1ns"},
		{Config{Bandwidth: -5}, "Config.Bandwidth is -5"},
		{Config{Medium: 9}, "Config.Medium is Medium(9)"},
	} {
		if _, err := New(1, tc.cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	n := newNet(t, 1, Config{})
	for _, tc := range []struct {
		cfg  EndpointConfig
		want string
	}{
		{EndpointConfig{MTU: 100}, "endpoint 0: MTU is 100, want 576..65535"},
		{EndpointConfig{MTU: 70000}, "MTU is 70000"},
		{EndpointConfig{QueueLen: -1}, "QueueLen is -1"},
		{EndpointConfig{MAC: net.HardwareAddr{1, 2, 3}}, "has 3 bytes"},
		{EndpointConfig{MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}}, "is a multicast address"},
		{EndpointConfig{In: Impairment{Loss: 1.5}}, "endpoint 0, In: Loss is 1.5, want a probability in [0, 1]"},
		{EndpointConfig{Out: Impairment{Burst: GilbertElliott{GoodToBad: -0.1}}}, "endpoint 0, Out: Burst.GoodToBad is -0.1"},
		{EndpointConfig{In: Impairment{Reorder: 0.1}}, "ReorderDelay is 0"},
		{EndpointConfig{In: Impairment{Jitter: -1}}, "Jitter is -1ns"},
		{EndpointConfig{In: Impairment{Burst: GilbertElliott{GoodToBad: 0.1, LossBad: 1}}}, "first burst would never end"},
	} {
		if _, err := n.Attach(tc.cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Attach(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	a := attach(t, n, EndpointConfig{})
	if _, err := n.Attach(EndpointConfig{MAC: a.HardwareAddr()}); err == nil || !strings.Contains(err.Error(), "already used by endpoint 0") {
		t.Errorf("duplicate MAC: %v", err)
	}
	if err := a.SetImpairment(Out, Impairment{Duplicate: 2}); err == nil || !strings.Contains(err.Error(), "Duplicate is 2") {
		t.Errorf("SetImpairment: %v", err)
	}
	if err := a.JoinMulticast(a.HardwareAddr()); err == nil || !strings.Contains(err.Error(), "group bit") {
		t.Errorf("JoinMulticast(unicast): %v", err)
	}
	if err := n.Partition([]*Endpoint{a}, []*Endpoint{a}); err == nil || !strings.Contains(err.Error(), "endpoint 0 is in group 0 and group 1") {
		t.Errorf("Partition: %v", err)
	}
	other := newNet(t, 1, Config{})
	stranger := attach(t, other, EndpointConfig{})
	if err := n.Partition([]*Endpoint{stranger}); err == nil || !strings.Contains(err.Error(), "not attached to this network") {
		t.Errorf("Partition: %v", err)
	}
}

func TestAddressing(t *testing.T) {
	n := newNet(t, 1, Config{})
	var es []*Endpoint
	for range 4 {
		es = append(es, attach(t, n, EndpointConfig{}))
	}
	group := net.HardwareAddr{0x01, 0x00, 0x5e, 0x72, 0x62, 0x01}
	for _, e := range es[2:] {
		if err := e.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
	a := es[0]
	send(t, a, makeFrame(broadcast, a, 1, 100))
	send(t, a, makeFrame(es[1].mac, a, 2, 100))
	send(t, a, makeFrame([6]byte(group), a, 3, 100))
	send(t, a, makeFrame([6]byte{0x01, 0, 0x5e, 0, 0, 9}, a, 4, 100)) // nobody joined
	n.RunFor(time.Millisecond)
	want := [][]uint32{nil, {1, 2}, {1, 3}, {1, 3}}
	for i, e := range es {
		var got []uint32
		for _, f := range drain(t, e) {
			got = append(got, seqOf(f))
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("endpoint %d got %v, want %v", i, got, want[i])
		}
	}
	if err := es[3].LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	send(t, a, makeFrame([6]byte(group), a, 5, 100))
	n.RunFor(time.Millisecond)
	if got := len(drain(t, es[2])); got != 1 {
		t.Errorf("member got %d frames after a peer left, want 1", got)
	}
	if got := len(drain(t, es[3])); got != 0 {
		t.Errorf("endpoint that left the group got %d frames", got)
	}
}

func TestQueueOverflow(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{QueueLen: 16})
	var frames [][]byte
	for i := range 100 {
		frames = append(frames, makeFrame(broadcast, a, uint32(i), 200))
	}
	send(t, a, frames...)
	n.RunFor(time.Second)
	st, _ := b.Stats()
	if st.KernelPackets != 16 || st.KernelDrops != 84 || b.Counters(In).Overflow != 84 {
		t.Fatalf("queue of 16 after 100 frames: packets %d drops %d overflow %d; want 16, 84, 84", st.KernelPackets, st.KernelDrops, b.Counters(In).Overflow)
	}
	got := drain(t, b)
	if len(got) != 16 {
		t.Fatalf("drained %d frames, want 16", len(got))
	}
	for i, f := range got {
		if !bytes.Equal(f, frames[i]) {
			t.Fatalf("frame %d differs from the %d-th sent", i, i)
		}
	}
}

func TestLossRate(t *testing.T) {
	const count = 50000
	for _, p := range []float64{0.01, 0.1, 0.5} {
		got := len(oneWay(t, 3, Impairment{Loss: p}, count, time.Microsecond))
		rate := 1 - float64(got)/count
		if rate < p*0.9-0.002 || rate > p*1.1+0.002 {
			t.Errorf("Loss %v: measured %v over %d frames", p, rate, count)
		}
	}
}

func TestOutLossIsSharedByAllReceivers(t *testing.T) {
	n := newNet(t, 5, Config{})
	a := attach(t, n, EndpointConfig{Out: Impairment{Loss: 0.3}})
	b := attach(t, n, EndpointConfig{QueueLen: 2000})
	c := attach(t, n, EndpointConfig{QueueLen: 2000})
	for i := range 1000 {
		send(t, a, makeFrame(broadcast, a, uint32(i), 64))
		n.RunFor(10 * time.Microsecond)
	}
	n.RunFor(time.Second)
	gb, gc := drain(t, b), drain(t, c)
	if len(gb) != len(gc) || len(gb) > 800 || len(gb) < 600 {
		t.Fatalf("receivers got %d and %d of 1000 frames; want the same number, about 700", len(gb), len(gc))
	}
	for i := range gb {
		if !bytes.Equal(gb[i], gc[i]) {
			t.Fatalf("frame %d differs between receivers", i)
		}
	}
	if lost := a.Counters(Out).Lost; lost != uint64(1000-len(gb)) {
		t.Fatalf("Out.Lost = %d, want %d", lost, 1000-len(gb))
	}
}

func TestGilbertElliottBurstLength(t *testing.T) {
	const count = 200000
	ge := GilbertElliott{GoodToBad: 0.01, BadToGood: 0.25, LossBad: 1}
	seqs := oneWay(t, 11, Impairment{Burst: ge}, count, time.Microsecond)
	// Runs of consecutive missing sequence numbers are the bursts.
	var bursts, lost int
	next := uint32(0)
	for _, s := range seqs {
		if s != next {
			bursts++
			lost += int(s - next)
		}
		next = s + 1
	}
	if next != count {
		bursts++
		lost += int(count - next)
	}
	mean := float64(lost) / float64(bursts)
	if mean < 3.6 || mean > 4.4 {
		t.Errorf("mean burst length %.2f over %d bursts, want about 1/BadToGood = 4", mean, bursts)
	}
	// Stationary share of the bad state: g/(g+b) = 0.01/0.26.
	rate := float64(lost) / count
	if want := 0.01 / 0.26; rate < want*0.85 || rate > want*1.15 {
		t.Errorf("loss rate %.4f, want about %.4f", rate, want)
	}
	t.Logf("Gilbert–Elliott: %d bursts, mean length %.2f, loss rate %.4f", bursts, mean, rate)
}

func TestDuplicate(t *testing.T) {
	const count = 20000
	seqs := oneWay(t, 4, Impairment{Duplicate: 0.2}, count, time.Microsecond)
	dups := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] == seqs[i-1] {
			dups++
		}
	}
	if dups != len(seqs)-count {
		t.Fatalf("%d extra frames but %d adjacent duplicates", len(seqs)-count, dups)
	}
	if rate := float64(dups) / count; rate < 0.18 || rate > 0.22 {
		t.Fatalf("duplication rate %.3f, want about 0.2", rate)
	}
}

func TestReorder(t *testing.T) {
	const count = 10000
	im := Impairment{Reorder: 0.05, ReorderDelay: 50 * time.Microsecond}
	seqs := oneWay(t, 6, im, count, 10*time.Microsecond)
	if len(seqs) != count {
		t.Fatalf("got %d frames, want all %d", len(seqs), count)
	}
	inversions := 0
	seen := make([]bool, count)
	for i, s := range seqs {
		seen[s] = true
		if i > 0 && s < seqs[i-1] {
			inversions++
		}
	}
	for s, ok := range seen {
		if !ok {
			t.Fatalf("frame %d missing", s)
		}
	}
	// Each held-back frame lands after the ~5 frames sent in the next 50µs.
	if rate := float64(inversions) / count; rate < 0.04 || rate > 0.06 {
		t.Fatalf("%d frames arrived after a later one (%.3f), want about 5%%", inversions, rate)
	}
}

func TestJitterBounds(t *testing.T) {
	const jitter = 100 * time.Microsecond
	n := newNet(t, 8, Config{Bandwidth: Unlimited, Latency: 20 * time.Microsecond})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{In: Impairment{Jitter: jitter}, QueueLen: 10000})
	sentAt := make([]time.Time, 5000)
	for i := range sentAt {
		sentAt[i] = n.Now()
		send(t, a, makeFrame(broadcast, a, uint32(i), 64))
		n.RunFor(7 * time.Microsecond)
	}
	n.RunFor(time.Second)
	buf := make([]link.Frame, 64)
	lo, hi := time.Hour, time.Duration(0)
	got, inversions := 0, 0
	last := -1
	for {
		k, _ := b.Recv(time.Time{}, buf)
		if k == 0 {
			break
		}
		for _, f := range buf[:k] {
			s := int(seqOf(f.Data))
			d := f.Time.Sub(sentAt[s]) - 20*time.Microsecond
			lo, hi = min(lo, d), max(hi, d)
			if s < last {
				inversions++
			}
			last = s
			got++
		}
	}
	if got != len(sentAt) {
		t.Fatalf("got %d frames, want %d", got, len(sentAt))
	}
	if lo < 0 || hi > jitter {
		t.Fatalf("extra delay in [%v, %v], want within [0, %v]", lo, hi, jitter)
	}
	if lo > jitter/20 || hi < jitter*19/20 {
		t.Fatalf("extra delay in [%v, %v] does not span [0, %v]", lo, hi, jitter)
	}
	if inversions == 0 {
		t.Fatalf("jitter of %v over frames %v apart reordered nothing", jitter, 7*time.Microsecond)
	}
}

func TestCorrupt(t *testing.T) {
	n := newNet(t, 9, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{In: Impairment{Corrupt: 1}})
	c := attach(t, n, EndpointConfig{})
	sent := makeFrame(broadcast, a, 1, 300)
	send(t, a, sent)
	n.RunFor(time.Millisecond)
	gb, gc := drain(t, b), drain(t, c)
	if len(gb) != 1 || len(gc) != 1 {
		t.Fatalf("got %d and %d frames, want 1 each", len(gb), len(gc))
	}
	if !bytes.Equal(gc[0], sent) {
		t.Fatalf("corruption at one receiver leaked into another's copy")
	}
	diff := 0
	for i := range sent {
		if gb[0][i] != sent[i] {
			diff++
			if i < link.EthernetHeaderLen {
				t.Fatalf("byte %d of the Ethernet header was corrupted", i)
			}
		}
	}
	if diff != 1 || b.Counters(In).Corrupted != 1 {
		t.Fatalf("%d bytes differ, Corrupted = %d; want 1 and 1", diff, b.Counters(In).Corrupted)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	n := newNet(t, 1, Config{})
	var es []*Endpoint
	for range 5 {
		es = append(es, attach(t, n, EndpointConfig{}))
	}
	a, b, c, d, rest := es[0], es[1], es[2], es[3], es[4]
	if err := n.Partition([]*Endpoint{a, b}, []*Endpoint{c, d}); err != nil {
		t.Fatal(err)
	}
	send(t, a, makeFrame(broadcast, a, 1, 64))
	send(t, c, makeFrame(broadcast, c, 2, 64))
	send(t, rest, makeFrame(broadcast, rest, 3, 64))
	n.RunFor(time.Millisecond)
	want := map[*Endpoint][]uint32{a: nil, b: {1}, c: nil, d: {2}, rest: nil}
	for _, e := range es {
		var got []uint32
		for _, f := range drain(t, e) {
			got = append(got, seqOf(f))
		}
		if !slices.Equal(got, want[e]) {
			t.Errorf("partitioned: endpoint %d got %v, want %v", e.index, got, want[e])
		}
	}
	if got := b.Counters(In).Partitioned; got != 2 {
		t.Errorf("b counted %d partition drops, want 2 (from c and the unnamed endpoint)", got)
	}

	// A frame in flight when the partition forms is cut off too.
	n.Heal()
	send(t, a, makeFrame(broadcast, a, 4, 64))
	if err := n.Partition([]*Endpoint{a}); err != nil {
		t.Fatal(err)
	}
	n.RunFor(time.Millisecond)
	for _, e := range es[1:] {
		if got := len(drain(t, e)); got != 0 {
			t.Errorf("endpoint %d got %d frames sent just before the partition", e.index, got)
		}
	}

	n.Heal()
	send(t, a, makeFrame(broadcast, a, 5, 64))
	n.RunFor(time.Millisecond)
	for _, e := range es[1:] {
		if got := drain(t, e); len(got) != 1 || seqOf(got[0]) != 5 {
			t.Errorf("after Heal endpoint %d got %d frames, want frame 5", e.index, len(got))
		}
	}
}

func TestDeafen(t *testing.T) {
	n := newNet(t, 1, Config{})
	a, b, c := attach(t, n, EndpointConfig{}), attach(t, n, EndpointConfig{}), attach(t, n, EndpointConfig{})
	b.Deafen(a, true)
	send(t, a, makeFrame(broadcast, a, 1, 64))
	send(t, b, makeFrame(broadcast, b, 2, 64))
	n.RunFor(time.Millisecond)
	got := map[*Endpoint][]uint32{}
	for _, e := range []*Endpoint{a, b, c} {
		for _, f := range drain(t, e) {
			got[e] = append(got[e], seqOf(f))
		}
	}
	if !slices.Equal(got[a], []uint32{2}) || len(got[b]) != 0 || !slices.Equal(got[c], []uint32{1, 2}) {
		t.Fatalf("b deaf to a: a got %v, b %v, c %v; want [2], [], [1 2]", got[a], got[b], got[c])
	}
	if d := b.Counters(In).Partitioned; d != 1 {
		t.Errorf("b counted %d partition drops, want 1", d)
	}
	b.Deafen(a, false)
	send(t, a, makeFrame(broadcast, a, 3, 64))
	n.RunFor(time.Millisecond)
	if f := drain(t, b); len(f) != 1 || seqOf(f[0]) != 3 {
		t.Fatalf("b heard %d frames after Deafen(a, false), want frame 3", len(f))
	}
}

func TestCrashRestart(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	send(t, a, makeFrame(broadcast, a, 1, 64), makeFrame(broadcast, a, 2, 64))
	n.RunFor(time.Millisecond)
	if b.Queued() != 2 {
		t.Fatalf("queued %d, want 2", b.Queued())
	}
	send(t, a, makeFrame(broadcast, a, 3, 64)) // in flight at the crash
	b.Crash()
	send(t, a, makeFrame(broadcast, a, 4, 64)) // sent to a crashed host
	n.RunFor(time.Millisecond)
	if _, err := b.Recv(time.Time{}, make([]link.Frame, 4)); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Recv on crashed endpoint: %v", err)
	}
	if _, err := b.Send([][]byte{makeFrame(broadcast, b, 9, 64)}); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Send on crashed endpoint: %v", err)
	}
	if got := b.Counters(In).Crashed; got != 4 {
		t.Fatalf("Crashed drops = %d, want 4 (2 queued, 1 in flight, 1 sent while down)", got)
	}
	if got := len(drain(t, a)); got != 0 {
		t.Fatalf("a got %d frames from a crashed b", got)
	}
	b.Restart()
	send(t, a, makeFrame(broadcast, a, 5, 64))
	n.RunFor(time.Millisecond)
	if got := drain(t, b); len(got) != 1 || seqOf(got[0]) != 5 {
		t.Fatalf("after Restart got %d frames, want frame 5 only", len(got))
	}
	send(t, b, makeFrame(broadcast, b, 6, 64))
	n.RunFor(time.Millisecond)
	if got := len(drain(t, a)); got != 1 {
		t.Fatalf("a got %d frames from the restarted b, want 1", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if _, err := b.Recv(time.Time{}, nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
}

// TestCrashKeepsLentFrames: frames a Recv returned stay valid across a
// Crash of the endpoint, until its next Recv. Under rtnet another
// goroutine crashes a host while its member still steps the frames its
// last Recv returned; a Crash that put them back in the pool had the next
// Send overwrite them (a data race CI's -race run caught in
// reliable.TestMemberFailureReported).
func TestCrashKeepsLentFrames(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	want := makeFrame(broadcast, a, 1, 64)
	send(t, a, want)
	n.RunFor(time.Millisecond)
	frames := make([]link.Frame, 1)
	if k, err := b.Recv(time.Time{}, frames); k != 1 {
		t.Fatalf("Recv: %d frames, %v", k, err)
	}
	b.Crash()
	// Same size class: from the pool, a recycled packet would be b's.
	send(t, a, makeFrame(broadcast, a, 2, 64), makeFrame(broadcast, a, 3, 64))
	if !bytes.Equal(frames[0].Data, want) {
		t.Fatalf("the frame Recv returned changed after Crash: seq %d, want 1", seqOf(frames[0].Data))
	}
	b.Restart()
	if _, err := b.Recv(time.Time{}, frames); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv after Restart: %v, want nothing queued", err)
	}
}

// TestStreamsPerEndpoint checks that attaching another endpoint leaves the
// random choices of the existing ones alone.
func TestStreamsPerEndpoint(t *testing.T) {
	fixed := func(extra bool) []uint32 {
		n := newNet(t, 77, Config{})
		a := attach(t, n, EndpointConfig{})
		b := attach(t, n, EndpointConfig{In: Impairment{Loss: 0.5}, QueueLen: 1000})
		if extra {
			c := attach(t, n, EndpointConfig{In: Impairment{Loss: 0.5}})
			_ = c.JoinMulticast(net.HardwareAddr{1, 0, 0, 0, 0, 1})
		}
		for i := range 500 {
			send(t, a, makeFrame(broadcast, a, uint32(i), 64))
		}
		n.RunFor(time.Second)
		var s []uint32
		for _, f := range drain(t, b) {
			s = append(s, seqOf(f))
		}
		return s
	}
	if !slices.Equal(fixed(false), fixed(true)) {
		t.Fatal("attaching a third endpoint changed which frames the second one lost")
	}
}

func TestTimers(t *testing.T) {
	n := newNet(t, 1, Config{})
	var order []int
	t0 := n.Now()
	n.AfterFunc(2*time.Millisecond, func() { order = append(order, 3) })
	n.At(t0.Add(time.Millisecond), func() { order = append(order, 1) })
	n.At(t0.Add(time.Millisecond), func() { order = append(order, 2) }) // same instant: scheduling order
	stopped := n.AfterFunc(time.Millisecond, func() { order = append(order, 99) })
	n.AfterFunc(-time.Second, func() { order = append(order, 0) }) // past: now
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	n.RunUntil(t0.Add(time.Millisecond))
	if !slices.Equal(order, []int{0, 1, 2}) || !n.Now().Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("order %v at %v", order, n.Now().Sub(t0))
	}
	for n.Step() {
	}
	if !slices.Equal(order, []int{0, 1, 2, 3}) || !n.Now().Equal(t0.Add(2*time.Millisecond)) {
		t.Fatalf("order %v at %v", order, n.Now().Sub(t0))
	}
	if !n.Now().Equal(DefaultStart.Add(2 * time.Millisecond)) {
		t.Fatalf("virtual epoch %v, want %v", t0, DefaultStart)
	}
}

func TestBindStepsOnArrivalAndDeadline(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	t0 := n.Now()
	var steps []time.Duration
	var got int
	buf := make([]link.Frame, 8)
	b.Bind(NodeFunc(func(now time.Time) time.Time {
		steps = append(steps, now.Sub(t0))
		for {
			k, _ := b.Recv(time.Time{}, buf)
			if k == 0 {
				break
			}
			got += k
		}
		if now.Sub(t0) < 3*time.Millisecond {
			return t0.Add(3 * time.Millisecond)
		}
		return time.Time{}
	}))
	arrivals := 0
	b.OnReceive(func() { arrivals++ })
	// Two frames landing at the same instant wake the node once.
	n.AfterFunc(time.Millisecond, func() {
		send(t, a, makeFrame(broadcast, a, 1, 64))
		if err := n.Partition(); err != nil { // no-op partition: everyone together
			t.Error(err)
		}
	})
	n.RunFor(10 * time.Millisecond)
	if got != 1 || arrivals != 1 {
		t.Fatalf("node received %d frames, hook saw %d; want 1, 1", got, arrivals)
	}
	arrival := time.Millisecond + 2*time.Duration((64+4+20)*8) + DefaultLatency
	want := []time.Duration{0, arrival, 3 * time.Millisecond}
	if len(steps) != len(want) {
		t.Fatalf("steps at %v, want %v", steps, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Fatalf("steps at %v, want %v", steps, want)
		}
	}
	// A crashed endpoint's node is not stepped; Restart steps it at once.
	b.Crash()
	send(t, a, makeFrame(broadcast, a, 2, 64))
	n.RunFor(time.Millisecond)
	if len(steps) != 3 {
		t.Fatalf("crashed node stepped: %v", steps)
	}
	b.Restart()
	n.RunFor(time.Millisecond)
	if len(steps) != 4 || got != 1 {
		t.Fatalf("after Restart steps %v, got %d", steps, got)
	}
}

// chatter is a busy traffic generator for the determinism test: at seeded
// intervals it sends bursts of broadcast, multicast and unicast frames of
// seeded sizes, and drains its queue.
type chatter struct {
	e      *Endpoint
	peers  []*Endpoint
	rng    *rand.Rand
	seq    uint32
	frames []link.Frame
	out    [][]byte
	got    int
	stopAt time.Time
	err    error
	bufs   [4][]byte
	// slow > 0 makes the node read (and send) only every slow.
	slow     time.Duration
	nextRead time.Time
}

var chatGroup = [6]byte{0x01, 0x00, 0x5e, 0x72, 0x62, 0x00}

func (c *chatter) Step(now time.Time) time.Time {
	if c.slow > 0 {
		// A slow reader lets its queue overflow between reads.
		if now.Before(c.nextRead) {
			return c.nextRead
		}
		c.nextRead = now.Add(c.slow)
	}
	for {
		k, _ := c.e.Recv(time.Time{}, c.frames)
		if k == 0 {
			break
		}
		c.got += k
	}
	if !now.Before(c.stopAt) {
		return time.Time{}
	}
	c.out = c.out[:0]
	for i := range 1 + c.rng.IntN(4) {
		dst := broadcast
		switch c.rng.IntN(4) {
		case 0:
			dst = chatGroup
		case 1:
			dst = c.peers[c.rng.IntN(len(c.peers))].mac
		}
		c.seq++
		// Reuse the node's buffers, as a runtime would; Send copies.
		f := c.bufs[i][:60+c.rng.IntN(1455)]
		copy(f[0:6], dst[:])
		binary.BigEndian.PutUint32(f[14:18], c.seq)
		c.out = append(c.out, f)
	}
	if _, err := c.e.Send(c.out); err != nil && c.err == nil {
		c.err = err
	}
	return now.Add(time.Duration(5+c.rng.IntN(45)) * time.Microsecond)
}

// busyScenario runs 8 chattering nodes for 20ms of virtual time with every
// impairment, a partition and a crash, and returns the trace hash.
func busyScenario(t testing.TB, seed uint64) (*TraceHash, int) {
	n := newNet(t, seed, Config{})
	h := NewTraceHash()
	n.Trace(h.Add)
	im := Impairment{
		Loss:         0.01,
		Burst:        GilbertElliott{GoodToBad: 0.005, BadToGood: 0.3, LossBad: 0.9},
		Corrupt:      0.002,
		Duplicate:    0.01,
		Reorder:      0.02,
		ReorderDelay: 30 * time.Microsecond,
		Jitter:       5 * time.Microsecond,
	}
	var es []*Endpoint
	for range 8 {
		es = append(es, attach(t, n, EndpointConfig{In: im, Out: im, QueueLen: 64}))
	}
	var nodes []*chatter
	start := n.Now()
	for i, e := range es {
		if i%2 == 0 {
			_ = e.JoinMulticast(net.HardwareAddr(chatGroup[:]))
		}
		c := &chatter{e: e, peers: es, rng: rand.New(rand.NewPCG(seed, uint64(i))), frames: make([]link.Frame, 32), stopAt: start.Add(20 * time.Millisecond)}
		for j := range c.bufs {
			c.bufs[j] = makeFrame(broadcast, e, 0, 1514)
		}
		nodes = append(nodes, c)
		if i == 7 {
			c.slow = time.Millisecond
		}
		e.Bind(c)
	}
	n.AfterFunc(4*time.Millisecond, func() { _ = n.Partition(es[:3], es[3:]) })
	n.AfterFunc(8*time.Millisecond, n.Heal)
	n.AfterFunc(10*time.Millisecond, es[5].Crash)
	n.AfterFunc(14*time.Millisecond, es[5].Restart)
	n.RunFor(25 * time.Millisecond)
	got := 0
	var in, out Counters
	for _, c := range nodes {
		add(&in, c.e.Counters(In))
		add(&out, c.e.Counters(Out))
		got += c.got
		if c.err != nil && !errors.Is(c.err, ErrCrashed) {
			t.Fatalf("node %d: %v", c.e.index, c.err)
		}
	}
	// Every impairment must have fired, or the scenario does not test it.
	for _, c := range []struct {
		name string
		v    uint64
	}{
		{"In.Lost", in.Lost}, {"In.BurstLost", in.BurstLost}, {"In.Overflow", in.Overflow},
		{"In.Partitioned", in.Partitioned}, {"In.Crashed", in.Crashed}, {"In.Duplicated", in.Duplicated},
		{"In.Corrupted", in.Corrupted}, {"In.Reordered", in.Reordered},
		{"Out.Lost", out.Lost}, {"Out.BurstLost", out.BurstLost}, {"Out.Duplicated", out.Duplicated},
		{"Out.Corrupted", out.Corrupted}, {"Out.Reordered", out.Reordered},
	} {
		if c.v == 0 {
			t.Errorf("seed %d: %s is 0; in: %v; out: %v", seed, c.name, in, out)
		}
	}
	return h, got
}

func add(sum *Counters, c Counters) {
	sum.Lost += c.Lost
	sum.BurstLost += c.BurstLost
	sum.Overflow += c.Overflow
	sum.Partitioned += c.Partitioned
	sum.Crashed += c.Crashed
	sum.Duplicated += c.Duplicated
	sum.Corrupted += c.Corrupted
	sum.Reordered += c.Reordered
}

func TestDeterminism(t *testing.T) {
	h1, got1 := busyScenario(t, 42)
	h2, got2 := busyScenario(t, 42)
	h3, _ := busyScenario(t, 43)
	t.Logf("seed 42: %d events, %d frames received, hash %016x; seed 43: hash %016x", h1.Events(), got1, h1.Sum(), h3.Sum())
	if h1.Events() < 50000 {
		t.Fatalf("scenario too quiet: %d events", h1.Events())
	}
	if h1.Sum() != h2.Sum() || h1.Events() != h2.Events() || got1 != got2 {
		t.Fatalf("same seed, different runs: %016x/%d vs %016x/%d", h1.Sum(), h1.Events(), h2.Sum(), h2.Events())
	}
	if h1.Sum() == h3.Sum() {
		t.Fatal("different seeds gave the same trace")
	}
}

func TestTraceEvents(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{QueueLen: 1})
	var evs []string
	n.Trace(func(ev Event) { evs = append(evs, ev.Kind.String()+"/"+ev.Reason.String()) })
	send(t, a, makeFrame(broadcast, a, 1, 64), makeFrame(broadcast, a, 2, 64))
	n.RunFor(time.Millisecond)
	want := "send/none send/none deliver/none drop/overflow"
	if got := strings.Join(evs, " "); got != want {
		t.Fatalf("trace %q, want %q", got, want)
	}
	_ = b
}

// TestAllocsPerFrame measures steady-state allocations of one broadcast to
// 3 receivers: Send, delivery through the event queue, and Recv.
func TestAllocsPerFrame(t *testing.T) {
	n := newNet(t, 1, Config{})
	im := Impairment{Loss: 0.01, Duplicate: 0.01, Jitter: time.Microsecond, Corrupt: 0.01}
	a := attach(t, n, EndpointConfig{Out: im})
	var rs []*Endpoint
	for range 3 {
		rs = append(rs, attach(t, n, EndpointConfig{In: im}))
	}
	frame := [][]byte{makeFrame(broadcast, a, 1, 1000)}
	buf := make([]link.Frame, 8)
	cycle := func() {
		if _, err := a.Send(frame); err != nil {
			t.Fatal(err)
		}
		n.RunFor(100 * time.Microsecond)
		for _, r := range rs {
			for {
				if k, _ := r.Recv(time.Time{}, buf); k == 0 {
					break
				}
			}
		}
	}
	for range 100 {
		cycle()
	}
	allocs := testing.AllocsPerRun(1000, cycle)
	t.Logf("allocations per broadcast frame (send, 3 deliveries, 3 Recv): %v", allocs)
	if allocs != 0 {
		t.Fatalf("%v allocations per frame in steady state, want 0", allocs)
	}
}

func BenchmarkBroadcast(b *testing.B) {
	for _, nodes := range []int{2, 8} {
		b.Run(fmt.Sprintf("%dnodes", nodes), func(b *testing.B) {
			n := newNet(b, 1, Config{})
			var es []*Endpoint
			for range nodes {
				es = append(es, attach(b, n, EndpointConfig{QueueLen: 1024}))
			}
			frame := [][]byte{makeFrame(broadcast, es[0], 1, 1000)}
			buf := make([]link.Frame, 64)
			delivered := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := es[i%nodes].Send(frame); err != nil {
					b.Fatal(err)
				}
				if i%32 == 31 {
					n.RunFor(time.Millisecond)
					for _, e := range es {
						for {
							k, _ := e.Recv(time.Time{}, buf)
							if k == 0 {
								break
							}
							delivered += k
						}
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
			b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

func TestSetImpairmentMidRun(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	send(t, a, makeFrame(broadcast, a, 1, 64))
	if err := b.SetImpairment(In, Impairment{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	send(t, a, makeFrame(broadcast, a, 2, 64))
	n.RunFor(time.Millisecond)
	if got := drain(t, b); len(got) != 1 || seqOf(got[0]) != 1 {
		t.Fatalf("got %d frames, want only the one sent before Loss became 1", len(got))
	}
	if b.Impairment(In).Loss != 1 || b.Counters(In).Lost != 1 {
		t.Fatalf("impairment %+v, counters %v", b.Impairment(In), b.Counters(In))
	}
}

func TestBindReplacesNode(t *testing.T) {
	n := newNet(t, 1, Config{})
	e := attach(t, n, EndpointConfig{})
	var first, second int
	var replacement NodeFunc = func(now time.Time) time.Time {
		second++
		return time.Time{}
	}
	e.Bind(NodeFunc(func(now time.Time) time.Time {
		first++
		e.Bind(replacement) // e.g. a restarted process with fresh state
		return now.Add(time.Millisecond)
	}))
	n.RunFor(10 * time.Millisecond)
	if first != 1 || second != 1 {
		t.Fatalf("old node stepped %d times, new node %d; want 1 and 1 (the old deadline must be forgotten)", first, second)
	}
	e.Bind(nil)
	n.RunFor(10 * time.Millisecond)
	if second != 1 || n.Pending() != 0 {
		t.Fatalf("unbound node stepped (%d) or events left (%d)", second, n.Pending())
	}
}

func TestReceiversHaveTheirOwnCopies(t *testing.T) {
	n := newNet(t, 1, Config{})
	a := attach(t, n, EndpointConfig{})
	b := attach(t, n, EndpointConfig{})
	c := attach(t, n, EndpointConfig{})
	sent := makeFrame(broadcast, a, 1, 100)
	send(t, a, sent)
	n.RunFor(time.Millisecond)
	buf := make([]link.Frame, 1)
	if k, _ := b.Recv(time.Time{}, buf); k != 1 {
		t.Fatal("b got nothing")
	}
	buf[0].Data[50] ^= 0xff // a receiver scribbling on its frame
	if got := drain(t, c); len(got) != 1 || !bytes.Equal(got[0], sent) {
		t.Fatal("one receiver's write showed up in another receiver's frame")
	}
}
