package orca_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/orca"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Real network: every member a process of its own in a namespace of a
// bridge topology, the ring link on its eth0, nftables loss on two hosts;
// members write to a shared log and counter and take jobs from the job
// queue while the test kills one member with SIGKILL — an ordinary one, or
// the sequencer. The survivors then finish and report: their replicas
// must be identical byte for byte (the snapshot's SHA-256: states,
// positions, queues), every write a survivor's Call returned must be in
// the log, and the killed member's writes there must be a prefix of what
// it wrote, in its order.

const netnsChildEnv = "RBCAST_ORCA_NETNS_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(netnsChildEnv); spec != "" {
		lifeline.Tie() // a member ends with the test process
		os.Exit(netnsChild(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// netnsSpec is what a member process is told (JSON in the environment).
type netnsSpec struct {
	Group   uint32
	Members []frame.MemberInfo
	Self    frame.MemberID
	Jobs    int
}

// netnsResult is what it reports (JSON on stdout).
type netnsResult struct {
	Self      frame.MemberID
	Written   int      // log entries whose push returned
	Log       []int32  // the whole log at the end
	Taken     []int32  // jobs this member took
	Snapshot  [32]byte // SHA-256 of the replica's snapshot
	Position  uint64
	Err       string
	Unsettled int
	// CloseErr: the leave did not finish (the others may have left
	// first; not what this test checks).
	CloseErr string
}

// Netns timers: a crashed member is noticed within 300 ms.
const (
	netnsHeartbeat = 30 * time.Millisecond
	netnsFailure   = 300 * time.Millisecond
)

// netnsChild is a member: it joins, says "ready", and on "go" writes
// until "stop N" arrives, then counts itself done and waits until N
// members have, and reports.
func netnsChild(specJSON string, in io.Reader, out io.Writer) int {
	var spec netnsSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "orca netns child: bad spec: %v\n", err)
		return 2
	}
	res, err := netnsMember(spec, in, out)
	if err != nil {
		res.Err = err.Error()
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return 1
	}
	return 0
}

