package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkReport is docs/benchmarks.md's section "rbcastd": the daemon
// against the library it runs, in the same run, on the same 3-host netns
// segment (one sender, two receivers), each cell measured for the library
// (reliable.Group, every member a goroutine of this process) and then
// through the daemons (three `rbcastd run` processes and their clients as
// processes), REPS times, medians with ranges:
//
//   - goodput: the largest messages, as fast as Send accepts; library:
//     receivers RecvAppend, MB/s at the slower one until it has
//     everything; rbcastd: `rbcastd bench` at host 0 (until every member
//     acknowledged) with `rbcastd recv -from 0 -o /dev/null` at the others
//   - file: `rbcastd send FILE` to two `rbcastd recv -from 0 -bytes N -o
//     FILE`, from the start of send until both receivers have written the
//     whole file, SHA-256 equal (fails otherwise); against the library's
//     goodput
//   - 64 B: 64-byte messages, msg/s at the slower receiver (bench -size 64)
//   - FIFO one-way latency: one message in flight, host 0 → host 1 → host
//     0, half the round trip (bench -echo at host 1, bench -ping at host 0)
//   - total order self-delivery: one message in flight from an ordinary
//     member (not the sequencer) until it is delivered back to it (bench
//     -ping with its own id)
//   - total order, 3 senders × 1000 B: every member sends; ordered messages
//     delivered per member per second (the slowest member's; rbcastd: the
//     three `bench -size 1000`'s messages over the longest of their times,
//     with `recv -all -o /dev/null` at every member)
//
// Run it as root on an otherwise idle machine (make bench-rbcastd runs it
// and the corosync peers after it):
//
//	go test -run '^$' -bench '^BenchmarkReport$' -benchtime 1x -timeout 60m ./cmd/rbcastd
//
// RBCASTD_REPORT_MTUS: MTUs (default 1500,9000). RBCASTD_REPORT_REPS:
// repetitions (default 3). RBCASTD_REPORT_SECONDS: sending time of each
// throughput run (default 3). RBCASTD_REPORT_FILE_MB: the file's size
// (default 200). RBCASTD_REPORT_PINGS: pings per latency run (default
// 5000). RBCASTD_REPORT_PARTS: a subset of goodput,file,small,latency,total.
// RBCASTD_REPORT_OUT: also write the report to this file.
// RBCASTD_REPORT_PINGARGS: more flags for bench -ping and -echo.
// RBCASTD_REPORT_RECVARGS: more flags for the file row's recv -o FILE
// (say "-nap 500us"). RBCASTD_REPORT_FILE_DIR: where the file row's
// receivers write their copies (default: the run's temporary directory;
// say /dev/shm for tmpfs).
// RBCASTD_REPORT_PREFIX: the namespaces' name prefix (default rbrep).
// RBCASTD_REPORT_SPIN: how long every ring link polls before sleeping,
// the library's and the daemons' (-spin) alike (default: the ring's,
// 200 µs; 0: never). RBCASTD_REPORT_DAEMON_ENV: more environment for the
// rbcastd run processes only, space-separated (say "GOMAXPROCS=1").
// RBCASTD_REPORT_CLIENT_ENV: the same for the daemons' clients (bench,
// send, recv). RBCASTD_REPORT_LIBPROC_ENV: the same for the processes of
// the column "library, a process per member".
func BenchmarkReport(b *testing.B) {
	netnstest.RequireRoot(b)
	r := &report{b: b, reps: 3, secs: 3, fileMB: 200, pings: 5000, mtus: []int{1500, 9000},
		parts: map[string]bool{"goodput": true, "file": true, "small": true, "latency": true, "total": true}}
	r.envInts("RBCASTD_REPORT_MTUS", &r.mtus)
	r.envInt("RBCASTD_REPORT_REPS", &r.reps)
	r.envInt("RBCASTD_REPORT_SECONDS", &r.secs)
	r.envInt("RBCASTD_REPORT_FILE_MB", &r.fileMB)
	r.envInt("RBCASTD_REPORT_PINGS", &r.pings)
	spin := "the ring's default spin"
	if v := os.Getenv("RBCASTD_REPORT_SPIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("RBCASTD_REPORT_SPIN=%q: want a duration like 200us or 0", v)
		}
		r.spin, spin = -1, "no ring spin (RBCASTD_REPORT_SPIN=0)"
		if d > 0 {
			r.spin, spin = d, fmt.Sprintf("a ring spin of %v (RBCASTD_REPORT_SPIN)", d)
		}
	}
	if p := os.Getenv("RBCASTD_REPORT_PARTS"); p != "" {
		r.parts = map[string]bool{}
		for _, x := range strings.Split(p, ",") {
			switch x {
			case "goodput", "file", "small", "latency", "total":
				r.parts[x] = true
			default:
				b.Fatalf("RBCASTD_REPORT_PARTS: unknown part %q (have goodput,file,small,latency,total)", x)
			}
		}
	}
	r.out = os.Stdout
	if p := os.Getenv("RBCASTD_REPORT_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		r.out = io.MultiWriter(os.Stdout, f)
	}
	r.printf("## rbcastd\n\nBenchmarkReport (cmd/rbcastd): 3 netns hosts on one bridge, one sender (host 0), two receivers; %d s per throughput run, %d repetitions, medians (range in brackets); library and daemon back to back in each repetition, %s; %s; load average at start %s.\n\n",
		r.secs, r.reps, spin, machine(), loadavg())
	for _, mtu := range r.mtus {
		r.mtu(mtu)
	}
	r.printf("load average at end %s\n", loadavg())
}

