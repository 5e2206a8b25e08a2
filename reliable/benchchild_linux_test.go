package reliable

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
)

// Receivers as processes of their own (goodputOpts.procs): on real hosts
// every member is a process with its own Go scheduler; with all members
// goroutines of one process on two busy cores, a receiver blocked on the
// netpoller is noticed late and every such pause stalls a protocol that
// waits for acknowledgements. The benchmark binary re-executes itself in
// the receiver's namespace (ip netns exec) with benchChildEnv set; TestMain
// then runs benchChild instead of the tests.

const benchChildEnv = "RBCAST_BENCH_PBP_CHILD"

func TestMain(m *testing.M) {
	linkbench.MaybeChild() // raw ring receivers as processes
	if os.Getenv(benchChildEnv) != "" || os.Getenv(liuChildEnv) != "" {
		lifeline.Tie() // a member ends with the test process
	}
	if spec := os.Getenv(benchChildEnv); spec != "" {
		os.Exit(benchChild(spec, os.Stdin, os.Stdout))
	}
	if spec := os.Getenv(liuChildEnv); spec != "" {
		os.Exit(liuChild(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// benchChildSpec is what a receiver process is told (JSON in the env).
type benchChildSpec struct {
	Group   uint32
	Members []frame.MemberInfo
	Self    frame.MemberID
	Mode    Mode
	Window  int
	Bundle  time.Duration
	Deliver bool
}

// benchChildResult is what it reports (JSON on stdout).
type benchChildResult struct {
	Bytes  uint64
	DoneAt int64 // unix nanoseconds when it had everything; 0 if never
	MaxGap time.Duration
	Held   uint64
	Drops  uint64
}

// benchChild joins the group on eth0, says "ready", receives and counts;
// when a line with the byte count to expect arrives on stdin it waits
// until it has that much (or 5 s) and reports.
func benchChild(specJSON string, in io.Reader, out io.Writer) int {
	var spec benchChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "bench child: bad spec: %v\n", err)
		return 2
	}
	l, err := linkbench.OpenRing("ring-v2", "eth0", benchSpin(nil)) // RBCAST_BENCH_SPIN, inherited
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench child: %v\n", err)
		return 1
	}
	defer l.Close()
	var count, gap atomic.Int64
	var sending atomic.Bool
	sending.Store(true)
	last := time.Now()
	note := func(n int) {
		count.Add(int64(n))
		if sending.Load() {
			now := time.Now()
			if d := now.Sub(last); d > time.Duration(gap.Load()) {
				gap.Store(int64(d))
			}
			last = now
		}
	}
	cfg := Config{Group: spec.Group, Members: spec.Members, Self: spec.Self, Mode: spec.Mode, Window: spec.Window,
		BundleDelay: spec.Bundle, Logger: quiet}
	if spec.Deliver {
		cfg.Deliver = func(_ frame.MemberID, data []byte) { note(len(data)) }
	}
	g, err := Join(context.Background(), l, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench child: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if !spec.Deliver {
		go func() {
			defer close(done)
			buf := make([]byte, 0, 65536)
			for {
				_, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				note(len(data))
			}
		}()
	} else {
		close(done)
	}
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	var want int64
	if sc.Scan() {
		want, _ = strconv.ParseInt(sc.Text(), 10, 64)
	}
	sending.Store(false)
	var res benchChildResult
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		if count.Load() >= want {
			res.DoneAt = time.Now().UnixNano()
			break
		}
	}
	res.Bytes, res.MaxGap = uint64(count.Load()), time.Duration(gap.Load())
	st := g.Stats()
	res.Held, res.Drops = st.HeldData, st.Link.KernelDrops
	g.abort()
	<-g.Done()
	cancel()
	<-done
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return 1
	}
	return 0
}

type benchKid struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startBenchChild starts a receiver process for member self on host h and
// waits for its "ready".
func startBenchChild(h *netns.Host, spec benchChildSpec) (*benchKid, error) {
	cmd, err := childCommand(h, benchChildEnv, spec)
	if err != nil {
		return nil, err
	}
	in, out, err := linkbench.StartReady(cmd, "bench child on "+h.Namespace)
	if err != nil {
		return nil, err
	}
	return &benchKid{cmd: cmd, in: in, out: out}, nil
}

func (k *benchKid) kill() {
	k.cmd.Process.Kill()
	k.cmd.Wait()
}

// finish tells the child how many bytes to expect and reads its result.
func (k *benchKid) finish(want uint64) (benchChildResult, error) {
	var r benchChildResult
	fmt.Fprintf(k.in, "%d\n", want)
	k.in.Close()
	err := json.NewDecoder(k.out).Decode(&r)
	if werr := k.cmd.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		err = errors.Join(err, fmt.Errorf("bench child %v", k.cmd.Args))
	}
	return r, err
}

// runGoodputProcs is runGoodputOn with member 0 in this process and every
// receiver a process of its own (one sender only).
func runGoodputProcs(tb testing.TB, topo *netns.Topology, o goodputOpts, d time.Duration) goodputResult {
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	gid := 1000 + benchGroups.Add(1)
	var kids []*benchKid
	defer func() {
		for _, k := range kids {
			if k.cmd.ProcessState == nil {
				k.kill()
			}
		}
	}()
	for i, h := range topo.Hosts[1:] {
		k, err := startBenchChild(h, benchChildSpec{Group: gid, Members: members, Self: frame.MemberID(i + 1), Mode: o.mode,
			Window: o.window, Bundle: o.bundleDelay, Deliver: o.deliver})
		if err != nil {
			tb.Fatal(err)
		}
		kids = append(kids, k)
	}
	var l link.Link = openOnHost(tb, topo.Hosts[0])
	defer l.Close()
	g, err := Join(context.Background(), l, Config{Group: gid, Members: members, Self: 0, Mode: o.mode,
		Window: o.window, BundleDelay: o.bundleDelay, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		g.abort()
		<-g.Done()
	}()
	size := o.size
	if size == 0 {
		size = g.MaxMessage()
	}
	msg := make([]byte, size)
	ctx := context.Background()
	var sent uint64
	start := time.Now()
	for time.Since(start) < d {
		if err := g.Send(ctx, msg); err != nil {
			tb.Fatal(err)
		}
		sent++
	}
	want := sent * uint64(size)
	var res goodputResult
	var doneAt int64
	first := true
	for _, k := range kids {
		r, err := k.finish(want)
		if err != nil {
			tb.Fatal(err)
		}
		if first || r.Bytes < res.bytes {
			res.bytes, first = r.Bytes, false
		}
		if r.Bytes < want {
			res.short = max(res.short, want-r.Bytes)
			r.DoneAt = time.Now().UnixNano()
		}
		doneAt = max(doneAt, r.DoneAt)
		res.maxGap = max(res.maxGap, r.MaxGap)
		res.held += r.Held
		res.drops += r.Drops
	}
	res.sender = g.Stats() // after the receivers: with the removals they caused
	res.elapsed = time.Unix(0, doneAt).Sub(start)
	res.msgs = res.bytes / uint64(max(size, 1))
	return res
}

// childCommand is this test binary run again on host h as a child
// process: running no test, it finds spec, as JSON, in the environment
// variable env (TestMain hands it to the child's code).
func childCommand(h *netns.Host, env string, spec any) (*exec.Cmd, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := h.Command(context.Background(), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	return cmd, nil
}
