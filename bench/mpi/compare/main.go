// Command compare runs the BDSM vs MPI comparison of docs/benchmarks.md
// (thesis ch. 6): each of the programs as BDSM (dsm/examples, one process
// per network namespace over the ring link) and as OpenMPI (bench/mpi,
// one rank per namespace over TCP), at equal process counts on the same
// netns topology, repeated, and prints markdown tables of the medians:
// execution time and speedup (figs 6.1–6.5), messages and bytes (fig 6.6),
// loss and repair (fig 6.9), and with -windows the window sweep (figs
// 6.7–6.8). With -orca the programs that have an Orca version
// (orca/examples: tsp, asp) run that too, in the same repetitions, and a
// table sets it beside BDSM and MPI. Every run's checksum is compared
// with the sequential one.
//
// Needs root, Debian's openmpi-bin and libopenmpi-dev, and a quiet machine
// for meaningful times. From the repository root:
//
//	go run ./bench/mpi/compare                       # 1, 2, 4 processes, 5 repeats
//	go run ./bench/mpi/compare -procs 2 -reps 3 -progs jacobi,cg
//	go run ./bench/mpi/compare -procs 4 -progs jacobi,matmult -windows 16,48,128 -nompi
//	go run ./bench/mpi/compare -procs 4 -progs jacobi,cg -loss 1 -nompi
//	go run ./bench/mpi/compare -procs 2,4 -progs jacobi,cg -gomaxprocs 1 -spins 0,200us
//	go run ./bench/mpi/compare -procs 2,4 -progs tsp,asp -orca
//	go run ./bench/mpi/compare -procs 4 -reps 3 -progs asp -orca -orcaargs -flush
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/testnet/netns"
)

// problem is each program's benchmark size: the jacobi (512², 500
// iterations), cg on the same, the thesis's tsp (15 cities); nbody and
// matmult below the thesis's sizes (2048 particles, 1280²) to keep a run
// short on this 2-core machine; asp at 512 nodes (the Orca sidebar's 300
// takes too little time to measure the communication).
var problem = map[string][]string{
	"jacobi":  {"-n", "512", "-iters", "500"},
	"cg":      {"-n", "512", "-iters", "500"},
	"nbody":   {"-n", "1024", "-steps", "30"},
	"matmult": {"-m", "512"},
	"tsp":     {"-cities", "15"},
	"asp":     {"-n", "512"},
	// halo (issue 21; not in the default -progs): the same sizes as
	// bench-channels.
	"halo": {"-n", "512", "-iters", "500"},
}

var order = []string{"matmult", "nbody", "jacobi", "cg", "tsp", "asp"}

// orcaPrograms have an Orca version in orca/examples (-orca).
var orcaPrograms = []string{"tsp", "asp"}

// orcaArgs are more arguments of every Orca program run (-orcaargs).
var orcaArgs []string

type run struct {
	prog, system  string // system: "seq", "mpi", "bdsm", "orca"
	procs, window int
	spin          time.Duration // BDSM: the ring's RxSpin (-spin of the examples)
	loss          string
	fields        []map[string]string // one per report line (BDSM: per rank)
	// rep identifies the repetition the run was made in: the runs of one
	// program made back to back, which ratioCell pairs.
	rep int
}

func (r run) solveUS() float64 {
	// The thesis times at rank 0; every rank reports, rank 0 is first.
	v, _ := strconv.ParseFloat(r.fields[0]["solve_us"], 64)
	return v
}

func (r run) sum(key string) uint64 {
	var t uint64
	for _, f := range r.fields {
		v, _ := strconv.ParseUint(f[key], 10, 64)
		t += v
	}
	return t
}