type report struct {
	b                         testing.TB
	spin                      time.Duration // ring.Config.RxSpin; -1: never
	out                       io.Writer
	reps, secs, fileMB, pings int
	mtus                      []int
	parts                     map[string]bool
	topoN                     int
	libGroups                 atomic.Uint32
}

// row is one line of the report: the library's and the daemon's values
// per repetition.
type row struct {
	what, unit   string
	lib, d       []float64
	libCPU, dCPU []float64 // CPU-ms per MB delivered to each receiver (throughput rows)
	procs        []float64 // the library with each member a process (throughput rows)
	procsCPU     []float64
	target       string
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(r.out, format, args...) }

func (r *report) envInt(name string, v *int) {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			r.b.Fatalf("%s=%q: want a positive integer", name, s)
		}
		*v = n
	}
}

func (r *report) envInts(name string, v *[]int) {
	if s := os.Getenv(name); s != "" {
		var out []int
		for _, x := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil || n < 68 {
				r.b.Fatalf("%s=%q: want MTUs like 1500,9000", name, s)
			}
			out = append(out, n)
		}
		*v = out
	}
}

// mtu runs every part on a fresh topology of this MTU and prints its
// table.
func (r *report) mtu(mtu int) {
	r.topoN++
	prefix := "rbrep"
	if p := os.Getenv("RBCASTD_REPORT_PREFIX"); p != "" {
		prefix = p
	}
	topo, err := netns.New(netns.Options{Hosts: 3, MTU: mtu, Prefix: fmt.Sprintf("%s%d", prefix, r.topoN)})
	if err != nil {
		r.b.Fatal(err)
	}
	defer topo.Close()
	dir := r.b.TempDir()
	rows := map[string]*row{}
	var order []string // row keys, in the order of the table
	add := func(key, what, unit, target string) *row {
		if rows[key] == nil {
			rows[key] = &row{what: what, unit: unit, target: target}
			order = append(order, key)
		}
		return rows[key]
	}
	var file string
	if r.parts["file"] {
		file = filepath.Join(dir, "in")
		writeRandom(r.b, file, r.fileMB<<20)
	}
	fifoParts := r.parts["goodput"] || r.parts["file"] || r.parts["small"] || r.parts["latency"]
	for rep := range r.reps {
		r.b.Logf("MTU %d, repetition %d of %d, load %s", mtu, rep+1, r.reps, loadavg())
		// The library first, with no daemon on the segment: a daemon's
		// link receives (and drops) every frame of the EtherType.
		var goodput, goodputCPU, small, smallCPU, l50, l99, s50, s99, t3 float64
		var pGoodput, pGoodputCPU, pSmall, pSmallCPU float64
		if r.parts["goodput"] || r.parts["file"] {
			goodput, _, goodputCPU = r.libOneToAll(topo, 0)
			pGoodput, _, pGoodputCPU = r.libProcs(topo, 0)
		}
		if r.parts["small"] {
			_, small, smallCPU = r.libOneToAll(topo, 64)
			_, pSmall, pSmallCPU = r.libProcs(topo, 64)
		}
		if r.parts["latency"] {
			l50, l99 = r.libPing(topo)
		}
		if r.parts["total"] {
			s50, s99 = r.libSelf(topo)
			t3 = r.libTotal3(topo)
		}
		if fifoParts {
			fifo := r.startDaemons(topo, "fifo", dir)
			if r.parts["goodput"] {
				x := add("goodput", "goodput, largest messages (bench)", "MB/s", "≥ 0.85 × library")
				res, cpu := fifo.benchGoodput(0)
				x.procs, x.procsCPU = append(x.procs, pGoodput), append(x.procsCPU, pGoodputCPU)
				x.lib, x.libCPU = append(x.lib, goodput), append(x.libCPU, goodputCPU)
				x.d, x.dCPU = append(x.d, res.MBPerSec), append(x.dCPU, cpu)
			}
			if r.parts["file"] {
				x := add("file", fmt.Sprintf("send FILE (%d MB) → 2 × recv -o FILE, SHA-256 equal; library: goodput", r.fileMB), "MB/s", "≥ 0.75 × library")
				mbps, cpu := fifo.sendFile(file, r.fileMB<<20)
				x.procs, x.procsCPU = append(x.procs, pGoodput), append(x.procsCPU, pGoodputCPU)
				x.lib, x.libCPU = append(x.lib, goodput), append(x.libCPU, goodputCPU)
				x.d, x.dCPU = append(x.d, mbps), append(x.dCPU, cpu)
			}
			if r.parts["small"] {
				x := add("small", "64-byte messages to 2 receivers", "msg/s", "≥ 1 M msg/s")
				res, cpu := fifo.benchGoodput(64)
				x.procs, x.procsCPU = append(x.procs, pSmall), append(x.procsCPU, pSmallCPU)
				x.lib, x.libCPU = append(x.lib, small), append(x.libCPU, smallCPU)
				x.d, x.dCPU = append(x.d, res.MsgsPerSec), append(x.dCPU, cpu)
			}
			if r.parts["latency"] {
				p50, p99 := add("fifo50", "FIFO one-way latency p50 (half the round trip)", "µs", "≤ 25 µs"),
					add("fifo99", "FIFO one-way latency p99", "µs", "")
				d50, d99 := fifo.ping()
				p50.lib, p99.lib = append(p50.lib, l50), append(p99.lib, l99)
				p50.d, p99.d = append(p50.d, d50), append(p99.d, d99)
			}
			fifo.stop()
		}
		if r.parts["total"] {
			total := r.startDaemons(topo, "total", dir)
			p50, p99 := add("self50", "total order self-delivery p50, ordinary member", "µs", "≤ 60 µs"),
				add("self99", "total order self-delivery p99", "µs", "≤ 200 µs")
			d50, d99 := total.selfPing()
			p50.lib, p99.lib = append(p50.lib, s50), append(p99.lib, s99)
			p50.d, p99.d = append(p50.d, d50), append(p99.d, d99)
			x := add("total3", "total order, 3 senders × 1000 B, ordered msg/s per member", "msg/s", "≥ 0.8 × library, ≥ 5 × corosync")
			x.lib = append(x.lib, t3)
			x.d = append(x.d, total.total3())
			total.stop()
		}
	}
	r.printf("### MTU %d\n\n| measurement | library | rbcastd | rbcastd / library | target | library, a process per member | CPU-ms per MB: library / a process per member / rbcastd |\n|---|---|---|---|---|---|---|\n", mtu)
	for _, k := range order {
		x := rows[k]
		ratio := median(x.d) / median(x.lib)
		cpu := "—"
		if len(x.dCPU) > 0 {
			cpu = fmt.Sprintf("%.1f / %.1f / %.1f", median(x.libCPU), median(x.procsCPU), median(x.dCPU))
		}
		r.printf("| %s | %s | %s | %.2f | %s | %s | %s |\n", x.what, cell(x.lib, x.unit), cell(x.d, x.unit), ratio, x.target, cell(x.procs, x.unit), cpu)
	}
	r.printf("\n")
}

