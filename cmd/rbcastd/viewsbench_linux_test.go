package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkNetnsViews measures issue 19's targets on an idle 4-host netns
// segment with real rbcastd daemons under views (docs/benchmarks.md,
// "View changes"): three members run, host 1 streams to host 2 at a
// steady pace, and each iteration
//
//  1. starts rbcastd on host 3: the join latency is from the start of
//     `rbcastd run` (cmd.Start, which includes `ip netns exec`) to the
//     first view installed there (join-ms), and to that view installed
//     at every member (join-all-ms); join-exec-ms is from the process's
//     own start (the time it ran before main, which the daemon logs,
//     taken from its main: from the Go runtime's start, so after ip's
//     exec of it) and join-main-ms from its main, to the first view;
//  2. kills it with SIGKILL: from the kill to the next view installed at
//     every other member (fail-ms), and that beyond the failure timeout
//     (fail-over-ms);
//
// and the stable receiver's longest stall — the longest time its output
// did not grow — from each event to the view installed everywhere (plus
// 200 ms, measured 500 ms after it): stall-join-ms, stall-fail-ms; the
// stream is 64 bytes every 2 ms, so an undisturbed stream shows a few ms. Times are those the daemons log
// ("rbcast: view installed", JSON with nanoseconds) on the machine's one
// clock. Sub-benchmarks: -failure-timeout 1s and 300ms. Run it with
// `make bench-views` (-benchtime=Nx: N joins and N kills).
func BenchmarkNetnsViews(b *testing.B) {
	for _, failure := range []time.Duration{time.Second, 300 * time.Millisecond} {
		b.Run("failure="+failure.String(), func(b *testing.B) {
			netnstest.RequireRoot(b)
			viewsBench(b, netnstest.Up(b, netns.Options{Hosts: 4, Prefix: "rbm"}), failure)
		})
	}
}

// installed is one "rbcast: view installed" log line of a daemon.
type installed struct {
	at      time.Time
	view    uint32
	members int
}

// viewDaemon is one run of rbcastd whose log is parsed for installs.
type viewDaemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  []installed
	tail []string // the last log lines, for failures
	// main and exec are when its main began and, earlier by the time
	// the process ran before main, its start ("rbcastd: started").
	main, exec time.Time
}

func (d *viewDaemon) installs() []installed {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

func (d *viewDaemon) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			View    uint32    `json:"view"`
			Members string    `json:"members"`
			Main    time.Time `json:"main"`
			Before  float64   `json:"before_main_ms"`
		}
		line := sc.Text()
		d.mu.Lock()
		d.tail = append(d.tail, line)
		if len(d.tail) > 20 {
			d.tail = d.tail[1:]
		}
		if json.Unmarshal([]byte(line), &l) == nil {
			switch l.Msg {
			case "rbcast: view installed":
				d.log = append(d.log, installed{at: l.Time, view: l.View, members: len(strings.Fields(l.Members))})
			case "rbcastd: started":
				d.main, d.exec = l.Main, l.Main.Add(-time.Duration(l.Before*1e6))
			}
		}
		d.mu.Unlock()
	}
}

// arrivals records when the stable receiver's output grew.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) read(r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			a.mu.Lock()
			a.at = append(a.at, time.Now())
			a.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// stall is the longest time in [from, to] without output.
func (a *arrivals) stall(from, to time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, worst := from, time.Duration(0)
	for _, t := range a.at {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		worst = max(worst, t.Sub(last))
		last = t
	}
	return max(worst, to.Sub(last))
}

