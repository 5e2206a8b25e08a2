package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/kv"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// The test binary is rbcast-kv when this is set (the netns test's
// children).
const mainEnv = "RBCAST_KV_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		lifeline.Tie() // a replica or client ends with the test process
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// kvCmd is rbcast-kv with args on host h.
func kvCmd(t *testing.T, h *netns.Host, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(context.Background(), exe, args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	return cmd
}

// TestNetnsKill: replicas on a segment with 5 % loss at one of them,
// clients on other hosts putting keys one at a time; replicas are killed
// with SIGKILL while the puts run and restarted a second later. Every
// replica serves every acknowledged put's value at the end (gets, so
// also the restarted ones, by state transfer, and any that re-formed
// with the group), nothing is applied twice anywhere, every acknowledged
// put is applied exactly once at the replicas that ran throughout without
// taking a snapshot (their applied logs), and no put waits much longer
// than a client timeout plus the failure timeout, or, if the group
// stopped replicas and re-formed, than it takes every replica to be back.
// 5-halt cuts every replica off the segment for a while instead of
// killing any: the whole group stops and re-forms from the replicas'
// candidates. Beside the puts, history clients run gets, puts, dels and
// cas on shared keys through the fault; their history must be
// linearizable.
func TestNetnsKill(t *testing.T) {
	netnstest.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		n       int
		victims []int
		clients int
		cut     time.Duration
	}{{"3-kill-1", 3, []int{1}, 1, 0}, {"5-kill-2", 5, []int{0, 3}, 2, 0}, {"5-halt", 5, nil, 2, haltCut}} {
		t.Run(tc.name, func(t *testing.T) { netnsKill(t, tc.n, tc.victims, tc.clients, tc.cut) })
	}
}

// haltCut is how long 5-halt cuts every replica off the segment: past
// the failure timeout, so each is a minority and stops, and the group
// re-forms from the replicas' candidates once the cut heals.
const haltCut = 1200 * time.Millisecond