// cell is "median (min–max) unit".
func cell(v []float64, unit string) string {
	if len(v) == 0 {
		return "—"
	}
	f := func(x float64) string {
		switch {
		case unit == "msg/s" && x >= 1e6:
			return fmt.Sprintf("%.2f M", x/1e6)
		case unit == "msg/s":
			return fmt.Sprintf("%.0f k", x/1e3)
		case x >= 100:
			return fmt.Sprintf("%.0f", x)
		}
		return fmt.Sprintf("%.1f", x)
	}
	if len(v) == 1 {
		return f(v[0]) + " " + unit
	}
	return fmt.Sprintf("%s (%s–%s) %s", f(median(v)), f(slices.Min(v)), f(slices.Max(v)), unit)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var u syscall.Utsname
	syscall.Uname(&u)
	rel := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	return fmt.Sprintf("%d CPUs (%s), Linux %s", runtime.NumCPU(), model, rel)
}

// --- the library, in this process -----------------------------------

// libJoin joins a fresh group of the topology's hosts with static members,
// every member a goroutine of this process on a ring link.
func (r *report) libJoin(topo *netns.Topology, base reliable.Config) ([]*reliable.Group, func()) {
	links := make([]link.Link, len(topo.Hosts))
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		err := h.Do(func() error {
			var err error
			links[i], err = ring.Open(h.Iface, ring.Config{RxSpin: r.spin})
			return err
		})
		if err != nil {
			r.b.Fatal(err)
		}
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	gid := 3000 + r.libGroups.Add(1)
	groups := make([]*reliable.Group, len(links))
	for i, l := range links {
		cfg := base
		cfg.Group, cfg.Members, cfg.Self, cfg.Logger = gid, members, frame.MemberID(i), quiet
		g, err := reliable.Join(context.Background(), l, cfg)
		if err != nil {
			r.b.Fatal(err)
		}
		groups[i] = g
	}
	return groups, func() {
		for _, g := range groups {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			g.Leave(ctx)
			cancel()
		}
		for _, l := range links {
			l.Close()
		}
	}
}