func main() {
	procsFlag := flag.String("procs", "1,2,4", "process counts")
	reps := flag.Int("reps", 5, "repeats of every measurement (medians are reported)")
	progsFlag := flag.String("progs", strings.Join(order, ","), "programs")
	windows := flag.String("windows", "", "also run BDSM with these PBP windows (figs 6.7-6.8)")
	spin := flag.Duration("spin", ring.DefaultRxSpin, "BDSM processes poll their receive ring this long before sleeping (ring.Config.RxSpin; 0: never)")
	spins := flag.String("spins", "", "also run BDSM with these ring spins, e.g. 0,200us, beside every MPI run (a table of each against MPI)")
	loss := flag.String("loss", "", "inject this percent of random loss on every frame arriving at every host (nftables; both systems)")
	noMPI := flag.Bool("nompi", false, "BDSM only")
	withOrca := flag.Bool("orca", false, "also run the Orca version of the programs that have one ("+strings.Join(orcaPrograms, ", ")+")")
	flag.Func("orcaargs", "more arguments of every Orca program run, space-separated (e.g. \"-flush\" for asp)", func(v string) error {
		orcaArgs = strings.Fields(v)
		return nil
	})
	prefix := flag.String("prefix", "rbdc", "namespace prefix (\"rb\" + lowercase letters and digits)")
	raw := flag.String("raw", "", "append every report line here")
	gomaxprocs := flag.Int("gomaxprocs", 0, "GOMAXPROCS of every BDSM process (0: each program's -gomaxprocs default: 1 for jacobi, halo and cg, Go's, one per CPU, for the others)")
	from := flag.Bool("from", false, "run nothing: report on the -raw files named as arguments")
	flag.Parse()
	if *from {
		err := func() error {
			runs, err := fromRaw(flag.Args())
			if err != nil {
				return err
			}
			procs, err := ints(*procsFlag)
			if err != nil {
				return fmt.Errorf("-procs: %w", err)
			}
			ws, err := ints(*windows)
			if err != nil {
				return fmt.Errorf("-windows: %w", err)
			}
			ss, err := durations(*spins)
			if err != nil {
				return fmt.Errorf("-spins: %w", err)
			}
			report(os.Stdout, runs, strings.Split(*progsFlag, ","), procs, ws, *spin, ss)
			return nil
		}()
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		return
	}
	if *gomaxprocs > 0 {
		// Inherited by netns-bdsm and the processes it starts.
		os.Setenv("GOMAXPROCS", strconv.Itoa(*gomaxprocs))
	}
	if err := compare(*procsFlag, *reps, *progsFlag, *windows, *spin, *spins, *loss, *noMPI, *withOrca, *prefix, *raw); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	if strings.TrimSpace(strings.ReplaceAll(s, ",", "")) == "" {
		return nil, nil // none
	}
	return linkbench.Ints(s)
}

// durations parses a comma-separated list of durations ("0,20us,50us").
func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration of 0 or more (like 50us)", f)
		}
		out = append(out, d)
	}
	return out, nil
}

