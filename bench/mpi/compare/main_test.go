package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	f := parseLine("jacobi mode=host procs=2 rank=1 n=512 checksum=a4b4 solve_us=118685 loss= odd")
	want := map[string]string{"mode": "host", "procs": "2", "rank": "1", "n": "512", "checksum": "a4b4", "solve_us": "118685", "loss": ""}
	if len(f) != len(want) {
		t.Fatalf("parseLine: %d fields %v, want %d %v", len(f), f, len(want), want)
	}
	for k, v := range want {
		if got, ok := f[k]; !ok || got != v {
			t.Errorf("parseLine: %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

func TestInts(t *testing.T) {
	got, err := ints("1,2,,4")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 4 {
		t.Fatalf(`ints("1,2,,4") = %v, %v; want [1 2 4]`, got, err)
	}
	if got, err := ints(""); err != nil || len(got) != 0 {
		t.Fatalf(`ints("") = %v, %v; want nothing`, got, err)
	}
	for _, bad := range []string{"1,x", "0", "-3"} {
		if _, err := ints(bad); err == nil || !strings.Contains(err.Error(), "is not a positive integer") {
			t.Errorf("ints(%q) error = %v, want one saying which value is not a positive integer", bad, err)
		}
	}
}

func TestDurations(t *testing.T) {
	got, err := durations("0,20us,1ms")
	want := []time.Duration{0, 20 * time.Microsecond, time.Millisecond}
	if err != nil || len(got) != len(want) {
		t.Fatalf(`durations("0,20us,1ms") = %v, %v; want %v`, got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("durations: [%d] = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"20", "x", "-1us"} {
		_, err := durations(bad)
		if err == nil || !strings.Contains(err.Error(), `"`+bad+`" is not a duration`) {
			t.Errorf("durations(%q) error = %v, want one naming the value", bad, err)
		}
	}
}

func TestMedianAndRatio(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 1 2 = %v, want 2", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 1 3 2 = %v, want 2.5", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median of nothing = %v, want 0", m)
	}
	// The ratio is the median of the per-repetition ratios (1, 1, 4),
	// not the ratio of the medians (20/10).
	if r, u := ratioCell(timed(10, 30, 20), timed(10, 30, 5)); r != "1.00" || u != 0 {
		t.Errorf("ratioCell = %s, %d unpaired; want 1.00 (median of 1, 1, 4), 0", r, u)
	}
	// Runs pair by repetition, not by position: a's 99 (repetition 3)
	// has no partner and is left out and counted.
	a, b := timed(10, 30, 99), timed(20, 20)
	a[1].rep, a[2].rep = 3, 2 // 10/20 and 30/20 pair by rep whatever the order
	b[1].rep = 3
	if r, u := ratioCell(a, b); r != "1.00" || u != 1 {
		t.Errorf("ratioCell with an unpaired run = %s, %d unpaired; want 1.00 (median of 0.5, 1.5), 1", r, u)
	}
	if r, u := ratioCell(nil, timed(1)); r != "–" || u != 0 {
		t.Errorf("ratioCell without pairs = %s, %d unpaired; want –, 0", r, u)
	}
}

// timed makes runs of the given solve times (ms) in repetitions 0, 1, ...
func timed(ms ...float64) []run {
	var rs []run
	for i, v := range ms {
		rs = append(rs, run{rep: i, fields: []map[string]string{{"solve_us": strconv.FormatFloat(v*1e3, 'f', -1, 64)}}})
	}
	return rs
}

// unbalanced is a -raw file (appended to by two runs of compare) whose
// second repetition was aborted after its MPI run: the BDSM/MPI pairs are
// 120/80 and 100/50 (median 1.75), not 120/80 and 100/100 by position.
const unbalanced = `seq window=0 spin=0s loss= jacobi mode=seq procs=1 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=80000
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=120000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
seq window=0 spin=0s loss= jacobi mode=seq procs=1 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=50000
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=100000
`

func TestReportUnbalanced(t *testing.T) {
	runs, err := fromRaw([]string{writeRaw(t, unbalanced)})
	if err != nil {
		t.Fatal(err)
	}
	if reps, want := repOf(runs), []int{1, 1, 1, 2, 2, 3, 3}; !slices.Equal(reps, want) {
		t.Errorf("repetitions %v, want %v", reps, want)
	}
	var out strings.Builder
	report(&out, runs, []string{"jacobi"}, []int{2}, nil, 0, nil)
	for _, want := range []string{
		"| jacobi | 2 | 80.0 (50.0) | 110.0 (100.0) | 1.75 | – | 0.91 |\n",
		"BDSM/MPI left out 1 runs without a partner in their repetition",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q; it is:\n%s", want, out.String())
		}
	}
	// Two files: the first one's aborted repetition does not shift the
	// second's pairs either.
	a := writeRaw(t, unbalanced)
	runs, err = fromRaw([]string{a, a})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	report(&out, runs, []string{"jacobi"}, []int{2}, nil, 0, nil)
	if want := "left out 2 runs"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "| 1.75 |") {
		t.Errorf("report of two files lacks %q and a ratio of 1.75; it is:\n%s", want, out.String())
	}
}

// An aborted run of compare left a repetition holding only a BDSM run;
// the next run, appended to the same file, starts with its own line, so
// its MPI run is not paired with the old BDSM run (3.00) but with its own.
func TestFromRawRunStart(t *testing.T) {
	const text = `bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=300000
# compare started 2026-11-22T09:00:00Z
seq window=0 spin=0s loss= jacobi mode=seq procs=1 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=100000
`
	runs, err := fromRaw([]string{writeRaw(t, text)})
	if err != nil {
		t.Fatal(err)
	}
	if reps, want := repOf(runs), []int{1, 2, 2, 2}; !slices.Equal(reps, want) {
		t.Errorf("repetitions %v, want %v", reps, want)
	}
	if r, u := ratioCell(pick(runs, "jacobi", "bdsm", 2, 0, 0), pick(runs, "jacobi", "mpi", 2, 0, 0)); r != "1.00" || u != 1 {
		t.Errorf("BDSM/MPI %s, %d unpaired; want 1.00, 1", r, u)
	}
}

// repOf is the repetition of each run, in order.
func repOf(runs []run) []int {
	var reps []int
	for _, r := range runs {
		reps = append(reps, r.rep)
	}
	return reps
}

// raw is a -raw file: two repetitions of jacobi at 2 processes (seq, MPI,
// BDSM without and with a spin), the second BDSM run at rank 1 with a
// wrong checksum; a line in the format written before -spin existed.
const raw = `seq window=0 spin=0s loss= jacobi mode=seq procs=1 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=80000
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=120000 msgs=1005 frames=1005 retrans=1
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=1 n=512 checksum=aaaa solve_us=120001 msgs=1005 frames=1005 retrans=2
bdsm window=0 spin=50µs loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=64000 msgs=1005 frames=1005 retrans=0
bdsm window=0 spin=50µs loss= jacobi mode=host procs=2 rank=1 n=512 checksum=aaaa solve_us=60000 msgs=1005 frames=1005 retrans=0
seq window=0 spin=0s loss= jacobi mode=seq procs=1 rank=0 n=512 checksum=aaaa done=500 solve_us=90000
mpi window=0 spin=0s loss= jacobi-mpi procs=2 rank=0 n=512 checksum=aaaa done=500 solve_us=100000
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=150000 msgs=1005 frames=1005 retrans=3
bdsm window=0 spin=0s loss= jacobi mode=host procs=2 rank=1 n=512 checksum=bbbb solve_us=150000 msgs=1005 frames=1005 retrans=4
bdsm window=0 spin=50µs loss= jacobi mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=70000 msgs=1005 frames=1005 retrans=0
bdsm window=0 spin=50µs loss= jacobi mode=host procs=2 rank=1 n=512 checksum=aaaa solve_us=70000 msgs=1005 frames=1005 retrans=0
bdsm window=0 loss= jacobi mode=host procs=4 rank=0 n=512 checksum=aaaa solve_us=5000 msgs=1 frames=1
`

func writeRaw(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFromRaw(t *testing.T) {
	runs, err := fromRaw([]string{writeRaw(t, raw)})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		system string
		procs  int
		spin   time.Duration
		ranks  int
	}
	want := []key{
		{"seq", 1, 0, 1}, {"mpi", 2, 0, 1}, {"bdsm", 2, 0, 2}, {"bdsm", 2, 50 * time.Microsecond, 2},
		{"seq", 1, 0, 1}, {"mpi", 2, 0, 1}, {"bdsm", 2, 0, 2}, {"bdsm", 2, 50 * time.Microsecond, 2},
		{"bdsm", 4, 0, 1},
	}
	if len(runs) != len(want) {
		t.Fatalf("fromRaw: %d runs, want %d: %+v", len(runs), len(want), runs)
	}
	for i, w := range want {
		r := runs[i]
		got := key{r.system, r.procs, r.spin, len(r.fields)}
		if got != w || r.prog != "jacobi" {
			t.Errorf("run %d: %s %+v, want jacobi %+v", i, r.prog, got, w)
		}
	}
	if got := runs[2].sum("retrans"); got != 3 {
		t.Errorf("retrans summed over the ranks of run 2 = %d, want 3", got)
	}
	if got := runs[6].solveUS(); got != 150000 {
		t.Errorf("solve time of run 6 = %v µs, want rank 0's 150000", got)
	}
}

func TestFromRawErrors(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"bdsm window=x loss= jacobi procs=2 rank=0", "raw:1: not a raw report line"},
		{"bdsm window=0 spin=fast loss= jacobi procs=2 rank=0", `raw:1: spin="fast" is not a duration`},
		{"bdsm window=0 loss= procs=2 rank=0", "raw:1: no program name"},
	} {
		_, err := fromRaw([]string{writeRaw(t, c.line)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("fromRaw(%q) error = %v, want %q", c.line, err, c.want)
		}
	}
	if _, err := fromRaw([]string{filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("fromRaw of a missing file: no error")
	}
}

func TestReport(t *testing.T) {
	runs, err := fromRaw([]string{writeRaw(t, raw)})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	report(&out, runs, []string{"jacobi"}, []int{2}, nil, 0, []time.Duration{0, 50 * time.Microsecond})
	text := out.String()
	for _, want := range []string{
		// Rank 1 of the second spin-0 BDSM run has another checksum.
		"CHECKSUM MISMATCH: bdsm jacobi procs=2: bbbb, sequential aaaa\n",
		"9 runs; checksums differing from the sequential run: 1\n",
		// seq median 95; MPI 80, 100 (median 90); BDSM 120, 150 (135);
		// ratios 1.5, 1.5; speedups 90/90 (no 1-rank MPI run: –) and 95/135.
		"| jacobi | seq | | 95.0 (90.0) Go | | | |\n",
		"| jacobi | 2 | 90.0 (80.0) | 135.0 (120.0) | 1.50 | – | 0.70 |\n",
		// Traffic: medians over the two spin-0 runs of the rank sums.
		"| jacobi | 2 | default | 2010 | 0 | 2010 | 5 | 0 | 0 |\n",
		// The spin table: 50 µs runs 64, 70 against MPI 80, 100.
		"| jacobi | 2 | 90.0 | 135.0 | 1.50 | 67.0 | 0.75 |\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q; it is:\n%s", want, text)
		}
	}

	// With spin 50 µs as the main setting the main table shows those runs.
	out.Reset()
	report(&out, runs, []string{"jacobi"}, []int{2}, nil, 50*time.Microsecond, nil)
	if want := "| jacobi | 2 | 90.0 (80.0) | 67.0 (64.0) | 0.75 | – | 1.42 |\n"; !strings.Contains(out.String(), want) {
		t.Errorf("report with -spin 50us lacks %q; it is:\n%s", want, out.String())
	}
}