func viewsBench(b *testing.B, topo *netns.Topology, failure time.Duration) {
	const group = 19
	dir := b.TempDir()
	socket := func(i int) string { return fmt.Sprintf("%s/h%d.sock", dir, i) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var all []*viewDaemon
	start := func(i, members int) *viewDaemon {
		h := topo.Hosts[i]
		cmd := rbcastdCmd(ctx, h, "run", "-i", h.Iface, "-group", fmt.Sprint(group), "-members", fmt.Sprint(members),
			"-socket", socket(i), "-failure-timeout", failure.String(), "-log-format", "json", "-log-level", "info", "-node", fmt.Sprint(i))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		d := &viewDaemon{cmd: cmd, done: make(chan struct{})}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		go func() { d.read(out); cmd.Wait(); close(d.done) }()
		all = append(all, d)
		return d
	}
	defer func() {
		for _, d := range all {
			d.cmd.Process.Kill()
			<-d.done
		}
	}()
	// await returns when every daemon has installed a view of n members
	// with an id above after, and the latest of those installs.
	await := func(ds []*viewDaemon, n int, after uint32, what string) (uint32, time.Time) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var last time.Time
			var id uint32
			ok := true
			for _, d := range ds {
				found := false
				for _, in := range d.installs() {
					if in.view > after && in.members == n {
						found, id = true, max(id, in.view)
						if in.at.After(last) {
							last = in.at
						}
						break
					}
				}
				ok = ok && found
			}
			if ok {
				return id, last
			}
			if time.Now().After(deadline) {
				for i, d := range ds {
					d.mu.Lock()
					b.Logf("daemon %d: installs %v; last log lines:\n%s", i, d.log, strings.Join(d.tail, "\n"))
					d.mu.Unlock()
				}
				b.Fatalf("%s: no view of %d members above %d everywhere after 20 s", what, n, after)
			}
			time.Sleep(5 * time.Millisecond) // polls the daemons' logs; measures nothing
		}
	}
	stable := []*viewDaemon{start(0, 3), start(1, 3), start(2, 3)}
	v, _ := await(stable, 3, 0, "founding")

	// The stable stream: host 1 sends 64 bytes every 2 ms, host 2 reads.
	recv := rbcastdCmd(ctx, topo.Hosts[2], "recv", "-socket", socket(2), "-from", "1", "-format", "raw")
	rout, err := recv.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	arr := &arrivals{}
	if err := recv.Start(); err != nil {
		b.Fatal(err)
	}
	go arr.read(rout)
	defer func() { recv.Process.Kill(); recv.Wait() }()
	send := rbcastdCmd(ctx, topo.Hosts[1], "send", "-socket", socket(1))
	in, err := send.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := send.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); send.Process.Kill(); send.Wait() }()
	go func() {
		msg := []byte(strings.Repeat("v", 63) + "\n")
		for ctx.Err() == nil {
			if _, err := in.Write(msg); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)

	var join, joinAll, joinExec, joinMain, fail, stallJoin, stallFail []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		j := start(3, 4)
		id, everywhere := await(append(stable, j), 4, v, "join")
		first := j.installs()[0]
		join, joinAll = append(join, ms(first.at.Sub(t0))), append(joinAll, ms(everywhere.Sub(t0)))
		j.mu.Lock()
		if j.main.IsZero() {
			j.mu.Unlock()
			b.Fatal("the joiner logged no \"rbcastd: started\"")
		}
		joinExec, joinMain = append(joinExec, ms(first.at.Sub(j.exec))), append(joinMain, ms(first.at.Sub(j.main)))
		j.mu.Unlock()
		v = id
		time.Sleep(500 * time.Millisecond)
		stallJoin = append(stallJoin, ms(arr.stall(t0, everywhere.Add(200*time.Millisecond))))

		tk := time.Now()
		j.cmd.Process.Kill()
		<-j.done
		id, everywhere = await(stable, 3, v, "failure")
		fail = append(fail, ms(everywhere.Sub(tk)))
		v = id
		time.Sleep(500 * time.Millisecond)
		stallFail = append(stallFail, ms(arr.stall(tk, everywhere.Add(200*time.Millisecond))))
		b.Logf("iteration %d: join %.1f ms (everywhere %.1f; from exec %.1f, from main %.1f), failure to view %.1f ms, stalls %.1f / %.1f ms",
			i, join[i], joinAll[i], joinExec[i], joinMain[i], fail[i], stallJoin[i], stallFail[i])
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ReportMetric(med(join), "join-ms")
	b.ReportMetric(med(joinAll), "join-all-ms")
	b.ReportMetric(med(joinExec), "join-exec-ms")
	b.ReportMetric(med(joinMain), "join-main-ms")
	b.ReportMetric(med(fail), "fail-ms")
	b.ReportMetric(med(fail)-ms(failure), "fail-over-ms")
	b.ReportMetric(med(stallJoin), "stall-join-ms")
	b.ReportMetric(med(stallFail), "stall-fail-ms")
	b.ReportMetric(slices.Max(fail), "fail-max-ms")
	b.ReportMetric(0, "ns/op")
}