// libOneToAll: member 0 sends size-byte messages (0: the largest) for
// the run's time; members 1 and 2 RecvAppend. MB/s and msg/s at the
// slower receiver, until it has everything.
func (r *report) libOneToAll(topo *netns.Topology, size int) (mbps, msgps, cpuPerMB float64) {
	groups, stop := r.libJoin(topo, reliable.Config{})
	defer stop()
	cpu0 := selfCPU()
	if size == 0 {
		size = groups[0].MaxMessage()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := make([]atomic.Uint64, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 65536)
			for {
				_, data, err := g.RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				counts[i+1].Add(uint64(len(data)))
			}
		}()
	}
	msg := make([]byte, size)
	var sent uint64
	d := time.Duration(r.secs) * time.Second
	start := time.Now()
	for time.Since(start) < d {
		if err := groups[0].Send(ctx, msg); err != nil {
			r.b.Fatal(err)
		}
		sent++
	}
	want := sent * uint64(size)
	for wait := time.Now(); time.Since(wait) < 10*time.Second; time.Sleep(100 * time.Microsecond) {
		if counts[1].Load() >= want && counts[2].Load() >= want {
			break
		}
	}
	el := time.Since(start).Seconds()
	cpu := selfCPU() - cpu0
	got := min(counts[1].Load(), counts[2].Load())
	cancel()
	wg.Wait()
	if got < want {
		r.b.Logf("library: a receiver missed %d bytes 10 s after the end", want-got)
	}
	return float64(got) / el / 1e6, float64(got/uint64(size)) / el, perMB(cpu, got)
}

// perMB is CPU time in ms per MB.
func perMB(cpu time.Duration, bytes uint64) float64 {
	if bytes == 0 {
		return 0
	}
	return float64(cpu) / float64(time.Millisecond) / (float64(bytes) / 1e6)
}

// selfCPU is this process's CPU time so far (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's CPU time so far (/proc/PID/stat; 0 if gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // fields from 3 on
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// libPing: one 23-byte message in flight, member 0 → member 1 → member 0
// (member 2 receives too); half the round trip's p50 and p99, in µs.
func (r *report) libPing(topo *netns.Topology) (p50, p99 float64) {
	groups, stop := r.libJoin(topo, reliable.Config{})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		buf := make([]byte, 0, 2048)
		for {
			_, data, err := groups[1].RecvAppend(ctx, buf[:0])
			if err != nil || groups[1].Send(ctx, data) != nil {
				return
			}
		}
	}()
	go func() {
		buf := make([]byte, 0, 2048)
		for {
			if _, _, err := groups[2].RecvAppend(ctx, buf[:0]); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 23)
	buf := make([]byte, 0, 2048)
	rtts := make([]time.Duration, 0, r.pings)
	for i := range r.pings + 100 {
		t0 := time.Now()
		if err := groups[0].Send(ctx, msg); err != nil {
			r.b.Fatal(err)
		}
		if _, _, err := groups[0].RecvAppend(ctx, buf[:0]); err != nil {
			r.b.Fatal(err)
		}
		if i >= 100 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return pct(rtts, 0.5) / 2, pct(rtts, 0.99) / 2
}

// libSelf: Order Total, one 23-byte message in flight from member 1 (not
// the sequencer) until its delivery back to member 1; p50 and p99 in µs.
func (r *report) libSelf(topo *netns.Topology) (p50, p99 float64) {
	groups, stop := r.libJoin(topo, reliable.Config{Order: reliable.Total})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, g := range []*reliable.Group{groups[0], groups[2]} {
		go func() {
			buf := make([]byte, 0, 2048)
			for {
				if _, _, err := g.RecvAppend(ctx, buf[:0]); err != nil {
					return
				}
			}
		}()
	}
	g := groups[1]
	msg := make([]byte, 23)
	buf := make([]byte, 0, 2048)
	lat := make([]time.Duration, 0, r.pings)
	for i := range r.pings + 100 {
		t0 := time.Now()
		if err := g.Send(ctx, msg); err != nil {
			r.b.Fatal(err)
		}
		for {
			from, _, err := g.RecvAppend(ctx, buf[:0])
			if err != nil {
				r.b.Fatal(err)
			}
			if from == g.Self() {
				break
			}
		}
		if i >= 100 {
			lat = append(lat, time.Since(t0))
		}
	}
	return pct(lat, 0.5), pct(lat, 0.99)
}

// libTotal3: Order Total, every member sends 1000-byte messages for the
// run's time while every member RecvAppends; messages delivered per
// second at the slowest member, until it has everything.
func (r *report) libTotal3(topo *netns.Topology) float64 {
	groups, stop := r.libJoin(topo, reliable.Config{Order: reliable.Total})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := make([]atomic.Uint64, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 65536)
			for {
				if _, _, err := g.RecvAppend(ctx, buf[:0]); err != nil {
					return
				}
				counts[i].Add(1)
			}
		}()
	}
	msg := make([]byte, 1000)
	sent := make([]uint64, len(groups))
	d := time.Duration(r.secs) * time.Second
	start := time.Now()
	var swg sync.WaitGroup
	for i, g := range groups {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for time.Since(start) < d {
				if err := g.Send(ctx, msg); err != nil {
					return
				}
				sent[i]++
			}
		}()
	}
	swg.Wait()
	total := sent[0] + sent[1] + sent[2]
	least := func() uint64 { return min(counts[0].Load(), counts[1].Load(), counts[2].Load()) }
	for wait := time.Now(); time.Since(wait) < 10*time.Second && least() < total; time.Sleep(100 * time.Microsecond) {
	}
	el := time.Since(start).Seconds()
	got := least()
	cancel()
	wg.Wait()
	return float64(got) / el
}

