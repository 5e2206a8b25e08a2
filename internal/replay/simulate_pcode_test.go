package replay

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// pcodeCall is one member's call at one step of a test program.
type pcodeCall struct {
	op   reliable.PCODEOp
	want []byte // a request's message
}

// pcodeTestProgram is a global program of rounds of the collectives'
// shapes: an allgather (a multicast to all others, then a request from
// each), an all-to-all over the point-to-point streams, and a bcast from
// a rotating root. calls[i][s] are member i's calls at step s+1.
func pcodeTestProgram(ids []frame.MemberID, rounds int) [][][]pcodeCall {
	n := len(ids)
	calls := make([][][]pcodeCall, n)
	others := func(p frame.MemberID) frame.Targets {
		var ts []frame.MemberID
		for _, q := range ids {
			if q != p {
				ts = append(ts, q)
			}
		}
		return frame.AppendTargets(nil, ts...)
	}
	msg := func(from, to frame.MemberID, step uint64) []byte {
		return fmt.Appendf(nil, "step %d from %d to %d %s", step, from, to, strings.Repeat("x", int(step)%40))
	}
	for s := 1; s <= rounds; s++ {
		step := uint64(s)
		for i, p := range ids {
			var cs []pcodeCall
			switch s % 3 {
			case 0: // allgather
				cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODEMulticast, Step: step, Targets: others(p), Data: msg(p, 0, step)}})
				for _, q := range ids {
					if q != p {
						cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODERequest, Step: step, Peer: q, Targets: others(q)}, want: msg(q, 0, step)})
					}
				}
			case 1: // all-to-all, point to point
				for _, q := range ids {
					if q != p {
						cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODEMulticast, Step: step, Targets: frame.AppendTargets(nil, q), Data: msg(p, q, step)}})
					}
				}
				for _, q := range ids {
					if q != p {
						cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODERequest, Step: step, Peer: q, Targets: frame.AppendTargets(nil, p)}, want: msg(q, p, step)})
					}
				}
			case 2: // bcast from a rotating root
				root := ids[(s/3)%n]
				if p == root {
					cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODEMulticast, Step: step, Targets: others(p), Data: msg(p, 0, step)}})
				} else {
					cs = append(cs, pcodeCall{op: reliable.PCODEOp{Kind: reliable.PCODERequest, Step: step, Peer: root, Targets: others(root)}, want: msg(root, 0, step)})
				}
			}
			calls[i] = append(calls[i], cs)
		}
	}
	return calls
}

// pcodeRunner runs one member's program on a reliable.Driver as a
// program that computes nothing between calls: the next step's calls as
// soon as the last request's message is delivered, and Leave at the end.
type pcodeRunner struct {
	d       *reliable.Driver
	net     *testnet.Network
	steps   [][]pcodeCall
	next    int
	waiting []pcodeCall // requests proposed and not yet delivered, in order
	held    [][]byte    // refused for room, proposed again after the next turn
	got     []delivered
	bad     []string
	done    bool
}

func (r *pcodeRunner) advance() {
	now := r.net.Now()
	for len(r.held) > 0 {
		if err := r.d.Propose(now, r.held[0]); err != nil {
			if !errors.Is(err, reliable.ErrWindowFull) {
				r.bad = append(r.bad, err.Error())
			}
			return
		}
		r.held = r.held[1:]
	}
	for len(r.waiting) == 0 && r.next < len(r.steps) {
		for _, c := range r.steps[r.next] {
			b := reliable.AppendPCODEOp(nil, c.op)
			if len(r.held) > 0 {
				r.held = append(r.held, b)
			} else if err := r.d.Propose(now, b); errors.Is(err, reliable.ErrWindowFull) {
				r.held = append(r.held, b)
			} else if err != nil {
				r.bad = append(r.bad, err.Error())
			}
			if c.op.Kind == reliable.PCODERequest {
				r.waiting = append(r.waiting, c)
			}
		}
		r.next++
	}
	if !r.done && len(r.waiting) == 0 && r.next == len(r.steps) && len(r.held) == 0 {
		r.done = true
		r.d.Leave(now)
	}
}

func (r *pcodeRunner) deliver(from frame.MemberID, data []byte) {
	r.got = append(r.got, delivered{from, bytes.Clone(data)})
	if len(r.waiting) == 0 {
		r.bad = append(r.bad, fmt.Sprintf("a delivery from %d without a request", from))
		return
	}
	if w := r.waiting[0]; w.op.Peer != from || !bytes.Equal(w.want, data) {
		r.bad = append(r.bad, fmt.Sprintf("request from %d at step %d got %q from %d", w.op.Peer, w.op.Step, data, from))
	}
	r.waiting = r.waiting[1:]
	r.advance()
}

// Step is the testnet.Node: the driver's turn, then the held calls.
func (r *pcodeRunner) Step(now time.Time) time.Time {
	if r.next == 0 {
		r.advance()
	}
	next := r.d.Step(now)
	if len(r.held) > 0 {
		r.advance()
		next = r.d.Step(now)
	}
	return next
}

type pcodeRun struct {
	path    string
	members []frame.MemberInfo
	runners []*pcodeRunner
	rounds  int
}

