package pcode

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts in testdata from what the cores do")

// Transcripts: testdata/*.txt are scripts of three cores on an in-memory
// wire, with what the cores did after each command, to hold against the
// paper's figures. A line "> command" is a command; the lines after it,
// up to the next command, are its expected output; "#" lines are
// comments. go test -run Transcript -rewrite regenerates the outputs
// (review the diff: a changed transcript is a changed protocol).
//
// Commands:
//
//	multicast M step=S to=A,B data=TEXT   member M calls multicast
//	request M step=S from=Q to=A,B        member M calls request
//	drop M TYPE [at R]                    the next TYPE frame M sends is lost (at receiver R only)
//	run                                   carry frames until the wire is quiet
//	wait D                                advance the clock by D (a Go duration), tick all
type wire struct {
	t     *testing.T
	now   Time
	cores []*Core
	macs  [][6]byte
	queue []packet
	drops []dropRule
	out   *strings.Builder
}

type packet struct {
	from int
	b    []byte
}

type dropRule struct {
	from int
	typ  frame.Type
	to   int // -1: any
}

func newWire(t *testing.T, n int) *wire {
	w := &wire{t: t, now: 1_000_000, out: &strings.Builder{}}
	var infos []frame.MemberInfo
	for i := range n {
		mac := [6]byte{2, 0, 0, 0, 0, byte(i + 1)}
		w.macs = append(w.macs, mac)
		infos = append(infos, frame.MemberInfo{ID: frame.MemberID(i), MAC: mac, Incarnation: 1})
	}
	for i := range n {
		c, err := New(Config{Group: 1, Self: frame.MemberID(i), Members: infos, InitialRTT: Millisecond, MinTimer: 100 * Microsecond, MaxTimer: 10 * Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c.Tick(w.now)
		w.cores = append(w.cores, c)
	}
	return w
}

func (w *wire) memberOf(mac [6]byte) int {
	for i, m := range w.macs {
		if m == mac {
			return i
		}
	}
	return -1
}

func ids(s string) []frame.MemberID {
	var out []frame.MemberID
	for _, f := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, frame.MemberID(n))
	}
	return out
}

// collect takes every core's Ready: frames onto the wire (printed),
// deliveries and events printed.
func (w *wire) collect() {
	for i, c := range w.cores {
		rd := c.Ready()
		for _, b := range rd.Frames {
			w.printFrame(i, b)
			w.queue = append(w.queue, packet{i, append([]byte{}, b...)})
		}
		for _, d := range rd.Deliveries {
			fmt.Fprintf(w.out, "%d delivers from %d (count %d): %q\n", i, d.From, d.Seq, d.Data)
		}
		for _, ev := range rd.Events {
			fmt.Fprintf(w.out, "%d event: %v\n", i, ev)
		}
		c.Advance()
	}
}

func (w *wire) printFrame(from int, b []byte) {
	e, body, err := frame.SplitEthernet(b, frame.EtherType)
	if err != nil {
		w.t.Fatal(err)
	}
	v, err := frame.Parse(body)
	if err != nil {
		w.t.Fatal(err)
	}
	to := "all"
	if r := w.memberOf(e.Dst()); r >= 0 {
		to = strconv.Itoa(r)
	}
	var pcv []string
	for i := range v.AckCount() {
		pcv = append(pcv, strconv.Itoa(int(v.Ack(i))))
	}
	fmt.Fprintf(w.out, "%d → %s %v seq=%d pcv=[%s]", from, to, v.Type(), v.Seq(), strings.Join(pcv, " "))
	if v.Retransmission() {
		fmt.Fprint(w.out, " resend")
	}
	switch v.Type() {
	case frame.PcodeData:
		d := v.PcodeData()
		fmt.Fprintf(w.out, " step=%d global=%d %v to=%s %q", d.Step, d.Global, d.Stream, targetString(d.Targets), d.Data)
	case frame.PcodeNack:
		n := v.PcodeNack()
		fmt.Fprintf(w.out, " %v target=%d last=%d step=%d", n.Kind, int16(n.Target), n.Last, n.Step)
	case frame.PcodeStatus:
		fmt.Fprintf(w.out, " global=%d echo=%d ackreq=%v", v.PcodeStatusGlobal(), v.PcodeStatusEcho(), v.Flags()&frame.FlagAckRequest != 0)
	}
	fmt.Fprintln(w.out)
}