// netnsKill runs n replicas and clients; after 150 puts of client 0 it
// kills the victims (restarted a second later) and, if cut > 0, cuts
// every replica off the segment for that long.
func netnsKill(t *testing.T, n int, victims []int, clients int, cut time.Duration) {
	topo := netnstest.Up(t, netns.Options{Hosts: n + clients, Prefix: "rbkv", Addresses: true})
	if err := topo.Hosts[n-1].SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var addrs []string
	for _, h := range topo.Hosts[:n] {
		addrs = append(addrs, h.IP.String()+":7723")
	}
	servers := strings.Join(addrs, ",")
	var mu sync.Mutex
	replicas := make([]*exec.Cmd, n)
	start := func(i, run int) {
		cmd := kvCmd(t, topo.Hosts[i], "serve", "-i", "eth0", "-group", "23", "-members", fmt.Sprint(n), "-listen", addrs[i],
			"-node", fmt.Sprint(i), "-failure-timeout", "300ms", "-applied", filepath.Join(dir, fmt.Sprintf("applied-%d-%d", i, run)))
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("log-%d-%d", i, run)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = f
		if err := cmd.Start(); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		replicas[i] = cmd
		mu.Unlock()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range replicas {
			if c != nil {
				c.Process.Kill()
				c.Wait()
			}
		}
		if d := os.Getenv("RBCAST_KV_LOGS"); d != "" {
			// Keep the replicas' logs and applied files, to hold a slow put
			// ("slow put ... from TIME") against the views around it.
			to, err := os.MkdirTemp(d, strings.ReplaceAll(t.Name(), "/", "_")+"-")
			if err == nil {
				err = os.CopyFS(to, os.DirFS(dir))
			}
			if err != nil {
				t.Errorf("RBCAST_KV_LOGS: %v", err)
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log-*"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), b)
			}
		}
	})
	for i := range replicas {
		start(i, 1)
	}
	client := topo.Hosts[n]
	if out, err := kvCmd(t, client, "-servers", servers, "-deadline", "20s", "put", "hello", "world").CombinedOutput(); err != nil {
		t.Fatalf("the first put: %v: %s", err, out)
	}

	const puts = 600
	type result struct {
		acked []string
		done  string
		err   error
	}
	results := make(chan result, clients)
	progress := make(chan int, 1000)
	for c := range clients {
		load := kvCmd(t, topo.Hosts[n+c], "-servers", servers, "-timeout", "300ms", "load", "-n", fmt.Sprint(puts), "-prefix", fmt.Sprintf("w%d", c), "-slow", "500ms")
		out, err := load.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var loadErr strings.Builder
		load.Stderr = &loadErr
		if err := load.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			var r result
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					r.acked = append(r.acked, id)
					if c == 0 {
						progress <- len(r.acked)
					}
				} else if strings.HasPrefix(sc.Text(), "slow put ") {
					t.Logf("client %d: %s", c, sc.Text())
				} else {
					r.done = sc.Text()
				}
			}
			if err := load.Wait(); err != nil {
				r.err = fmt.Errorf("client %d: %v: %s", c, err, loadErr.String())
			}
			results <- r
		}()
	}
	// Beside the puts, clients on the same hosts run gets, puts, dels and
	// cas on four shared keys through the kill, recording every operation
	// (those without an answer as such): the history is checked for
	// linearizability at the end.
	histories := make(chan []kv.HistoryOp, clients)
	for c := range clients {
		cmd := kvCmd(t, topo.Hosts[n+c], "-servers", servers, "-timeout", "300ms", "-deadline", "30s",
			"history", "-n", fmt.Sprint(historyOps), "-c", "2", "-keys", "4")
		var errOut strings.Builder
		cmd.Stderr = &errOut
		go func() {
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("history client %d: %v: %s", c, err, errOut.String())
			}
			histories <- parseHistory(t, out)
		}()
	}
	for p := range progress {
		if p == 150 {
			break
		}
	}
	faultAt := time.Now() // the kill or the cut
	for _, v := range victims {
		mu.Lock()
		replicas[v].Process.Kill() // SIGKILL
		replicas[v].Wait()
		replicas[v] = nil
		mu.Unlock()
		time.AfterFunc(time.Second, func() { start(v, 2) })
	}
	var cutFor time.Duration // from cutting the first replica off to healing the last
	if cut > 0 {
		setCut := func(pct float64) {
			for i, h := range topo.Hosts[:n] {
				p := pct
				if i == n-1 {
					p = max(p, 5)
				}
				if err := h.SetLoss(netns.In, netns.Loss{Percent: p, EtherType: frame.EtherType}); err != nil {
					t.Error(err)
				}
			}
		}
		t0 := time.Now()
		setCut(100)
		time.Sleep(cut)
		setCut(0)
		cutFor = time.Since(t0)
		t.Logf("cut every replica off the segment for %v (%v from the first cut to the last heal) after 150 puts of client 0", cut, cutFor.Round(time.Millisecond))
	}
	if len(victims) > 0 {
		t.Logf("killed replicas %v after 150 puts of client 0", victims)
	}
	go func() {
		for range progress {
		}
	}()
	acked := map[string]bool{}
	var slowestPut time.Duration
	for range clients {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, id := range r.acked {
			acked[id] = true
		}
		t.Logf("load: %s", r.done)
		slowestPut = max(slowestPut, slowest(t, r.done))
	}
	close(progress)
	var hist []kv.HistoryOp
	for range clients {
		hist = append(hist, <-histories...)
	}
	checkHistory(t, hist, historyOps*clients, faultAt)
	// A kill costs a put the failure timeout (the group removes the
	// victims; the client's timeout at a victim runs meanwhile) and a view
	// change. If the group stopped other replicas too (false suspicions,
	// seen under load; or the cut), a put waits for the group to re-form:
	// that needs every replica (the founding waits for all, and so does
	// re-forming the state), so the killed ones restarted a second later,
	// and a founder that misses the founding's commit costs another
	// failure timeout.
	const clientTimeout, failureTimeout, slack = 300 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond
	bound, why := clientTimeout+failureTimeout+slack, "the client timeout + the failure timeout + 500 ms"
	if stopped := rejoined(t, dir, n); len(stopped) > len(victims) || cut > 0 {
		wait := cutFor
		if len(victims) > 0 {
			wait = max(wait, time.Second)
		}
		bound = wait + clientTimeout + 2*failureTimeout + slack
		why = fmt.Sprintf("%v until every replica is back + the client timeout + twice the failure timeout + 500 ms: the group stopped replicas %v and re-formed",
			wait.Round(time.Millisecond), stopped)
	}
	if slowestPut > bound {
		t.Errorf("a put took %v, more than %v (%s)", slowestPut, bound.Round(time.Millisecond), why)
	} else {
		t.Logf("the slowest put took %v, within %v (%s)", slowestPut, bound.Round(time.Millisecond), why)
	}
	if len(acked) != puts*clients {
		t.Fatalf("%d puts acknowledged, want %d", len(acked), puts*clients)
	}

	// Every replica serves every acknowledged value: the restarted ones got
	// it by snapshot, and so did any that rejoined or re-formed with the
	// group. One get at each goes through the order; then the keys are read
	// from each replica's own state (local gets, read again until the
	// replica has applied the last puts), which asks nothing of the group.
	//
	// The loss is for the kill and the puts; it is lifted first. An idle
	// group keeps up with heartbeats only (100 ms; the failure timeout is
	// 300 ms), and under 5 % loss on a loaded machine that breeds false
	// suspicions the view layer may not resolve (a member suspected only
	// by another than the coordinator). The deadlines are long for the
	// same reason: such a stall was seen to last 28 s, ended by the group
	// halting and re-forming.
	verifyStart := time.Now()
	if err := topo.Hosts[n-1].SetLoss(netns.In, netns.Loss{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got, err := kvCmd(t, client, "-servers", addrs[i], "-timeout", "500ms", "-deadline", "60s", "get", "hello").Output()
		if err != nil || strings.TrimSpace(string(got)) != "world" {
			t.Errorf("get hello from replica %d = %q, %v; want world", i, got, err)
		}
	}
	for i := range n {
		for c := range clients {
			out, err := kvCmd(t, client, "-servers", addrs[i], "-timeout", "1s", "-deadline", "60s", "-local", "verify", "-n", fmt.Sprint(puts), "-c", "16", "-prefix", fmt.Sprintf("w%d", c)).CombinedOutput()
			if err != nil {
				t.Errorf("replica %d: verify of client %d's puts: %v\n%s", i, c, err, out)
			}
		}
	}
	t.Logf("every replica holds every acknowledged put (checked in %v)", time.Since(verifyStart).Round(time.Millisecond))

	// Nothing applied twice at any replica; every acknowledged put applied
	// exactly once at each replica that ran throughout and never took
	// another's state (a "snapshot" line: what it brought was applied
	// elsewhere, so the log cannot show it; the gets above checked it).
	names, _ := filepath.Glob(filepath.Join(dir, "applied-*"))
	complete := 0
	for _, path := range names {
		name := filepath.Base(path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fresh := map[string]int{}
		opens := 0
		var snapshots []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "snapshot":
				snapshots = append(snapshots, line)
			case len(f) == 3 && f[0] == "0":
				opens++ // a session opened (a retried open opens another)
			case len(f) == 3 && f[2] == "fresh":
				fresh[f[0]+" "+f[1]]++
			}
		}
		for id, n := range fresh {
			if n > 1 {
				t.Errorf("%s: request %s applied %d times", name, id, n)
			}
		}
		var i, run int
		fmt.Sscanf(name, "applied-%d-%d", &i, &run)
		if run == 1 && !slices.Contains(victims, i) && len(snapshots) == 0 {
			complete++
			for id := range acked {
				if fresh[id] != 1 {
					t.Errorf("%s: acknowledged request %s applied %d times", name, id, fresh[id])
				}
			}
		}
		t.Logf("%s: %d requests applied, %d sessions opened, snapshots taken %q", name, len(fresh), opens, snapshots)
	}
	t.Logf("%d replicas ran throughout without a snapshot: their logs hold every acknowledged put", complete)
	if cut > 0 {
		// The cut stopped every replica: each joined again (its log says
		// so), and the group re-formed with the state (the gets above).
		for i := range n {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("log-%d-1", i)))
			if !strings.Contains(string(b), "joining again") {
				t.Errorf("replica %d did not stop during the cut (log-%d-1 has no \"joining again\")", i, i)
			}
		}
	}
}