func pct(v []time.Duration, q float64) float64 {
	slices.Sort(v)
	return float64(v[min(len(v)-1, int(q*float64(len(v))))]) / float64(time.Microsecond)
}

// --- the library, one process per member ---------------------------

// libMemberSpec is what a library member process runs: a member of a
// group with static members on a ring link, sending size-byte messages
// for secs or counting what it receives.
type libMemberSpec struct {
	Group   uint32             `json:"group"`
	Members []frame.MemberInfo `json:"members"`
	Self    frame.MemberID     `json:"self"`
	Iface   string             `json:"iface"`
	Spin    time.Duration      `json:"spin"`
	Size    int                `json:"size"`
	Secs    int                `json:"secs"`
}

func init() {
	childMain = func() (int, bool) {
		spec := os.Getenv("RBCASTD_TEST_LIBMEMBER")
		if spec == "" {
			return 0, false
		}
		lifeline.Tie()
		if err := libMember(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		return 0, true
	}
}

// libMember is a library member process. It says "ready" once joined;
// the sender then waits for "go", sends for the run's time and says
// "sent N"; a receiver waits for "expect BYTES" and says "done" once it
// has them. Both leave at "stop".
func libMember(specJSON string, in io.Reader, out io.Writer) error {
	var spec libMemberSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	l, err := ring.Open(spec.Iface, ring.Config{RxSpin: spec.Spin})
	if err != nil {
		return err
	}
	defer l.Close()
	g, err := reliable.Join(context.Background(), l, reliable.Config{Group: spec.Group, Members: spec.Members, Self: spec.Self, Logger: quiet})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		g.Leave(ctx)
		cancel()
	}()
	lines := bufio.NewScanner(in)
	fmt.Fprintln(out, "ready")
	if spec.Self == 0 {
		if !lines.Scan() || lines.Text() != "go" {
			return errors.New("no go")
		}
		msg := make([]byte, spec.Size)
		var sent uint64
		d := time.Duration(spec.Secs) * time.Second
		for start := time.Now(); time.Since(start) < d; sent++ {
			if err := g.Send(context.Background(), msg); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "sent %d\n", sent)
	} else {
		var got atomic.Uint64
		go func() {
			buf := make([]byte, 0, 65536)
			for {
				_, data, err := g.RecvAppend(context.Background(), buf[:0])
				if err != nil {
					return
				}
				got.Add(uint64(len(data)))
			}
		}()
		var want uint64
		if !lines.Scan() {
			return errors.New("no expect")
		}
		fmt.Sscanf(lines.Text(), "expect %d", &want)
		for deadline := time.Now().Add(10 * time.Second); got.Load() < want && time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		}
		fmt.Fprintf(out, "done %d\n", got.Load())
	}
	for lines.Scan() && lines.Text() != "stop" {
	}
	return nil
}

// libProcs is libOneToAll with every member a process of its own in its
// host's namespace: the library's cost of being three processes, which
// the daemons are too.
func (r *report) libProcs(topo *netns.Topology, size int) (mbps, msgps, cpuPerMB float64) {
	var members []frame.MemberInfo
	for i, h := range topo.Hosts {
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(h.MAC), Incarnation: 1})
	}
	gid := 3000 + r.libGroups.Add(1)
	type kid struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		lines *bufio.Scanner
	}
	var kids []*kid
	defer func() {
		for _, k := range kids {
			k.in.Close()
			k.cmd.Wait()
		}
	}()
	for i, h := range topo.Hosts {
		spec := libMemberSpec{Group: gid, Members: members, Self: frame.MemberID(i), Iface: h.Iface, Spin: r.spin, Size: size, Secs: r.secs}
		if size == 0 {
			spec.Size = memMaxMessage(topo.MTU, len(members))
		}
		js, _ := json.Marshal(spec)
		cmd := h.Command(context.Background(), os.Args[0])
		cmd.Env = append(os.Environ(), "RBCASTD_TEST_LIBMEMBER="+string(js))
		cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("RBCASTD_REPORT_LIBPROC_ENV"))...)
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			r.b.Fatal(err)
		}
		k := &kid{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
		kids = append(kids, k)
		if !k.lines.Scan() || k.lines.Text() != "ready" {
			r.b.Fatalf("library member %d did not start", i)
		}
	}
	start := time.Now()
	fmt.Fprintln(kids[0].in, "go")
	var sent uint64
	if !kids[0].lines.Scan() {
		r.b.Fatal("the library's sender process failed")
	}
	fmt.Sscanf(kids[0].lines.Text(), "sent %d", &sent)
	want := sent * uint64(memMaxMessageOr(size, topo.MTU, len(members)))
	got := want
	for _, k := range kids[1:] {
		fmt.Fprintf(k.in, "expect %d\n", want)
	}
	for _, k := range kids[1:] {
		var n uint64
		if k.lines.Scan() {
			fmt.Sscanf(k.lines.Text(), "done %d", &n)
		}
		got = min(got, n)
	}
	el := time.Since(start).Seconds()
	var cpu time.Duration
	var each []string
	for _, k := range kids {
		fmt.Fprintln(k.in, "stop")
		k.in.Close()
		k.cmd.Wait()
		c := k.cmd.ProcessState.UserTime() + k.cmd.ProcessState.SystemTime()
		cpu += c
		each = append(each, fmt.Sprintf("%.2f", perMB(c, got)))
	}
	r.b.Logf("library, a process per member, %d-byte messages: CPU-ms per MB of members 0, 1, 2: %s", size, strings.Join(each, ", "))
	kids = nil
	sz := uint64(memMaxMessageOr(size, topo.MTU, len(members)))
	return float64(got) / el / 1e6, float64(got/sz) / el, perMB(cpu, got)
}