// run carries queued frames to their receivers until none is left.
func (w *wire) run() {
	for len(w.queue) > 0 {
		p := w.queue[0]
		w.queue = w.queue[1:]
		e, body, _ := frame.SplitEthernet(p.b, frame.EtherType)
		v, _ := frame.Parse(body)
		dst := w.memberOf(e.Dst())
		all := w.dropped(p.from, v.Type(), -1)
		for i, c := range w.cores {
			if i == p.from || dst >= 0 && dst != i {
				continue
			}
			if all || w.dropped(p.from, v.Type(), i) {
				fmt.Fprintf(w.out, "lost: %d → %v %v seq=%d, at %d\n", p.from, dstName(dst), v.Type(), v.Seq(), i)
				continue
			}
			if err := c.Step(w.now, e.Src(), e.Dst(), v); err != nil {
				fmt.Fprintf(w.out, "%d refuses: %v\n", i, err)
			}
			w.collect()
		}
	}
}

func dstName(d int) string {
	if d < 0 {
		return "all"
	}
	return strconv.Itoa(d)
}

func (w *wire) dropped(from int, t frame.Type, dst int) bool {
	for i, r := range w.drops {
		if r.from == from && r.typ == t && r.to == dst {
			w.drops = append(w.drops[:i], w.drops[i+1:]...)
			return true
		}
	}
	return false
}

func (w *wire) command(line string) {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		}
	}
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			w.t.Fatalf("%q: %v", line, err)
		}
		return n
	}
	switch f[0] {
	case "multicast", "request":
		m := num(f[1])
		step, _ := strconv.ParseUint(args["step"], 10, 64)
		op := Op{Kind: OpMulticast, Step: step, Targets: frame.AppendTargets(nil, ids(args["to"])...), Data: []byte(args["data"])}
		if f[0] == "request" {
			op.Kind, op.Peer, op.Data = OpRequest, frame.MemberID(num(args["from"])), nil
		}
		if err := w.cores[m].Propose(w.now, AppendOp(nil, op)); err != nil {
			fmt.Fprintf(w.out, "%d refuses the call: %v\n", m, err)
		}
		w.cores[m].Tick(w.now)
		w.collect()
	case "drop":
		r := dropRule{from: num(f[1]), to: -1}
		for _, t := range frame.Types {
			if t.String() == f[2] {
				r.typ = t
			}
		}
		if len(f) == 5 && f[3] == "at" {
			r.to = num(f[4])
		}
		w.drops = append(w.drops, r)
	case "run":
		w.run()
	case "wait":
		d, err := parseDuration(f[1])
		if err != nil {
			w.t.Fatalf("%q: %v", line, err)
		}
		end := w.now.Add(d)
		// Step through every deadline on the way, in order.
		for {
			next := end
			for _, c := range w.cores {
				if dl := c.Deadline(); dl != 0 && dl < next && dl > w.now {
					next = dl
				}
			}
			w.now = next
			for _, c := range w.cores {
				c.Tick(w.now)
			}
			w.collect()
			w.run()
			if w.now >= end {
				break
			}
		}
	default:
		w.t.Fatalf("unknown command %q", line)
	}
}

func parseDuration(s string) (Duration, error) {
	var n float64
	var unit string
	if _, err := fmt.Sscanf(s, "%g%s", &n, &unit); err != nil {
		return 0, err
	}
	switch unit {
	case "us":
		return Duration(n * float64(Microsecond)), nil
	case "ms":
		return Duration(n * float64(Millisecond)), nil
	}
	return 0, fmt.Errorf("unit %q (want us or ms)", unit)
}

func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var w *wire
			var out strings.Builder // the transcript as the cores write it
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			for i := 0; i < len(lines); {
				line := lines[i]
				i++
				switch {
				case strings.HasPrefix(line, "members "):
					n, _ := strconv.Atoi(strings.TrimPrefix(line, "members "))
					w = newWire(t, n)
					out.WriteString(line + "\n")
				case strings.HasPrefix(line, "> "):
					// The expected output: the lines up to the next
					// command, comment or blank line.
					var want strings.Builder
					for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "> ") && !strings.HasPrefix(lines[i], "#") {
						want.WriteString(lines[i] + "\n")
						i++
					}
					w.out.Reset()
					w.command(strings.TrimPrefix(line, "> "))
					if got := w.out.String(); got != want.String() && !*rewrite {
						t.Errorf("%s:%d: > %s\ngot:\n%swant:\n%s", path, i, strings.TrimPrefix(line, "> "), got, want.String())
					}
					out.WriteString(line + "\n" + w.out.String())
				default:
					out.WriteString(line + "\n")
				}
			}
			if *rewrite {
				if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