// historyOps is how many operations each client host's history client
// runs (two clients, one at a time each): about as long as the puts.
const historyOps = 600

func parseHistory(t *testing.T, out []byte) []kv.HistoryOp {
	var h []kv.HistoryOp
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var o kv.HistoryOp
		if err := dec.Decode(&o); err != nil {
			t.Errorf("history: %v", err)
			break
		}
		h = append(h, o)
	}
	return h
}

// checkHistory checks the clients' history for linearizability, and
// that it has every operation and their reads, cas and answers.
func checkHistory(t *testing.T, h []kv.HistoryOp, want int, faultAt time.Time) {
	t.Helper()
	checkHistoryJudged(t, h, want, faultAt, t.Errorf)
}

// checkHistoryJudged is checkHistory with the linearizability verdict
// given to judge (thesis mode's run outside its timing assumptions
// logs it rather than failing).
func checkHistoryJudged(t *testing.T, h []kv.HistoryOp, want int, faultAt time.Time, judge func(string, ...any)) {
	t.Helper()
	kinds := map[kv.OpKind]int{}
	answered, after := 0, 0
	for _, o := range h {
		kinds[o.Op.Kind]++
		if o.Answered {
			answered++
		}
		if o.Call > faultAt.UnixNano() {
			after++
		}
	}
	if len(h) != want || kinds[kv.OpGet] == 0 || kinds[kv.OpCAS] == 0 {
		t.Errorf("history: %d operations (%v), want %d with gets and cas", len(h), kinds, want)
	}
	if after == 0 || after == len(h) {
		t.Errorf("history: %d of %d operations called after the fault, want some before and some after", after, len(h))
	}
	start := time.Now()
	if err := kv.CheckHistory(h, time.Minute); err != nil {
		judge("%v", err)
	} else {
		t.Logf("history of %d operations (%d answered, %d called after the fault; gets %d, puts %d, dels %d, cas %d) linearizable, checked in %v",
			len(h), answered, after, kinds[kv.OpGet], kinds[kv.OpPut], kinds[kv.OpDelete], kinds[kv.OpCAS], time.Since(start).Round(time.Millisecond))
	}
}