// memMaxMessage is the largest message of a registered group of n members
// at this MTU (reliable.Group.MaxMessage: what one frame carries with an
// acknowledgement entry per member). It was MTU − 28 − 4 × members until
// wire version 4 added the view id to the header.
func memMaxMessage(mtu, n int) int { return frame.MaxPayload(mtu, n, 0) }

func memMaxMessageOr(size, mtu, n int) int {
	if size > 0 {
		return size
	}
	return memMaxMessage(mtu, n)
}

// --- through the daemons ---------------------------------------------

// daemons is one rbcastd per host of the topology, and their clients.
type daemons struct {
	r     *report
	topo  *netns.Topology
	dir   string
	order string
	cmds  []*exec.Cmd
	done  []chan error
	logs  []*bytes.Buffer
	ids   []int
}

var reportGroup atomic.Uint32

// startDaemons starts `rbcastd run` on every host (host 0 the
// registration server) and waits until the group has started.
func (r *report) startDaemons(topo *netns.Topology, order, dir string) *daemons {
	g := 500 + reportGroup.Add(1)
	d := &daemons{r: r, topo: topo, dir: filepath.Join(dir, fmt.Sprintf("g%d", g)), order: order}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		r.b.Fatal(err)
	}
	for i, h := range topo.Hosts {
		args := []string{"run", "-i", h.Iface, "-group", fmt.Sprint(g), "-members", fmt.Sprint(len(topo.Hosts)),
			"-socket", d.socket(i), "-order", order, "-log-level", "warn"}
		if i == 0 {
			args = append(args, "-node", "0")
		}
		switch {
		case r.spin < 0:
			args = append(args, "-spin", "0")
		case r.spin > 0:
			args = append(args, "-spin", r.spin.String())
		}
		cmd := rbcastdCmd(context.Background(), h, args...)
		cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("RBCASTD_REPORT_DAEMON_ENV"))...)
		log := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			r.b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		d.cmds, d.done, d.logs = append(d.cmds, cmd), append(d.done, done), append(d.logs, log)
	}
	for i := range topo.Hosts {
		st, err := status(&socketFlags{socket: d.socket(i)}, 30*time.Second)
		if err != nil {
			d.stop()
			r.b.Fatalf("daemon on host %d: %v\n%s", i, err, d.logs[i])
		}
		d.ids = append(d.ids, st.Self)
	}
	return d
}

func (d *daemons) socket(i int) string { return filepath.Join(d.dir, fmt.Sprintf("h%d.sock", i)) }

// stop has every daemon leave (SIGTERM) and waits for it.
func (d *daemons) stop() {
	for _, c := range d.cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	for i, done := range d.done {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			d.cmds[i].Process.Kill()
			<-done
		}
	}
}

// cli is an rbcastd client command at host i.
func (d *daemons) cli(ctx context.Context, i int, args ...string) *exec.Cmd {
	cmd := rbcastdCmd(ctx, d.topo.Hosts[i], append([]string{args[0], "-socket", d.socket(i)}, args[1:]...)...)
	cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("RBCASTD_REPORT_CLIENT_ENV"))...)
	return cmd
}

// started is a client process running in the background.
type started struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

