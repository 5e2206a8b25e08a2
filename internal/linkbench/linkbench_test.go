//go:build linux

package linkbench

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

func TestMain(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}

// The harness itself must work for every backend: a short run delivers
// frames to every receiver and leaves no namespace behind. The numbers are
// not checked here (they go in docs/benchmarks.md).
func TestHarnessRuns(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, b := range BackendNames {
		t.Run(b, func(t *testing.T) {
			// The pid keeps concurrent test runs (several worktrees)
			// off each other's namespaces.
			prefix := fmt.Sprintf("rbkt%s%d", b[:2], os.Getpid()%1000)
			for _, procs := range []bool{false, true} {
				res, err := RunThroughput(Options{Backend: b, Hosts: 3, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, Processes: procs})
				if err != nil {
					t.Fatalf("processes=%v: %v", procs, err)
				}
				if res.Sent == 0 || len(res.Receivers) != 2 {
					t.Fatalf("processes=%v: sent %d, %d receivers", procs, res.Sent, len(res.Receivers))
				}
				for i, r := range res.Receivers {
					if r.Frames == 0 || r.Frames+r.Lost != res.Sent {
						t.Fatalf("processes=%v: receiver %d: %d frames + %d lost != %d sent", procs, i, r.Frames, r.Lost, res.Sent)
					}
				}
			}
			lat, err := RunLatency(b, 50, prefix, 0)
			if err != nil {
				t.Fatal(err)
			}
			if lat.RoundTrips != 50 || lat.P50 <= 0 {
				t.Fatalf("latency: %+v", lat)
			}
			if left, _ := netns.Leftovers(prefix); len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// TCP fan-out delivers every byte written, one-to-all and all-to-all, and
// its latency run completes.
func TestTCPFanout(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Addresses: true, Prefix: fmt.Sprintf("rbktcp%d", os.Getpid()%1000)})
	for _, senders := range []int{1, 3} {
		res, err := RunTCPFanout(topo, TCPOptions{Senders: senders, Duration: 100 * time.Millisecond, Lag: 1 << 20})
		if err != nil {
			t.Fatalf("senders=%d: %v", senders, err)
		}
		if wantRx := map[int]int{1: 2, 3: 3}[senders]; len(res.Receivers) != wantRx {
			t.Fatalf("senders=%d: receivers %v", senders, res.Receivers)
		}
		for _, h := range res.Receivers {
			if res.Received[h] == 0 || res.Received[h] != res.Written[h] {
				t.Fatalf("senders=%d: host %d received %d bytes of %d written", senders, h, res.Received[h], res.Written[h])
			}
		}
		if senders == 1 {
			a, b := res.Received[1], res.Received[2]
			if max(a, b)-min(a, b) > 1<<20+64<<10 {
				t.Fatalf("one-to-all: receivers got %d and %d bytes: more apart than the 1 MiB lag bound", a, b)
			}
		}
	}
	lat, err := RunTCPLatency(topo, 64, 50)
	if err != nil {
		t.Fatal(err)
	}
	if lat.RoundTrips != 50 || lat.P50 <= 0 {
		t.Fatalf("latency: %+v", lat)
	}
	if _, err := RunTCPFanout(&netns.Topology{Hosts: topo.Hosts[:1]}, TCPOptions{}); err == nil {
		t.Fatal("one host accepted")
	}
}

func TestUnknownBackend(t *testing.T) {
	if _, err := RunThroughput(Options{Backend: "nope"}); err == nil {
		t.Fatal("unknown backend accepted")
	}
	if os.Geteuid() != 0 {
		t.Log("root-only harness test skipped: needs root (namespaces, CAP_NET_RAW)")
	}
}

// Overlap (Stage on the sender's goroutine, Kick on another) reaches
// every receiver on the ring backends, and a backend that cannot stage is
// refused with its name.
func TestOverlap(t *testing.T) {
	netnstest.RequireRoot(t)
	prefix := fmt.Sprintf("rbko%d", os.Getpid()%1000)
	for _, b := range []string{"ring-v2", "ring-v3"} {
		res, err := RunThroughput(Options{Backend: b, Hosts: 3, MTU: 9000, Duration: 100 * time.Millisecond, Prefix: prefix, Overlap: true})
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for i, r := range res.Receivers {
			// Every frame sent reached the receiver or was dropped by its
			// kernel (a receiver slower than the sender overflows its
			// ring); none went missing on the way.
			if r.Frames == 0 || r.Frames+r.KernelDrops != res.Sent {
				t.Fatalf("%s: receiver %d got %d frames and its kernel dropped %d, of %d sent", b, i, r.Frames, r.KernelDrops, res.Sent)
			}
		}
	}
	_, err := RunThroughput(Options{Backend: "afpacket", Hosts: 2, MTU: 1500, Duration: 10 * time.Millisecond, Prefix: prefix, Overlap: true})
	if err == nil || !strings.Contains(err.Error(), `backend "afpacket" cannot overlap`) {
		t.Fatalf("afpacket with Overlap: %v; want the backend named as unable to overlap", err)
	}
	if left, _ := netns.Leftovers(prefix); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// Work: every frame a receiver gets, as a goroutine or as a process,
// carries a CRC32C that checks out (the sender wrote it after copying the
// payload into its history slot), and every receiver gets frames.
func TestWork(t *testing.T) {
	netnstest.RequireRoot(t)
	prefix := fmt.Sprintf("rbkw%d", os.Getpid()%1000)
	for _, procs := range []bool{false, true} {
		res, err := RunThroughput(Options{Backend: "ring-v2", Hosts: 3, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, Overlap: true, Work: true, Processes: procs})
		if err != nil {
			t.Fatalf("processes=%v: %v", procs, err)
		}
		for i, r := range res.Receivers {
			if r.Frames == 0 || r.Frames > res.Sent || r.Corrupt != 0 {
				t.Fatalf("processes=%v: receiver %d got %d frames of %d sent, %d failing their CRC32C", procs, i, r.Frames, res.Sent, r.Corrupt)
			}
			// The receiver (a child process too) did the work on every
			// frame: Checked is counted only where the CRC is checked.
			if r.Checked != r.Frames {
				t.Fatalf("processes=%v: receiver %d checked %d of its %d frames, want all (did it get Work?)", procs, i, r.Checked, r.Frames)
			}
		}
	}
	if left, _ := netns.Leftovers(prefix); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// Ints takes positive integers, ignoring spaces and empty entries, and
// names what is not one; a list without a number is an error.
func TestInts(t *testing.T) {
	got, err := Ints(" 2, 4,,8 ")
	if err != nil || len(got) != 3 || got[0] != 2 || got[1] != 4 || got[2] != 8 {
		t.Fatalf(`Ints(" 2, 4,,8 ") = %v, %v; want [2 4 8]`, got, err)
	}
	for _, c := range []struct{ in, want string }{
		{"2,x", `"x" is not a positive integer`},
		{"0", `"0" is not a positive integer`},
		{"4,-1", `"-1" is not a positive integer`},
		{" , ", `no numbers in " , "`},
	} {
		if _, err := Ints(c.in); err == nil || err.Error() != c.want {
			t.Errorf("Ints(%q) error = %v, want %q", c.in, err, c.want)
		}
	}
}

// oneBatch is a link.Link whose first Recv returns its frames and whose
// next one reports the link closed (ending receive).
type oneBatch struct {
	link.Link
	frames [][]byte
	calls  int
}

func (o *oneBatch) Recv(_ time.Time, buf []link.Frame) (int, error) {
	if o.calls++; o.calls > 1 {
		return 0, net.ErrClosed
	}
	for i, f := range o.frames {
		buf[i] = link.Frame{Data: f}
	}
	return len(o.frames), nil
}

// Work's receiver check can fail: a frame whose CRC32C does not match is
// counted Corrupt, one that matches is not, and without Work nothing is
// checked. (TestWork's runs only show that none failed.)
func TestReceiveWorkCRC(t *testing.T) {
	good := make([]byte, frame.EthernetHeaderLen+8+100+crcLen)
	for i := range good {
		good[i] = byte(i)
	}
	end := len(good) - crcLen
	binary.BigEndian.PutUint32(good[end:], crc32.Checksum(good[frame.EthernetHeaderLen:end], castagnoli))
	bad := slices.Clone(good)
	bad[frame.EthernetHeaderLen+20] ^= 1
	for _, work := range []bool{true, false} {
		var done atomic.Bool
		r := receive(&oneBatch{frames: [][]byte{good, bad, good}}, &done, work)
		want, checked := uint64(0), uint64(0)
		if work {
			want, checked = 1, 2
		}
		if r.Frames != 3 || r.Corrupt != want || r.Checked != checked {
			t.Errorf("work=%v: %d frames, %d corrupt, %d checked; want 3, %d and %d", work, r.Frames, r.Corrupt, r.Checked, want, checked)
		}
	}
}

// A Recv error other than the deadline ends a receiver before the run
// does; it is kept, and the run fails naming the host, instead of
// reporting the short counts as a rate.
func TestReceiveErrorReported(t *testing.T) {
	var done atomic.Bool
	r := receive(&oneBatch{frames: [][]byte{make([]byte, 100)}}, &done, false)
	if r.Frames != 1 || !strings.Contains(r.Err, "use of closed network connection") {
		t.Fatalf("%d frames, error %q; want 1 and the closed link's error", r.Frames, r.Err)
	}
	hosts := []*netns.Host{{Namespace: "rbx-h1"}, {Namespace: "rbx-h2"}}
	err := receiverErr(hosts, []Receiver{{Frames: 5}, r})
	if err == nil || err.Error() != "receiver on rbx-h2 stopped early: "+r.Err {
		t.Fatalf("error %v, want one naming rbx-h2 and its Recv error", err)
	}
	if err := receiverErr(hosts, []Receiver{{Frames: 5}, {Frames: 6}}); err != nil {
		t.Fatalf("error %v for receivers that ran to the end", err)
	}
}

// RxSpin reaches the receivers' rings, and is refused where it cannot.
func TestRxSpinOption(t *testing.T) {
	netnstest.RequireRoot(t)
	prefix := fmt.Sprintf("rbks%d", os.Getpid()%1000)
	res, err := RunThroughput(Options{Backend: "ring-v2", Hosts: 2, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, RxSpin: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Receivers[0]; r.Frames == 0 || r.Frames > res.Sent {
		t.Fatalf("receiver got %d frames of %d sent", r.Frames, res.Sent)
	}
	// Receiver processes take it too (RxSpin -1: never, which 0 is not
	// since the spin became the ring's default).
	res, err = RunThroughput(Options{Backend: "ring-v2", Hosts: 2, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, RxSpin: -1, Processes: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Receivers[0]; r.Frames == 0 || r.Frames > res.Sent {
		t.Fatalf("receiver process got %d frames of %d sent", r.Frames, res.Sent)
	}
	// and it does reach them: one the ring refuses (over a second) stops
	// the receiver process before it is ready.
	if _, err := RunThroughput(Options{Backend: "ring-v2", Hosts: 2, MTU: 1500, Duration: 100 * time.Millisecond, Prefix: prefix, RxSpin: 2 * time.Second, Processes: true}); err == nil || !strings.Contains(err.Error(), "did not start") {
		t.Errorf("RxSpin 2s in a receiver process: %v, want the receiver not to start", err)
	}
	// The latency run's rings take it too.
	if lat, err := RunLatency("ring-v2", 20, prefix, -1); err != nil || lat.RoundTrips != 20 {
		t.Errorf("latency with RxSpin -1: %+v, %v", lat, err)
	}
	if _, err := RunLatency("ring-v2", 20, prefix, 2*time.Second); err == nil || !strings.Contains(err.Error(), "Config.RxSpin = 2s") {
		t.Errorf("latency with RxSpin 2s: %v, want the ring's refusal", err)
	}
	if _, err := RunLatency("plain", 20, prefix, -1); err == nil || !strings.Contains(err.Error(), "latency needs a ring backend") {
		t.Errorf("latency on plain with a spin: %v, want a refusal", err)
	}
	for _, o := range []Options{
		{Backend: "plain", Hosts: 2, RxSpin: time.Microsecond},
		{Backend: "plain", Hosts: 2, RxSpin: -1, Processes: true},
	} {
		if _, _, err := o.openers(); err == nil || !strings.Contains(err.Error(), "the receivers must be on a ring backend") {
			t.Errorf("%+v: %v, want a refusal", o, err)
		}
	}
	if left, _ := netns.Leftovers(prefix); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// OpenRing refuses a backend that is not a ring with an error, not a nil
// link and a nil error (its callers do not look at ok).
func TestOpenRingNotRing(t *testing.T) {
	if l, err := OpenRing("plain", "lo", 0); l != nil || err == nil || err.Error() != `"plain" is not a ring backend` {
		t.Fatalf(`OpenRing("plain") = %v, %v; want nil and "\"plain\" is not a ring backend"`, l, err)
	}
}

// The raw all-to-all: every host sends and receives, nobody receives more
// than the others sent, and the options it cannot honour are refused.
func TestAllToAll(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: fmt.Sprintf("rbkta%d", os.Getpid()%1000)})
	res, err := RunAllToAllOn(topo, Options{Backend: "ring-v2", Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for i, n := range res.Sent {
		if n == 0 {
			t.Fatalf("host %d sent nothing", i)
		}
		total += n
	}
	for i, r := range res.Received {
		if others := total - res.Sent[i]; r.Frames == 0 || r.Frames > others {
			t.Fatalf("host %d received %d frames; the others sent %d", i, r.Frames, others)
		}
		if r.Bytes != r.Frames*uint64(frame.EthernetHeaderLen+topo.MTU) {
			t.Fatalf("host %d: %d bytes in %d frames of MTU %d", i, r.Bytes, r.Frames, topo.MTU)
		}
	}
	if lo, mean := res.MinMBps(), res.MeanMBps(); lo <= 0 || mean < lo {
		t.Fatalf("MinMBps %v, MeanMBps %v", lo, mean)
	}
	_, err = RunAllToAllOn(topo, Options{Backend: "ring-v2", Duration: time.Millisecond, Work: true})
	if err == nil || !strings.Contains(err.Error(), "all-to-all takes only") {
		t.Fatalf("Work: err = %v, want a refusal", err)
	}
}

// failingSend is a ring-v2 link whose Send fails (fail set) and which
// counts its Close calls.
type failingSend struct {
	link.Link
	fail   bool
	closed *atomic.Int32
}

func (f *failingSend) Send(frames [][]byte) (int, error) {
	if f.fail {
		return 0, errors.New("injected send failure")
	}
	return f.Link.Send(frames)
}

func (f *failingSend) Close() error {
	f.closed.Add(1)
	return f.Link.Close()
}

// A send error ends the all-to-all run at once: the other senders stop,
// the receivers stop, every link is closed and the error names the host.
func TestAllToAllSendError(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: fmt.Sprintf("rbkte%d", os.Getpid()%1000)})
	var opened, closed atomic.Int32
	Backends["test-failing-send"] = func(n string) (link.Link, error) {
		l, err := Backends["ring-v2"](n)
		if err != nil {
			return nil, err
		}
		return &failingSend{Link: l, fail: opened.Add(1) == 2, closed: &closed}, nil
	}
	t.Cleanup(func() { delete(Backends, "test-failing-send") })
	start := time.Now()
	res, err := RunAllToAllOn(topo, Options{Backend: "test-failing-send", Duration: 10 * time.Second})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "injected send failure") || !strings.Contains(err.Error(), topo.Hosts[1].Namespace) {
		t.Fatalf("RunAllToAllOn = %v, %v; want host %s's injected send failure", res, err, topo.Hosts[1].Namespace)
	}
	if took > 5*time.Second {
		t.Errorf("RunAllToAllOn took %v after a send failed at once; the others sent out the 10 s", took)
	}
	if o, c := opened.Load(), closed.Load(); o != 3 || c != 3 {
		t.Errorf("opened %d links, closed %d; want 3 and 3", o, c)
	}
}

// SweepFlags' lists: the defaults, values given, and an error naming the
// flag and the bad value.
func TestSweepLists(t *testing.T) {
	for _, c := range []struct {
		args        []string
		hosts, mtus string
		err         string
	}{
		{nil, "[2 4 8]", "[1500 9000]", ""},
		{[]string{"-hosts", "3", "-mtu", "9000", "-duration", "1s", "-reps", "2"}, "[3]", "[9000]", ""},
		{[]string{"-hosts", "1"}, "", "", "-hosts: 1 is not a number of hosts in 2..250"},
		{[]string{"-mtu", "1500,x"}, "", "", `-mtu: "x" is not a positive integer`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		sw := SweepFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		hosts, mtus, err := sw.Lists()
		if got := fmt.Sprint(err); c.err != "" && got != c.err || c.err == "" && (err != nil || fmt.Sprint(hosts) != c.hosts || fmt.Sprint(mtus) != c.mtus) {
			t.Errorf("%q: %v, %v, %v; want %s, %s, %q", c.args, hosts, mtus, err, c.hosts, c.mtus, c.err)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	sw := SweepFlags(fs)
	if err := fs.Parse([]string{"-duration", "2s", "-reps", "3"}); err != nil || sw.Duration != 2*time.Second || sw.Reps != 3 {
		t.Errorf("-duration 2s -reps 3: %v, %d, %v", sw.Duration, sw.Reps, err)
	}
}