func compare(procsFlag string, reps int, progsFlag, windowsFlag string, spin time.Duration, spinsFlag, loss string, noMPI, withOrca bool, prefix, rawPath string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, AF_PACKET)")
	}
	procs, err := ints(procsFlag)
	if err != nil {
		return fmt.Errorf("-procs: %w", err)
	}
	windows, err := ints(windowsFlag)
	if err != nil {
		return fmt.Errorf("-windows: %w", err)
	}
	spins, err := durations(spinsFlag)
	if err != nil {
		return fmt.Errorf("-spins: %w", err)
	}
	progs := strings.Split(progsFlag, ",")
	for _, p := range progs {
		if problem[p] == nil {
			return fmt.Errorf("-progs: no program %q (have %v)", p, order)
		}
	}
	mpiDir, err := filepath.Abs("bench/mpi")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(mpiDir, "netns-mpirun")); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	bin, err := os.MkdirTemp("", "rbd-compare")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if !noMPI {
		if out, err := exec.Command("make", "-s", "-C", mpiDir).CombinedOutput(); err != nil {
			return fmt.Errorf("make -C bench/mpi (needs openmpi-bin, libopenmpi-dev): %v\n%s", err, out)
		}
	}
	if out, err := exec.Command("go", "build", "-o", bin+"/", "./dsm/examples/...").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./dsm/examples/...: %v\n%s", err, out)
	}
	orcaBin := filepath.Join(bin, "orca")
	if withOrca {
		if out, err := exec.Command("go", "build", "-o", orcaBin+"/", "./orca/examples/...").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./orca/examples/...: %v\n%s", err, out)
		}
	}
	var rawOut io.Writer = io.Discard
	if rawPath != "" {
		f, err := os.OpenFile(rawPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		rawOut = f
	}
	ctx := context.Background()
	startLoad, startTime := loadAvg(), time.Now().UTC()
	// The file is appended to: this line keeps fromRaw from counting the
	// first runs made here into a repetition an earlier, aborted run of
	// compare left incomplete.
	fmt.Fprintf(rawOut, "%s compare started %s\n", rawStart, startTime.Format(time.RFC3339))
	var runs []run
	failures, blocks := 0, 0
	// exec1 runs one measurement, at most three tries: an OpenMPI job
	// now and then never starts one of its daemons on this loaded machine
	// (mpirun then waits forever), so every try has a deadline.
	// hosts are the current topology's: a failed try's processes are
	// ended there too (KillAll), as the group kill below misses what GNU
	// timeout in netns-mpirun and OpenMPI's daemonized orteds put in
	// groups and sessions of their own (they outlived the try, ppid 1).
	var hosts []*netns.Host
	exec1 := func(r run, name string, args ...string) error {
		var last error
		for try := 0; try < 3; try++ {
			start := time.Now()
			timeout := runTimeout
			if r.system == "mpi" {
				timeout = mpiTimeout
			}
			tctx, cancel := context.WithTimeout(ctx, timeout)
			cmd := exec.CommandContext(tctx, name, args...)
			// On the deadline kill the whole process group: mpirun and
			// the BDSM processes are grandchildren of the script run.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = time.Second
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			cancel()
			if err != nil {
				failures++
				last = fmt.Errorf("%s %s procs=%d: %v\n%s%s", r.system, r.prog, r.procs, err, out, stderr.String())
				fmt.Fprintf(os.Stderr, "try %d failed: %v\n", try+1, last)
				for _, h := range hosts {
					if n, err := h.KillAll(); err != nil {
						fmt.Fprintf(os.Stderr, "after try %d: %v\n", try+1, err)
					} else if n > 0 {
						fmt.Fprintf(os.Stderr, "after try %d: ended %d processes left in %s\n", try+1, n, h.Namespace)
					}
				}
				continue
			}
			r.fields = nil
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if line == "" {
					continue
				}
				fmt.Fprintf(rawOut, "%s window=%d spin=%s loss=%s %s\n", r.system, r.window, r.spin, r.loss, line)
				r.fields = append(r.fields, parseLine(line))
			}
			if len(r.fields) == 0 {
				return fmt.Errorf("%s %s procs=%d printed nothing", r.system, r.prog, r.procs)
			}
			fmt.Fprintf(os.Stderr, "%-4s %-7s procs=%d window=%d spin=%s %6.1f ms (wall %.1f s)\n", r.system, r.prog, r.procs, r.window, r.spin, r.solveUS()/1e3, time.Since(start).Seconds())
			runs = append(runs, r)
			return nil
		}
		return last
	}

	for _, n := range procs {
		topo, err := netns.New(netns.Options{Hosts: n, Prefix: prefix, Addresses: true})
		if err != nil {
			return err
		}
		hosts = topo.Hosts
		err = func() error {
			defer topo.Close()
			if loss != "" {
				if out, err := exec.Command(filepath.Join(mpiDir, "../../scripts/netns/loss"), "-p", prefix, "all", "in", "random", loss).CombinedOutput(); err != nil {
					return fmt.Errorf("scripts/netns/loss: %v\n%s", err, out)
				}
			}
			for rep := 0; rep < reps; rep++ {
				for _, p := range progs {
					blocks++
					id := blocks
					mpi := func() error {
						if noMPI {
							return nil
						}
						args := append([]string{"-p", prefix, "-n", strconv.Itoa(n), filepath.Join(mpiDir, p)}, problem[p]...)
						return exec1(run{prog: p, system: "mpi", procs: n, loss: loss, rep: id}, filepath.Join(mpiDir, "netns-mpirun"), args...)
					}
					bdsm := func(window int, spin time.Duration) error {
						// The programs' own deadline makes a stuck run
						// say where it waited.
						args := append([]string{"-p", prefix, "-n", strconv.Itoa(n), "-t", "150", filepath.Join(bin, p), "-timeout", "100s"}, problem[p]...)
						if window > 0 {
							args = append(args, "-window", strconv.Itoa(window))
						}
						args = append(args, "-spin", spin.String()) // 0: never
						return exec1(run{prog: p, system: "bdsm", procs: n, window: window, spin: spin, loss: loss, rep: id}, filepath.Join(mpiDir, "netns-bdsm"), args...)
					}
					seq := func() error {
						return exec1(run{prog: p, system: "seq", procs: 1, rep: id}, filepath.Join(bin, p), problem[p]...)
					}
					// The sequential baseline runs beside every pair, and
					// the order rotates, so that no system always follows
					// another's load on this shared machine.
					steps := []func() error{seq, mpi, func() error { return bdsm(0, spin) }}
					if withOrca && slices.Contains(orcaPrograms, p) {
						steps = append(steps, func() error {
							args := append([]string{"-p", prefix, "-n", strconv.Itoa(n), "-t", "150", filepath.Join(orcaBin, p), "-timeout", "100s"}, problem[p]...)
							args = append(append(args, "-spin", spin.String()), orcaArgs...)
							return exec1(run{prog: p, system: "orca", procs: n, spin: spin, loss: loss, rep: id}, filepath.Join(mpiDir, "netns-bdsm"), args...)
						})
					}
					for _, sp := range spins {
						if sp != spin {
							steps = append(steps, func() error { return bdsm(0, sp) })
						}
					}
					k := rep % len(steps)
					steps = append(steps[k:], steps[:k]...)
					for _, w := range windows {
						steps = append(steps, func() error { return bdsm(w, spin) })
					}
					for _, s := range steps {
						if err := s(); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	// The load decides the outcome more than anything else on a shared
	// machine (docs/benchmarks.md): every report says what it was.
	fmt.Printf("%s–%s UTC, load average (1 min) %s at the start, %s at the end\n",
		startTime.Format("15:04"), time.Now().UTC().Format("15:04"), startLoad, loadAvg())
	fmt.Printf("failed tries (retried): %d\n", failures)
	report(os.Stdout, runs, progs, procs, windows, spin, spins)
	return nil
}

// runTimeout bounds one try of one measurement. An MPI try has less: its
// hang is mpirun waiting for a daemon that never started, and every MPI
// run here takes a few seconds at most (1.7 s of wall time at the worst
// seen, cg with 4 ranks), so a hung try is retried after 30 s, not 3 min.
const (
	runTimeout = 3 * time.Minute
	mpiTimeout = 30 * time.Second
)

// loadAvg is the 1-minute load average from /proc/loadavg, or "?".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// parseLine splits a report line's key=value fields.
func parseLine(line string) map[string]string {
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

// rawStart begins the line compare writes to its -raw file as it starts.
const rawStart = "#"

// fromRaw rebuilds the runs from -raw files ("SYSTEM window=W spin=S
// loss=L LINE"): lines of one run follow each other, rank 0 first; a line
// starting with rawStart is where a run of compare started.
func fromRaw(paths []string) ([]run, error) {
	var runs []run
	blocks := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		first := len(runs)
		for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if strings.HasPrefix(line, rawStart) {
				blocks = repetitions(runs[first:], blocks)
				first = len(runs)
				continue
			}
			system, rest, _ := strings.Cut(line, " ")
			f := parseLine(rest)
			procs, err1 := strconv.Atoi(f["procs"])
			window, err2 := strconv.Atoi(f["window"])
			fields := strings.Fields(rest)
			if len(fields) < 3 || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s:%d: not a raw report line: %q", path, i+1, line)
			}
			var spin time.Duration
			if v, ok := f["spin"]; ok {
				// Raw files written before -spin have no spin field.
				if spin, err = time.ParseDuration(v); err != nil {
					return nil, fmt.Errorf("%s:%d: spin=%q is not a duration", path, i+1, v)
				}
			}
			prog := ""
			for _, fl := range fields {
				if !strings.Contains(fl, "=") {
					prog = strings.TrimSuffix(fl, "-mpi")
					break
				}
			}
			if prog == "" {
				return nil, fmt.Errorf("%s:%d: no program name in %q", path, i+1, line)
			}
			r := run{prog: prog, system: system, procs: procs, window: window, spin: spin, loss: f["loss"]}
			if rank := f["rank"]; rank != "0" && len(runs) > first {
				prev := &runs[len(runs)-1]
				if prev.prog == r.prog && prev.system == r.system && prev.procs == r.procs && prev.window == r.window && prev.spin == r.spin {
					prev.fields = append(prev.fields, f)
					continue
				}
			}
			r.fields = []map[string]string{f}
			runs = append(runs, r)
		}
		blocks = repetitions(runs[first:], blocks)
	}
	return runs, nil
}

// repetitions numbers the repetitions of the runs of one raw file, from
// last+1, and returns the last number used. The raw lines carry no
// repetition number, but compare runs every program's measurements of a
// repetition back to back (seq, MPI, BDSM in a rotating order, then the
// windows), one of each: a repetition ends where the program or the
// process count changes, or where a measurement it already holds comes
// again. A repetition an aborted run left incomplete so stays apart from
// the next, instead of shifting every later pair (raw files are appended
// to, so one file may hold several runs of compare).
func repetitions(runs []run, last int) int {
	type key struct {
		system        string
		procs, window int
		spin          time.Duration
	}
	var seen map[key]bool
	prog, procs := "", 0
	for i := range runs {
		r := &runs[i]
		k := key{r.system, r.procs, r.window, r.spin}
		if seen == nil || r.prog != prog || seen[k] || (r.system != "seq" && procs != 0 && r.procs != procs) {
			last++
			seen, prog, procs = map[key]bool{}, r.prog, 0
		}
		seen[k] = true
		if r.system != "seq" {
			procs = r.procs
		}
		r.rep = last
	}
	return last
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

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

// pick selects the runs of one program, system and process count; BDSM
// runs also by window and spin (the others have 0 for both).
func pick(runs []run, prog, system string, procs, window int, spin time.Duration) []run {
	var out []run
	for _, r := range runs {
		if r.prog == prog && r.system == system && r.procs == procs && r.window == window && r.spin == spin {
			out = append(out, r)
		}
	}
	return out
}

func times(rs []run) []float64 {
	var t []float64
	for _, r := range rs {
		t = append(t, r.solveUS()/1e3)
	}
	return t
}

// ratioCell is the median of the per-repetition ratios of the solve times
// of a's and b's runs made back to back (the same rep), or "–" without
// pairs; unpaired counts the runs of either left without a partner (a
// repetition an aborted run left incomplete).
func ratioCell(a, b []run) (cell string, unpaired int) {
	if len(a) == 0 || len(b) == 0 {
		return "–", 0 // one system not measured (-nompi): nothing aborted
	}
	byRep := map[int]float64{}
	for _, r := range b {
		byRep[r.rep] = r.solveUS()
	}
	var ratios []float64
	paired := 0
	for _, r := range a {
		d, ok := byRep[r.rep]
		if !ok {
			continue
		}
		paired++
		if d > 0 {
			ratios = append(ratios, r.solveUS()/d)
		}
	}
	unpaired = len(a) + len(b) - 2*paired
	if len(ratios) == 0 {
		return "–", unpaired
	}
	return fmt.Sprintf("%.2f", median(ratios)), unpaired
}

// unpairedNote says how many runs the ratios left out, if any.
func unpairedNote(w io.Writer, n int) {
	if n > 0 {
		fmt.Fprintf(w, "\nBDSM/MPI left out %d runs without a partner in their repetition (one an aborted run left incomplete)\n", n)
	}
}

// report prints the tables of runs: BDSM rows are those with the default
// window and ring spin spin; windows and spins add a table each.
func report(w io.Writer, runs []run, progs []string, procs, windows []int, spin time.Duration, spins []time.Duration) {
	// Checksums: every report line of every run against the sequential.
	bad := 0
	for _, r := range runs {
		seq := pick(runs, r.prog, "seq", 1, 0, 0)
		if len(seq) == 0 {
			continue
		}
		for _, f := range r.fields {
			if f["checksum"] != "" && f["checksum"] != seq[0].fields[0]["checksum"] {
				bad++
				fmt.Fprintf(w, "CHECKSUM MISMATCH: %s %s procs=%d: %s, sequential %s\n", r.system, r.prog, r.procs, f["checksum"], seq[0].fields[0]["checksum"])
			}
		}
	}
	fmt.Fprintf(w, "%d runs; checksums differing from the sequential run: %d\n\n", len(runs), bad)

	fmt.Fprintln(w, "Medians (and minimum) of the solve time at rank 0 in ms; BDSM/MPI is the median of the ratios of the runs made back to back in each repetition (they share the machine's load); speedups of medians, MPI over its 1-rank run, BDSM over the Go sequential program")
	fmt.Fprintln(w, "\n| program | procs | MPI ms | BDSM ms | BDSM/MPI | MPI speedup | BDSM speedup |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	unpaired := 0
	for _, p := range progs {
		seqT := times(pick(runs, p, "seq", 1, 0, 0))
		seq := median(seqT)
		mpi1 := median(times(pick(runs, p, "mpi", 1, 0, 0)))
		fmt.Fprintf(w, "| %s | seq | | %.1f (%.1f) Go | | | |\n", p, seq, minOf(seqT))
		for _, n := range procs {
			mr, br := pick(runs, p, "mpi", n, 0, 0), pick(runs, p, "bdsm", n, 0, spin)
			mt, bt := times(mr), times(br)
			m, b := median(mt), median(bt)
			cell := func(v float64, all []float64) string {
				if v == 0 {
					return "–"
				}
				return fmt.Sprintf("%.1f (%.1f)", v, minOf(all))
			}
			ratio, u := ratioCell(br, mr)
			unpaired += u
			ms, bs := "–", "–"
			if m > 0 && mpi1 > 0 {
				ms = fmt.Sprintf("%.2f", mpi1/m)
			}
			if b > 0 {
				bs = fmt.Sprintf("%.2f", seq/b)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", p, n, cell(m, mt), cell(b, bt), ratio, ms, bs)
		}
	}
	unpairedNote(w, unpaired)
	fmt.Fprintln(w, "\nBDSM traffic and repair, summed over ranks (medians over runs): DSM messages and bytes sent (fig. 6.6), Data frames first sent, retransmitted, gaps repaired (receiver side), kernel ring drops (fig. 6.9)")
	fmt.Fprintln(w, "\n| program | procs | window | messages | bytes | frames | retransmitted | gaps repaired | kernel drops |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range progs {
		for _, n := range procs {
			for _, win := range append([]int{0}, windows...) {
				rs := pick(runs, p, "bdsm", n, win, spin)
				if len(rs) == 0 {
					continue
				}
				med := func(key string) float64 {
					var v []float64
					for _, r := range rs {
						v = append(v, float64(r.sum(key)))
					}
					return median(v)
				}
				ws := "default"
				if win > 0 {
					ws = strconv.Itoa(win)
				}
				fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", p, n, ws,
					med("msgs"), med("bytes"), med("frames"), med("retrans"), med("gaps"), med("kdrops"))
			}
		}
	}
	if len(windows) > 0 {
		fmt.Fprintln(w, "\nBDSM time by PBP window (figs 6.7-6.8), median ms")
		fmt.Fprintf(w, "\n| program | procs | default |")
		for _, win := range windows {
			fmt.Fprintf(w, " %d |", win)
		}
		fmt.Fprintf(w, "\n|---|---:|---:|%s\n", strings.Repeat("---:|", len(windows)))
		for _, p := range progs {
			for _, n := range procs {
				fmt.Fprintf(w, "| %s | %d | %.1f |", p, n, median(times(pick(runs, p, "bdsm", n, 0, spin))))
				for _, win := range windows {
					fmt.Fprintf(w, " %.1f |", median(times(pick(runs, p, "bdsm", n, win, spin))))
				}
				fmt.Fprintln(w)
			}
		}
	}
	orcaTable(w, runs, progs, procs, spin)
	if len(spins) > 0 {
		fmt.Fprintln(w, "\nBDSM by ring spin (-spin, ring.Config.RxSpin): median ms, and BDSM/MPI as the median of per-repetition ratios")
		fmt.Fprintf(w, "\n| program | procs | MPI ms |")
		for _, sp := range spins {
			fmt.Fprintf(w, " spin %s ms | BDSM/MPI |", sp)
		}
		fmt.Fprintf(w, "\n|---|---:|---:|%s\n", strings.Repeat("---:|---:|", len(spins)))
		unpaired := 0
		for _, p := range progs {
			for _, n := range procs {
				mr := pick(runs, p, "mpi", n, 0, 0)
				fmt.Fprintf(w, "| %s | %d | %.1f |", p, n, median(times(mr)))
				for _, sp := range spins {
					br := pick(runs, p, "bdsm", n, 0, sp)
					ratio, u := ratioCell(br, mr)
					unpaired += u
					fmt.Fprintf(w, " %.1f | %s |", median(times(br)), ratio)
				}
				fmt.Fprintln(w)
			}
		}
		unpairedNote(w, unpaired)
	}
}

// orcaTable prints the Orca versions beside BDSM and MPI, if any ran: the
// medians of the solve time at rank 0 in ms, Orca/MPI and Orca/BDSM as
// medians of the per-repetition ratios, and Orca's speedup over the Go
// sequential program; then Orca's traffic, summed over ranks.
func orcaTable(w io.Writer, runs []run, progs []string, procs []int, spin time.Duration) {
	if !slices.ContainsFunc(runs, func(r run) bool { return r.system == "orca" }) {
		return
	}
	fmt.Fprintln(w, "\nOrca (orca/examples: replicated objects on the total order) beside BDSM and MPI: medians (and minimum) of the solve time at rank 0 in ms; ratios are medians of the per-repetition ratios")
	fmt.Fprintln(w, "\n| program | procs | MPI ms | BDSM ms | Orca ms | Orca/MPI | Orca/BDSM | Orca speedup |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	cell := func(v float64, all []float64) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f (%.1f)", v, minOf(all))
	}
	unpaired := 0
	for _, p := range progs {
		seq := median(times(pick(runs, p, "seq", 1, 0, 0)))
		for _, n := range procs {
			or := pick(runs, p, "orca", n, 0, spin)
			if len(or) == 0 {
				continue
			}
			mr, br := pick(runs, p, "mpi", n, 0, 0), pick(runs, p, "bdsm", n, 0, spin)
			ot := times(or)
			o := median(ot)
			vsMPI, u1 := ratioCell(or, mr)
			vsBDSM, u2 := ratioCell(or, br)
			unpaired += u1 + u2
			speedup := "–"
			if o > 0 && seq > 0 {
				speedup = fmt.Sprintf("%.2f", seq/o)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", p, n, cell(median(times(mr)), times(mr)),
				cell(median(times(br)), times(br)), cell(o, ot), vsMPI, vsBDSM, speedup)
		}
	}
	unpairedNote(w, unpaired)
	fmt.Fprintln(w, "\nOrca traffic, summed over ranks (medians over runs): messages and bytes sent, writes called and applied, frames first sent, retransmitted, gaps repaired, kernel ring drops")
	fmt.Fprintln(w, "\n| program | procs | messages | bytes | writes | applied | frames | retransmitted | gaps repaired | kernel drops |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range progs {
		for _, n := range procs {
			rs := pick(runs, p, "orca", n, 0, spin)
			if len(rs) == 0 {
				continue
			}
			med := func(key string) float64 {
				var v []float64
				for _, r := range rs {
					v = append(v, float64(r.sum(key)))
				}
				return median(v)
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", p, n,
				med("msgs"), med("bytes"), med("writes"), med("applied"), med("frames"), med("retrans"), med("gaps"), med("kdrops"))
		}
	}
}