func (d *daemons) start(i int, args ...string) *started {
	s := &started{cmd: d.cli(context.Background(), i, args...), done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		d.r.b.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	return s
}

// end stops a background client (SIGTERM) and waits for it.
func (s *started) end() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// waitSubs waits until host i's daemon has k subscribers.
func (d *daemons) waitSubs(i, k int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := status(&socketFlags{socket: d.socket(i)}, 0)
		if err == nil && st.Subscribers >= k {
			return
		}
		if time.Now().After(deadline) {
			d.r.b.Fatalf("host %d: %d subscribers, want %d (%v)", i, st.Subscribers, k, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// output runs a client at host i to its end and returns its stdout and
// CPU time.
func (d *daemons) output(i int, args ...string) ([]byte, time.Duration) {
	cmd := d.cli(context.Background(), i, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		d.r.b.Fatalf("%v at host %d: %v\n%s", args, i, err, stderr.String())
	}
	return out, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// benchGoodput: `rbcastd bench -size size` at host 0 while hosts 1 and 2
// `recv -from <host 0> -o /dev/null`.
func (d *daemons) benchGoodput(size int) (benchResult, float64) {
	var recvs []*started
	for i := 1; i < 3; i++ {
		recvs = append(recvs, d.start(i, "recv", "-from", fmt.Sprint(d.ids[0]), "-o", os.DevNull))
		d.waitSubs(i, 1)
	}
	cpu0 := d.cpu(recvs)
	each0 := d.each(recvs)
	spins := d.logSpins(fmt.Sprintf("bench -size %d", size))
	out, benchCPU := d.output(0, "bench", "-json", "-size", fmt.Sprint(size), "-duration", fmt.Sprintf("%ds", d.r.secs))
	spins()
	cpu := d.cpu(recvs) - cpu0 + benchCPU
	each := d.each(recvs)
	for _, s := range recvs {
		s.end()
	}
	var res benchResult
	if err := json.Unmarshal(out, &res); err != nil {
		d.r.b.Fatalf("bench -json: %v: %s", err, out)
	}
	d.logEach(fmt.Sprintf("bench -size %d (bench %.2f ms per MB)", size, perMB(benchCPU, res.Bytes)), each0, each, res.Bytes)
	return res, perMB(cpu, res.Bytes)
}

// procUse is a process's CPU time so far.
type procUse struct {
	cpu time.Duration
}

// each is procUse of every daemon, then of every client in clients.
func (d *daemons) each(clients []*started) []procUse {
	var u []procUse
	for _, c := range d.cmds {
		u = append(u, procUseOf(c.Process.Pid))
	}
	for _, c := range clients {
		u = append(u, procUseOf(c.cmd.Process.Pid))
	}
	return u
}

// logEach logs, per process (the daemons, then the clients), the CPU-ms
// per MB between a and b.
func (d *daemons) logEach(what string, a, b []procUse, bytes uint64) {
	d.logPer(what, a, b, "per MB", "ms", func(cpu time.Duration) float64 { return perMB(cpu, bytes) })
}

// logPer logs, per process (the daemons, then the clients), per(the CPU
// time between a and b) in unit.
func (d *daemons) logPer(what string, a, b []procUse, per, unit string, of func(time.Duration) float64) {
	var each []string
	for i := range b {
		name := fmt.Sprintf("daemon %d", i)
		if i >= len(d.cmds) {
			name = fmt.Sprintf("client %d", i-len(d.cmds)+1)
		}
		each = append(each, fmt.Sprintf("%s %.2f %s", name, of(b[i].cpu-a[i].cpu), unit))
	}
	d.r.b.Logf("rbcastd, %s: %s: %s", what, per, strings.Join(each, "; "))
}

// procUseOf reads /proc/PID/stat (zero if gone).
func procUseOf(pid int) procUse { return procUse{cpu: procCPU(pid)} }

// cpu is the CPU time so far of the daemons and the running clients.
func (d *daemons) cpu(clients []*started) time.Duration {
	var t time.Duration
	for _, c := range d.cmds {
		t += procCPU(c.Process.Pid)
	}
	for _, c := range clients {
		t += procCPU(c.cmd.Process.Pid)
	}
	return t
}

// sendFile: `rbcastd send FILE` at host 0 to `recv -from <host 0> -bytes
// N -o FILE` at hosts 1 and 2; MB/s from the start of send until both
// receivers exited, with both copies' SHA-256 equal to the file's.
func (d *daemons) sendFile(file string, n int) (mbps, cpuPerMB float64) {
	var recvs []*started
	outDir := d.dir
	if v := os.Getenv("RBCASTD_REPORT_FILE_DIR"); v != "" {
		outDir = v
	}
	recvArgs := strings.Fields(os.Getenv("RBCASTD_REPORT_RECVARGS"))
	for i := 1; i < 3; i++ {
		out := filepath.Join(outDir, fmt.Sprintf("rbrep-out%d", i))
		args := append([]string{"recv", "-from", fmt.Sprint(d.ids[0]), "-bytes", fmt.Sprint(n), "-o", out}, recvArgs...)
		recvs = append(recvs, d.start(i, args...))
		d.waitSubs(i, 1)
	}
	cpu0 := d.cpu(nil)
	each0 := d.each(recvs)
	start := time.Now()
	_, sendCPU := d.output(0, "send", "-q", file)
	sent := time.Since(start)
	cpu := sendCPU
	for i, s := range recvs {
		select {
		case err := <-s.done:
			if err != nil {
				d.r.b.Fatalf("recv at host %d: %v\n%s", i+1, err, s.out.String())
			}
		case <-time.After(60 * time.Second):
			s.cmd.Process.Kill()
			d.r.b.Fatalf("recv at host %d did not end 60 s after send\n%s", i+1, s.out.String())
		}
	}
	el := time.Since(start)
	cpu += d.cpu(nil) - cpu0
	each := d.each(nil)
	for i, s := range recvs {
		t := s.cmd.ProcessState.UserTime() + s.cmd.ProcessState.SystemTime()
		cpu += t
		each = append(each, procUse{cpu: each0[len(d.cmds)+i].cpu + t})
	}
	d.logEach(fmt.Sprintf("send FILE (send %.2f ms per MB, its exit after %v of %v)", perMB(sendCPU, uint64(n)), sent.Round(time.Millisecond), el.Round(time.Millisecond)), each0, each, uint64(n))
	want := fileHash(d.r.b, file)
	for i := 1; i < 3; i++ {
		out := filepath.Join(outDir, fmt.Sprintf("rbrep-out%d", i))
		if got := fileHash(d.r.b, out); got != want {
			d.r.b.Fatalf("host %d's copy of the file: SHA-256 %x, the file's %x", i, got, want)
		}
		os.Remove(out)
	}
	return float64(n) / el.Seconds() / 1e6, perMB(cpu, uint64(n))
}

// writeRandom writes n pseudo-random bytes to path.
func writeRandom(tb testing.TB, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var key [32]byte
	src := rand.NewChaCha8(key)
	if _, err := io.CopyN(f, src, int64(n)); err != nil {
		tb.Fatal(err)
	}
}

func fileHash(tb testing.TB, path string) [32]byte {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// ping: bench -echo at host 1, bench -ping <host 1> at host 0; half the
// round trip's p50 and p99 in µs.
func (d *daemons) ping() (p50, p99 float64) {
	echo := d.start(1, append([]string{"bench", "-echo"}, pingArgs()...)...)
	defer func() {
		echo.end()
		if d.r.b.Failed() { // the ping failed: say what the echo said
			d.r.b.Logf("bench -echo at host 1 (%v): %q", echo.cmd.ProcessState, echo.out.String())
		}
	}()
	d.waitSubs(1, 1)
	defer d.logSpins("FIFO ping")()
	r := d.pingRun(0, d.ids[1], []*started{echo})
	return r.P50us / 2, r.P99us / 2
}

// selfPing: under total order, bench -ping <own id> at host 1 (not the
// sequencer: host 0 is member 0).
func (d *daemons) selfPing() (p50, p99 float64) {
	defer d.logSpins("total-order self-ping")()
	r := d.pingRun(1, d.ids[1], nil)
	return r.P50us, r.P99us
}

// logSpins reads every daemon's ring spin counters (link.Stats: hits,
// misses, skips) and returns a func that logs what they counted since,
// per second.
func (d *daemons) logSpins(what string) func() {
	read := func() ([]daemon.Status, time.Time) {
		var st []daemon.Status
		for i := range d.cmds {
			s, err := status(&socketFlags{socket: d.socket(i)}, 0)
			if err != nil {
				s = &daemon.Status{}
			}
			st = append(st, *s)
		}
		return st, time.Now()
	}
	a, t0 := read()
	return func() {
		b, t1 := read()
		secs := t1.Sub(t0).Seconds()
		var each []string
		for i := range b {
			each = append(each, fmt.Sprintf("daemon %d %.0f/%.0f/%.0f", i,
				float64(b[i].LinkSpinHits-a[i].LinkSpinHits)/secs, float64(b[i].LinkSpinMisses-a[i].LinkSpinMisses)/secs,
				float64(b[i].LinkSpinSkips-a[i].LinkSpinSkips)/secs))
		}
		d.r.b.Logf("rbcastd, %s: ring spin hits/misses/skips per s: %s", what, strings.Join(each, "; "))
	}
}

// pingArgs are RBCASTD_REPORT_PINGARGS, more flags for bench -ping and
// -echo (say "-rings -spin 200us").
func pingArgs() []string { return strings.Fields(os.Getenv("RBCASTD_REPORT_PINGARGS")) }

// pingRun: bench -ping to at host i. It logs the CPU time per ping of
// each daemon, of clients (an echo) and of the ping's own client.
func (d *daemons) pingRun(i, to int, clients []*started) pingResult {
	each0 := d.each(clients)
	out, pingCPU := d.output(i, append([]string{"bench", "-json", "-ping", fmt.Sprint(to), "-count", fmt.Sprint(d.r.pings)}, pingArgs()...)...)
	each := d.each(clients)
	var r pingResult
	if err := json.Unmarshal(out, &r); err != nil {
		d.r.b.Fatalf("bench -ping -json: %v: %s", err, out)
	}
	pings := float64(d.r.pings)
	d.logPer(fmt.Sprintf("bench -ping at host %d (ping %.2f µs per ping)", i, float64(pingCPU)/1e3/pings), each0, each,
		"CPU per ping", "µs", func(cpu time.Duration) float64 { return float64(cpu) / 1e3 / pings })
	return r
}

// total3: every host runs `bench -size 1000` at once, with `recv -all -o
// /dev/null` at each; the messages of all three over the longest time.
func (d *daemons) total3() float64 {
	var recvs []*started
	for i := range 3 {
		recvs = append(recvs, d.start(i, "recv", "-all", "-o", os.DevNull))
		d.waitSubs(i, 1)
	}
	res := make([]benchResult, 3)
	defer d.logSpins("3 senders × 1000 B")()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _ := d.output(i, "bench", "-json", "-size", "1000", "-duration", fmt.Sprintf("%ds", d.r.secs))
			if err := json.Unmarshal(out, &res[i]); err != nil {
				d.r.b.Errorf("bench -json at host %d: %v: %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	for _, s := range recvs {
		s.end()
	}
	var msgs uint64
	var longest float64
	for _, x := range res {
		msgs += x.Messages
		longest = max(longest, x.Seconds)
	}
	return float64(msgs) / longest
}