// The Orca table: Orca's runs beside MPI's and BDSM's of the same
// repetitions, and its traffic summed over ranks.
func TestOrcaTable(t *testing.T) {
	const orcaRaw = `seq window=0 spin=0s loss= asp mode=seq procs=1 rank=0 n=512 checksum=aaaa solve_us=100000
mpi window=0 spin=0s loss= asp-mpi procs=2 rank=0 n=512 checksum=aaaa solve_us=80000
bdsm window=0 spin=0s loss= asp mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=120000 msgs=600 frames=600
bdsm window=0 spin=0s loss= asp mode=host procs=2 rank=1 n=512 solve_us=120001 msgs=600 frames=600
orca window=0 spin=0s loss= asp mode=host procs=2 rank=0 n=512 checksum=aaaa solve_us=60000 msgs=300 bytes=100 writes=257 applied=514 frames=310 retrans=1
orca window=0 spin=0s loss= asp mode=host procs=2 rank=1 n=512 solve_us=59000 msgs=300 bytes=100 writes=257 applied=514 frames=310 retrans=0
`
	runs, err := fromRaw([]string{writeRaw(t, orcaRaw)})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	report(&out, runs, []string{"asp"}, []int{2}, nil, 0, nil)
	text := out.String()
	for _, want := range []string{
		"4 runs; checksums differing from the sequential run: 0\n",
		"| asp | 2 | 80.0 (80.0) | 120.0 (120.0) | 60.0 (60.0) | 0.75 | 0.50 | 1.67 |\n",
		"| asp | 2 | 600 | 200 | 514 | 1028 | 620 | 1 | 0 | 0 |\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q; it is:\n%s", want, text)
		}
	}
	// Without Orca runs, no Orca table.
	runs, _ = fromRaw([]string{writeRaw(t, raw)})
	out.Reset()
	report(&out, runs, []string{"jacobi"}, []int{2}, nil, 0, nil)
	if strings.Contains(out.String(), "Orca") {
		t.Errorf("an Orca table without Orca runs:\n%s", out.String())
	}
}