// rejoined lists the replicas whose logs so far show a run that the
// group stopped, or that was killed (a second run).
func rejoined(t *testing.T, dir string, n int) []int {
	var out []int
	for i := range n {
		logs, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("log-%d-*", i)))
		stopped := len(logs) > 1
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			stopped = stopped || strings.Contains(string(b), "joining again")
		}
		if stopped {
			out = append(out, i)
		}
	}
	return out
}

// slowest reads the slowest put from load's last line ("done N puts in
// D, slowest D").
func slowest(t *testing.T, done string) time.Duration {
	_, s, ok := strings.Cut(done, "slowest ")
	d, err := time.ParseDuration(s)
	if !ok || err != nil {
		t.Fatalf("load's last line %q: no slowest put", done)
	}
	return d
}

// TestNetnsThroughput is the put benchmark of docs/kv.md: three replicas,
// a client host running -c concurrent clients of 128-byte puts, without
// loss. RBCAST_KV_BENCH_N puts (it runs only when that is set);
// RBCAST_KV_BENCH_C clients (default 32).
func TestNetnsThroughput(t *testing.T) {
	if os.Getenv("RBCAST_KV_BENCH_N") == "" {
		// A measurement, not a test: its numbers need an idle machine, and
		// a loaded CI run under -race made its load fail (exit 66).
		t.Skip("a benchmark: set RBCAST_KV_BENCH_N (and RBCAST_KV_BENCH_C) to run it")
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbkvb", Addresses: true})
	puts, conc := envInt(t, "RBCAST_KV_BENCH_N", 2000), envInt(t, "RBCAST_KV_BENCH_C", 32)
	var addrs []string
	var kids []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
	})
	for i, h := range topo.Hosts[:3] {
		addrs = append(addrs, h.IP.String()+":7723")
		cmd := kvCmd(t, h, "serve", "-i", "eth0", "-group", "24", "-members", "3", "-listen", addrs[i], "-node", fmt.Sprint(i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, cmd)
	}
	servers := strings.Join(addrs, ",")
	client := topo.Hosts[3]
	if out, err := kvCmd(t, client, "-servers", servers, "-deadline", "20s", "put", "hello", "world").CombinedOutput(); err != nil {
		t.Fatalf("the first put: %v: %s", err, out)
	}
	out, err := kvCmd(t, client, "-servers", servers, "-timeout", "1s", "load", "-n", fmt.Sprint(puts), "-c", fmt.Sprint(conc), "-size", "128").Output()
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("3 replicas, %d clients, 128-byte puts: %s", conc, lines[len(lines)-1])
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// TestNetnsThesis: thesis mode (docs/kv.md): three replicas sharing their
// Q and D lists through BDSM on one segment, clients on a fourth host —
// concurrent puts and a history client — and one replica killed with
// SIGKILL after 100 puts (not restarted: thesis mode has no rejoin).
// Every put is acknowledged; the two survivors executed the same
// sequence, the victim a prefix of it; every acknowledged put was
// executed exactly once at each survivor and is served by both; the
// history is linearizable. Those are thesis mode's guarantees only while
// its timing assumptions hold (docs/kv.md): a run in which a survivor
// refused a late copy of the other's (logged as a warning) is outside them, and its
// sequences and history are reported, not judged — as kv.TestThesisSim
// does with such seeds — and the test ends skipped. Every other check
// stands.
func TestNetnsThesis(t *testing.T) {
	netnstest.RequireRoot(t)
	const n, victim, puts = 3, 1, 400
	topo := netnstest.Up(t, netns.Options{Hosts: n + 1, Prefix: "rbkvt", Addresses: true})
	dir := t.TempDir()
	var addrs []string
	for _, h := range topo.Hosts[:n] {
		addrs = append(addrs, h.IP.String()+":7723")
	}
	servers := strings.Join(addrs, ",")
	replicas := make([]*exec.Cmd, n)
	t.Cleanup(func() {
		for _, c := range replicas {
			if c != nil {
				c.Process.Kill()
				c.Wait()
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log-*"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), b)
			}
		}
	})
	// The failure timeout: 150 ms once, until a fresh-clone CI (two
	// packages' netns tests at once under -race on two CPUs) left one
	// survivor unheard for 150 ms 23 s after the kill; the two survivors
	// then removed each other (failed, then stalled) and their executed
	// sequences parted, as a static group's must after a false suspicion
	// (thesis mode cannot rejoin). The kill is what this test is about.
	// t_r: 50 ms once, until ci61 (the machine's load average 8–13 from
	// other work besides the test packages) delayed copies 48–164 ms past
	// their deadlines and left a survivor unheard for 400 ms: thesis mode
	// assumes a synchronous system, so the test gives the bounds room for
	// a loaded CI host (t_r 100 ms, failure timeout 1 s; requests' timeouts
	// above the resulting Δ of about 200 ms).
	for i := range n {
		cmd := kvCmd(t, topo.Hosts[i], "serve", "-mode", "thesis", "-tr", "100ms", "-eps", "2ms", "-i", "eth0", "-group", "25",
			"-members", fmt.Sprint(n), "-listen", addrs[i], "-node", fmt.Sprint(i), "-failure-timeout", "1s",
			"-applied", filepath.Join(dir, fmt.Sprintf("applied-%d", i)))
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("log-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replicas[i] = cmd
	}
	client := topo.Hosts[n]
	if out, err := kvCmd(t, client, "-servers", servers, "-deadline", "20s", "put", "hello", "world").CombinedOutput(); err != nil {
		t.Fatalf("the first put: %v: %s", err, out)
	}
	load := kvCmd(t, client, "-servers", servers, "-timeout", "1s", "load", "-n", fmt.Sprint(puts), "-c", "8", "-prefix", "t", "-slow", "500ms")
	out, err := load.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var loadErr strings.Builder
	load.Stderr = &loadErr
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	histCmd := kvCmd(t, client, "-servers", servers, "-timeout", "1s", "-deadline", "60s", "history", "-n", "300", "-c", "2", "-keys", "4")
	var histErr strings.Builder
	histCmd.Stderr = &histErr
	histc := make(chan []kv.HistoryOp, 1)
	go func() {
		b, err := histCmd.Output()
		if err != nil {
			t.Errorf("history: %v: %s", err, histErr.String())
		}
		histc <- parseHistory(t, b)
	}()
	acked := map[string]bool{}
	var faultAt time.Time
	var done string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked[id] = true
			if len(acked) == 100 && faultAt.IsZero() {
				faultAt = time.Now()
				replicas[victim].Process.Kill() // SIGKILL
				replicas[victim].Wait()
				replicas[victim] = nil
				t.Logf("killed replica %d after 100 puts", victim)
			}
		} else if strings.HasPrefix(sc.Text(), "slow put ") {
			t.Logf("%s", sc.Text())
		} else {
			done = sc.Text()
		}
	}
	if err := load.Wait(); err != nil {
		t.Fatalf("load: %v: %s", err, loadErr.String())
	}
	t.Logf("load: %s", done)
	if len(acked) != puts {
		t.Fatalf("%d puts acknowledged, want %d", len(acked), puts)
	}
	// judge fails the test on a broken guarantee, unless a survivor has
	// logged a late copy of the other's: then the run is outside the
	// assumptions, and the test skips at its end (a run that judged
	// nothing is not a pass).
	unjudged := 0
	judge := func(format string, args ...any) {
		t.Helper()
		if late, first := lateCopies(t, dir, n, victim); late > 0 {
			unjudged++
			t.Logf("outside thesis mode's timing assumptions (%d late copies refused, the first: %s), not judged: "+format,
				append([]any{late, first}, args...)...)
			return
		}
		t.Errorf(format, args...)
	}
	checkHistoryJudged(t, <-histc, 300, faultAt, judge)
	for i := range n {
		if i == victim {
			continue
		}
		if out, err := kvCmd(t, client, "-servers", addrs[i], "-timeout", "1s", "-deadline", "30s", "verify", "-n", fmt.Sprint(puts), "-c", "8", "-prefix", "t").CombinedOutput(); err != nil {
			judge("replica %d: verify: %v\n%s", i, err, out)
		}
	}
	// The executed sequences: the survivors' equal, the victim's a prefix.
	logs := make([][]string, n)
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("applied-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	a, b := logs[0], logs[2]
	// The verify gets of the last replica checked may still be on their
	// way at the other: compare the common length, which must be nearly all.
	m := min(len(a), len(b))
	if !slices.Equal(a[:m], b[:m]) || max(len(a), len(b))-m > 100 {
		judge("the survivors' executed sequences differ: %d and %d requests, first difference at %d", len(a), len(b), firstDiffStr(a, b))
	}
	if v := logs[victim]; !slices.Equal(v, a[:min(len(v), len(a))]) {
		judge("the victim's %d requests are not a prefix of the survivors' sequence (first difference at %d)", len(v), firstDiffStr(v, a))
	}
	for _, l := range [][]string{a, b} {
		fresh := map[string]int{}
		for _, line := range l {
			if f := strings.Fields(line); len(f) == 3 && f[2] == "fresh" && f[0] != "0" {
				fresh[f[0]+" "+f[1]]++
			}
		}
		for id := range acked {
			if fresh[id] != 1 {
				judge("acknowledged put %s executed %d times", id, fresh[id])
			}
		}
		for id, c := range fresh {
			if c > 1 {
				judge("request %s executed %d times", id, c)
			}
		}
	}
	t.Logf("executed sequences: %d, %d (victim), %d requests", len(logs[0]), len(logs[victim]), len(logs[2]))

	// The victim started again: thesis mode has no state transfer.
	again := kvCmd(t, topo.Hosts[victim], "serve", "-mode", "thesis", "-tr", "100ms", "-eps", "2ms", "-i", "eth0", "-group", "25",
		"-members", fmt.Sprint(n), "-listen", addrs[victim], "-node", fmt.Sprint(victim), "-failure-timeout", "1s")
	var againErr bytes.Buffer
	again.Stderr = &againErr
	if err := again.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- again.Wait() }()
	select {
	case err := <-exited:
		const want = "a replica cannot rejoin a running group: thesis mode has no state transfer"
		if err == nil || !strings.Contains(againErr.String(), want) || !strings.Contains(againErr.String(), "already full") {
			t.Errorf("the victim started again: %v, want exit 2 saying %q and the group is full:\n%s", err, want, againErr.String())
		} else {
			t.Logf("the victim started again is refused: %s", strings.TrimSpace(againErr.String()[strings.LastIndex(againErr.String(), "rbcast-kv serve:"):]))
		}
	case <-time.After(10 * time.Second):
		again.Process.Kill()
		<-exited
		t.Errorf("the victim started again still ran after 10 s:\n%s", againErr.String())
	}
	if unjudged > 0 {
		t.Skipf("outside thesis mode's timing assumptions: %d safety checks failed and were logged, not judged", unjudged)
	}
}

// lateCopies counts the late copies (kv/thesis_server.go) the survivors
// logged of copies another survivor stamped, and returns the first one's
// text; the victim's own may be late because it was killed while
// sending them (a fading writer), which the assumptions allow.
func lateCopies(t *testing.T, dir string, n, victim int) (count int, first string) {
	t.Helper()
	for i := range n {
		if i == victim {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("log-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "thesis mode: a late copy") && !strings.Contains(line, fmt.Sprintf("(stamped by replica %d)", victim)) {
				if count == 0 {
					first = line
					if j := strings.Index(line, "copy="); j >= 0 {
						first = line[j:]
					}
				}
				count++
			}
		}
	}
	return count, first
}

func firstDiffStr(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