// runPcode runs the test program on n members of an Order PCODE group on
// the simulator with receive loss, every endpoint captured into one file
// on the virtual clock.
func runPcode(t testing.TB, path string, seed uint64, n, rounds int, loss float64) *pcodeRun {
	t.Helper()
	run := &pcodeRun{path: path, rounds: rounds}
	seg := newSimSegment(t, path, seed, n, loss, nil, 1)
	net, w, eps := seg.net, seg.w, seg.eps
	run.members = seg.members
	ids := make([]frame.MemberID, n)
	for i, m := range run.members {
		ids[i] = m.ID
	}
	prog := pcodeTestProgram(ids, rounds)
	links := seg.links
	for i, l := range links {
		ep := eps[i]
		r := &pcodeRunner{net: net, steps: prog[i]}
		d, err := reliable.NewDriver(l, reliable.Config{Group: 7, Members: run.members, Self: frame.MemberID(i + 1), Order: reliable.PCODE,
			Logger: quietLogger(), Deliver: r.deliver}, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		r.d = d
		run.runners = append(run.runners, r)
		ep.Bind(r)
	}
	deadline := net.Now().Add(time.Minute)
	for net.Now().Before(deadline) {
		net.RunFor(10 * time.Millisecond)
		left := true
		for _, r := range run.runners {
			left = left && r.d.Left()
		}
		if left {
			break
		}
	}
	net.RunFor(100 * time.Millisecond) // the Leaves' linger
	for _, l := range links {
		l.Close()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range run.runners {
		if len(r.bad) > 0 || !r.done {
			t.Fatalf("member %d: done %v at step %d of %d, errors %q", i+1, r.done, r.next, len(r.steps), r.bad)
		}
	}
	return run
}

// Every member of a lossy PCODE run is re-run from the capture alone
// (members, protocol and program inferred): it delivers what the live
// member delivered and sends exactly what it sent, byte for byte.
func TestSimulatePcodeReproduces(t *testing.T) {
	for _, tc := range []struct {
		seed uint64
		n    int
		loss float64
	}{{1, 3, 0}, {2, 4, 0.05}, {3, 5, 0.15}} {
		t.Run(fmt.Sprintf("n=%d/loss=%g", tc.n, tc.loss), func(t *testing.T) {
			run := runPcode(t, filepath.Join(t.TempDir(), "pcode.pcapng"), tc.seed, tc.n, 60, tc.loss)
			c, err := ReadFile(run.path, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range run.members {
				res, err := Simulate(c, SimOptions{Node: m.ID, Iface: -1})
				if err != nil {
					t.Fatal(err)
				}
				if res.Protocol != ProtocolPCODE {
					t.Fatalf("member %d: protocol %v, want PCODE (notes %q)", m.ID, res.Protocol, res.Notes)
				}
				live := run.runners[i].got
				if len(res.Deliveries) != len(live) {
					t.Fatalf("member %d: re-run delivered %d messages, the live member %d (notes %q)", m.ID, len(res.Deliveries), len(live), res.Notes)
				}
				for k, d := range res.Deliveries {
					if d.From != live[k].From || !bytes.Equal(d.Data, live[k].Data) {
						t.Fatalf("member %d delivery %d: re-run %d %q, live %d %q", m.ID, k, d.From, d.Data, live[k].From, live[k].Data)
					}
				}
				if res.Divergence != "" {
					var b bytes.Buffer
					res.Write(&b, c, false)
					t.Errorf("member %d: %s\n%s", m.ID, res.Divergence, tail(b.String(), 8))
				}
				for _, n := range res.Notes {
					if strings.Contains(n, "diverge") {
						t.Errorf("member %d: %s", m.ID, n)
					}
				}
				if d := sentAsCaptured(c, res); d != "" {
					t.Errorf("member %d: %s", m.ID, d)
				}
				var a, b bytes.Buffer
				if err := res.Write(&a, c, false); err != nil {
					t.Fatal(err)
				}
				res2, _ := Simulate(c, SimOptions{Node: m.ID, Iface: -1})
				res2.Write(&b, c, false)
				if a.String() != b.String() {
					t.Fatalf("member %d: two re-runs print differently", m.ID)
				}
				if i == 1 {
					t.Logf("member %d re-run:\n%s\n...\n%s", m.ID, head(a.String(), 6), tail(a.String(), 3))
				}
			}
		})
	}
}

// A capture that lost a message member 1 received (here: cut out of the
// file) diverges: the re-run's program still waits for that sender's
// message when the capture shows member 1 going on, and the report names
// that frame as the first divergence, before the frames sent differ.
func TestSimulatePcodeDivergence(t *testing.T) {
	run := runPcode(t, filepath.Join(t.TempDir(), "pcode.pcapng"), 4, 3, 30, 0)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cut Record
	for i, r := range c.Records {
		if r.Iface == 0 && r.Dir == DirIn && r.View != nil && r.View.Type() == frame.PcodeData && r.View.PcodeData().Step == 7 {
			cut = r
			c.Records = append(c.Records[:i:i], c.Records[i+1:]...)
			break
		}
	}
	if cut.View == nil {
		t.Fatal("no message of step 7 received by member 1 in the capture")
	}
	res, err := Simulate(c, SimOptions{Node: 1, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := res.Write(&b, c, false); err != nil {
		t.Fatal(err)
	}
	var at int
	if _, err := fmt.Sscanf(res.Divergence, "frame %d:", &at); err != nil || at <= cut.N {
		t.Fatalf("first divergence %q: want one naming a frame after the cut frame %d\n%s", res.Divergence, cut.N, head(b.String(), 16))
	}
	if want := fmt.Sprintf("still waits for member %d's message", cut.View.Sender()); !strings.Contains(res.Divergence, want) {
		t.Errorf("first divergence %q: want %q", res.Divergence, want)
	}
	for _, want := range []string{"# first divergence: " + res.Divergence + "\n", "# first difference in the frames sent: sent frame "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, head(b.String(), 20))
		}
	}
	t.Logf("cut frame %d (%v from %d); %s", cut.N, cut.View.Type(), cut.View.Sender(), res.Divergence)
}