func netnsMember(spec netnsSpec, in io.Reader, out io.Writer) (netnsResult, error) {
	res := netnsResult{Self: spec.Self}
	l, err := ring.Open("eth0", ring.Config{})
	if err != nil {
		return res, err
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := orca.Join(ctx, l, orca.Config{Group: reliable.Config{Group: spec.Group, Members: spec.Members, Self: spec.Self,
		HeartbeatInterval: netnsHeartbeat, FailureTimeout: netnsFailure, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return res, err
	}
	lg, err1 := orca.New(n, "log", logClass, nil)
	q, err2 := orca.New(n, "queue", queue, Queue{})
	done, err3 := orca.New(n, "done", counter, 0)
	if err := errors.Join(err1, err2, err3); err != nil {
		return res, err
	}
	fmt.Fprintln(out, "ready")
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if <-lines != "go" {
		return res, errors.New("no go")
	}
	if n.Rank() == len(spec.Members)-1 {
		jobs := make([]int32, spec.Jobs)
		for j := range jobs {
			jobs[j] = int32(j)
		}
		if _, err := put.Call(ctx, q, jobs); err != nil {
			return res, err
		}
	}
	var stop string
	for i := 0; stop == ""; i++ {
		select {
		case stop = <-lines:
			continue
		default:
		}
		if _, err := push.Call(ctx, lg, []int32{int32(int(spec.Self)<<20 | i)}); err != nil {
			return res, fmt.Errorf("push %d: %w", i, err)
		}
		res.Written++
		if i%4 == 0 {
			if j, err := tryGet.Call(ctx, q, struct{}{}); err != nil {
				return res, fmt.Errorf("get: %w", err)
			} else if j >= 0 {
				res.Taken = append(res.Taken, j)
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	var survivors int64
	if _, err := fmt.Sscanf(stop, "stop %d", &survivors); err != nil {
		return res, fmt.Errorf("stop line %q: %w", stop, err)
	}
	if n.Rank() == len(spec.Members)-1 {
		if _, err := closeQ.Call(ctx, q, struct{}{}); err != nil {
			return res, err
		}
	}
	for {
		j, err := getJob.Call(ctx, q, struct{}{})
		if err != nil {
			return res, fmt.Errorf("draining: %w", err)
		}
		if j < 0 {
			break
		}
		res.Taken = append(res.Taken, j)
	}
	if _, err := add.Call(ctx, done, 1); err != nil {
		return res, err
	}
	if _, err := atLeast.Call(ctx, done, survivors); err != nil {
		return res, err
	}
	res.Log, _ = all.Call(ctx, lg, struct{}{})
	snap, err := n.Snapshot()
	if err != nil {
		return res, err
	}
	res.Snapshot, res.Position = sha256.Sum256(snap), n.Position()
	// Every survivor has everything: the snapshots are taken before
	// anybody leaves (atLeast above waits for the last survivor's write,
	// the last message of the run).
	res.Unsettled = n.Stats().Group.Protocol.Unsettled
	if err := n.Close(); err != nil {
		res.CloseErr = err.Error()
	}
	return res, nil
}

type netnsKid struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func TestNetnsKill(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		victim int
	}{{"member", 1}, {"sequencer", 0}} {
		t.Run(tc.name, func(t *testing.T) { netnsKill(t, tc.victim) })
	}
}

func netnsKill(t *testing.T, victim int) {
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbokill"})
	loss := []netns.Loss{{}, {Percent: 5, EtherType: frame.EtherType}, {}, {Percent: 10, BurstLen: 4, EtherType: frame.EtherType}}
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		if loss[i].Percent > 0 {
			if err := h.SetLoss(netns.In, loss[i]); err != nil {
				t.Fatal(err)
			}
		}
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 200
	kids := make([]*netnsKid, len(topo.Hosts))
	t.Cleanup(func() {
		for _, k := range kids {
			if k != nil {
				k.cmd.Process.Kill()
				k.cmd.Wait()
			}
		}
	})
	for i, h := range topo.Hosts {
		spec, _ := json.Marshal(netnsSpec{Group: 0x0ca, Members: members, Self: members[i].ID, Jobs: jobs})
		cmd := h.Command(context.Background(), exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), netnsChildEnv+"="+string(spec))
		in, out, err := linkbench.StartReady(cmd, "orca member on "+h.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		kids[i] = &netnsKid{cmd: cmd, in: in, out: out}
	}
	for _, k := range kids {
		fmt.Fprintln(k.in, "go")
	}
	time.Sleep(400 * time.Millisecond)
	kids[victim].cmd.Process.Kill() // SIGKILL
	kids[victim].cmd.Wait()
	time.Sleep(2 * netnsFailure)
	var results []netnsResult
	for i, k := range kids {
		if i != victim {
			fmt.Fprintf(k.in, "stop %d\n", len(kids)-1)
		}
	}
	for i, k := range kids {
		if i == victim {
			continue
		}
		var r netnsResult
		errc := make(chan error, 1)
		go func() { errc <- json.NewDecoder(k.out).Decode(&r) }()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("member %d: no result: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			k.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines on stderr
			time.Sleep(time.Second)
			t.Fatalf("member %d: no result after 30 s (its goroutines are above)", i+1)
		}
		k.in.Close()
		if err := k.cmd.Wait(); err != nil {
			t.Errorf("member %d exited: %v", i+1, err)
		}
		kids[i] = nil
		if r.Err != "" {
			t.Fatalf("member %d: %s", i+1, r.Err)
		}
		if r.CloseErr != "" {
			t.Logf("member %d: its leave did not finish: %s", i+1, r.CloseErr)
		}
		results = append(results, r)
	}
	ref := results[0]
	for _, r := range results[1:] {
		if r.Snapshot != ref.Snapshot || r.Position != ref.Position {
			t.Errorf("member %d's replicas differ from member %d's (snapshot %x at %d, %x at %d)", r.Self, ref.Self, r.Snapshot[:6], r.Position, ref.Snapshot[:6], ref.Position)
		}
	}
	// Per writer, the log holds 0..k-1 in order: every survivor's k is
	// what its pushes returned; the victim's is a prefix of what it wrote.
	next := map[frame.MemberID]int{}
	for _, e := range ref.Log {
		id, i := frame.MemberID(e>>20), int(e&(1<<20-1))
		if i != next[id] {
			t.Fatalf("log: member %d's entry %d where %d was due", id, i, next[id])
		}
		next[id]++
	}
	var taken []int32
	for _, r := range results {
		if next[r.Self] != r.Written {
			t.Errorf("member %d: %d pushes returned, %d in the log", r.Self, r.Written, next[r.Self])
		}
		taken = append(taken, r.Taken...)
	}
	seen := map[int32]bool{}
	for _, j := range taken {
		if seen[j] {
			t.Errorf("job %d taken twice", j)
		}
		seen[j] = true
	}
	t.Logf("killed member %d after %d of its entries reached the log; survivors wrote %v entries, took %d of %d jobs (the rest died with the victim or were never put), %d messages delivered",
		victim+1, next[members[victim].ID], writtenOf(results), len(taken), jobs, ref.Position)
	if strings.Contains(t.Name(), "sequencer") && len(results) != 3 {
		t.Errorf("%d survivors reported", len(results))
	}
}

func writtenOf(rs []netnsResult) []int {
	var w []int
	for _, r := range rs {
		w = append(w, r.Written)
	}
	return w
}
