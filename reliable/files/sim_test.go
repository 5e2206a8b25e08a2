package files

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
	"github.com/rbcast/rbcast/testnet"
)

// The simulation (DESIGN.md, "Testing", step 2): members run the file
// core through core.Stepper and the one wall clock conversion on
// testnet's segment with seeded loss (random and bursty), duplication,
// reordering, jitter and corruption, and with receivers that crash and
// restart (resuming from their sink), start late (after the pass ended),
// join the group after the snapshot (ghosts), senders that crash (and
// come back with a new incarnation to send the file again), a source
// whose disk fails, a sink that refuses a file, a sink that declines
// every file, and a sender whose file is not what its hash says. The checkers assert, at every report:
//
//   - a receiver that reports a file received holds exactly the bytes
//     sent (hash and bytes), committed once under its name, and nothing
//     is ever committed with a hash that is not its offer's (memSink);
//   - a resumed transfer never receives a block its sink verified (memSink);
//   - a sender's verdict covers exactly its snapshot: the members that
//     committed the file are done, every other one is missing, and a
//     member named missing that committed it crashed after it did;
//   - a receiver whose sink declines every file, up throughout, is named
//     declined, not silent;
//
// and at the end: every sender that stayed up judged every file, every
// receiver of the snapshot that stayed up from before the pass to the
// verdict holds every good file, and no transfer is still under way.

type simFile struct {
	name string
	data []byte
	hash [32]byte // what the offer says (wrong for a liar)
	alg  frame.FileHashAlg
	liar bool
	late bool // the offer says zeros: the sender's pass hashes it, FileEnd carries it
	to   []frame.MemberID
	// again: sent once more, without a hash, after every first file had
	// its verdict, under the name and size of first (changed: other
	// bytes); holders: the members whose sink stored first's bytes under
	// the name then.
	again, changed bool
	first          *simFile
	holders        map[int]bool
	src            *memSource
	// Filled as the run goes: the transfer's key, the sender's verdict.
	key     inKey
	sent    bool
	verdict *Report
	endAt   time.Time // when the verdict came
}

type scenario struct {
	seed     uint64
	n        int
	link     simtest.Link
	files    [][]*simFile // by sender index
	senders  int
	crash    map[int][2]time.Duration // member index → down at, up after (0: stays down)
	late     map[int]time.Duration    // member index → starts at
	ghost    int                      // member index not in the group until its start (-1: none)
	block    int
	refuse   int // member index whose sink refuses "refused*" (-1: none)
	decline  int // member index whose sink declines every file (0: none; member 0 sends)
	resend   bool
	failRead bool
	// again: once sender 0's files all have their verdicts, it sends
	// them again with no hash in the offer (some with other bytes of the
	// same size): a member that stored one holds it already, or has
	// another file under its name.
	again bool
	// The core's knobs: zero for the defaults.
	window, credit, statusEvery, repairPercent, burst int
	rate                                              int64
	// limit: member index past one of whose limits every file of more
	// than one block is (0: none); limitCause which: CauseNoSpace (its
	// sink has no room) or CauseTooLarge (MaxBlocks 1).
	limit      int
	limitCause Cause
	// inLoss: random loss on arrival at some members (the shape tests).
	inLoss map[int]float64
	// The segment: zero for testnet's defaults (50 µs, 1 Gbit/s).
	latency   time.Duration
	bandwidth int64
	// maxReceiving: every member's MaxReceiving (0: the default).
	maxReceiving int
}

func (s *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d members, block %d, %v", s.seed, s.n, s.block, s.link)
	for i, fs := range s.files {
		for _, f := range fs {
			fmt.Fprintf(&b, "\n  member %d sends %q (%d bytes, liar %v, hash in FileEnd %v, to %v)", i, f.name, len(f.data), f.liar, f.late, f.to)
		}
	}
	for i := range s.n {
		if c, ok := s.crash[i]; ok {
			fmt.Fprintf(&b, "\n  member %d crashes at %v, back after %v", i, c[0], c[1])
		}
		if l, ok := s.late[i]; ok {
			fmt.Fprintf(&b, "\n  member %d starts at %v (ghost %v)", i, l, i == s.ghost)
		}
	}
	fmt.Fprintf(&b, "\n  refuse %d, decline %d, limit %d (%v), sender resends after a crash %v, a read fails %v, sends again %v", s.refuse, s.decline, s.limit, s.limitCause, s.resend, s.failRead, s.again)
	fmt.Fprintf(&b, "\n  window %d credit %d statusEvery %d repairPercent %d burst %d", s.window, s.credit, s.statusEvery, s.repairPercent, s.burst)
	return b.String()
}

func drawScenario(seed uint64) *scenario {
	r := rand.New(rand.NewPCG(seed, 0xf11e5))
	s := &scenario{seed: seed, n: 2 + r.IntN(4), link: simtest.DrawLink(r), crash: map[int][2]time.Duration{}, late: map[int]time.Duration{}, ghost: -1, refuse: -1}
	s.block = 0
	if r.IntN(3) == 0 {
		s.block = 64 + r.IntN(600)
	}
	if s.link.MaxPayload > 0 && r.IntN(2) == 0 {
		s.block = s.link.MaxPayload
	}
	s.senders = 1
	if s.n > 2 && r.IntN(4) == 0 {
		s.senders = 2
	}
	s.files = make([][]*simFile, s.senders)
	for i := range s.senders {
		for k := range 1 + r.IntN(3) {
			size := []int{0, 1, 100 + r.IntN(2000), 10_000 + r.IntN(100_000), 200_000 + r.IntN(300_000)}[r.IntN(5)]
			f := &simFile{name: fmt.Sprintf("dir/file-%d.bin", k), data: make([]byte, size)}
			if s.senders == 2 && k == 0 {
				f.name = "same-name.bin" // two transfers, one name: never mixed
			}
			for j := range f.data {
				f.data[j] = byte(r.Uint32())
			}
			// Half the files (by the seed, drawing nothing from r) are
			// hashed with BLAKE3.
			f.alg = frame.FileHashSHA256
			if (s.seed>>2+uint64(i+k))&1 == 1 {
				f.alg = frame.FileHashBLAKE3
			}
			f.hash = mustSum(f.alg, f.data)
			if r.IntN(25) == 0 {
				f.liar = true
				f.hash[0] ^= 1
			}
			// Half the files (by the seed, drawing nothing from r) are
			// hashed as the pass sends them.
			f.late = !f.liar && (s.seed>>1+uint64(i+k))&1 == 1
			if r.IntN(8) == 0 && s.n > 2 {
				f.to = []frame.MemberID{frame.MemberID((i + 1) % s.n)}
			}
			s.files[i] = append(s.files[i], f)
		}
	}
	if r.IntN(4) == 0 && s.n > s.senders {
		s.refuse = s.n - 1
		s.files[0][0].name = "refused-" + s.files[0][0].name
	}
	receivers := s.n - s.senders
	switch r.IntN(6) {
	case 0, 1: // a receiver crashes mid-file and restarts
		i := s.senders + r.IntN(receivers)
		s.crash[i] = [2]time.Duration{time.Duration(1+r.IntN(30)) * time.Millisecond, time.Duration(r.IntN(2500)) * time.Millisecond}
	case 2: // a receiver starts after the pass ended (or during it)
		i := s.senders + r.IntN(receivers)
		s.late[i] = time.Duration(r.IntN(3000)) * time.Millisecond
	case 3: // a ghost: joins the group after the snapshot
		if receivers > 1 {
			s.ghost = s.n - 1
			s.late[s.ghost] = time.Duration(100+r.IntN(1500)) * time.Millisecond
			if s.refuse == s.ghost {
				s.refuse = -1
			}
		}
	case 4: // the sender crashes mid-pass
		s.crash[0] = [2]time.Duration{time.Duration(1+r.IntN(20)) * time.Millisecond, 0}
		s.resend = r.IntN(2) == 0
		if s.resend {
			s.crash[0] = [2]time.Duration{s.crash[0][0], time.Duration(r.IntN(3000)) * time.Millisecond}
		}
	}
	if r.IntN(30) == 0 {
		s.failRead = true
	}
	// Drawn from a source of its own, so that the other draws of a seed
	// stay what they were.
	s.again = rand.New(rand.NewPCG(seed, 0xa9a1)).IntN(4) == 0
	// A receiver whose sink declines every file (no recvfile client and
	// no -inbox), drawn so too; neither the ghost nor the refuser.
	if d := rand.New(rand.NewPCG(seed, 0xdec1)); d.IntN(4) == 0 {
		if i := s.senders + d.IntN(receivers); i != s.ghost && i != s.refuse {
			s.decline = i
		}
	}
	// A receiver that every file is beyond a limit of (no room for it,
	// or more blocks than it takes), drawn so too; none of the above.
	if d := rand.New(rand.NewPCG(seed, 0x11e1)); d.IntN(4) == 0 {
		if i := s.senders + d.IntN(receivers); i != s.ghost && i != s.refuse && i != s.decline {
			s.limit, s.limitCause = i, []Cause{CauseNoSpace, CauseTooLarge}[d.IntN(2)]
		}
	}
	if r.IntN(3) == 0 {
		s.window = 4 + r.IntN(100)
		s.statusEvery = 1 + r.IntN(2*s.window)
	}
	if r.IntN(3) == 0 {
		s.credit = 1 + r.IntN(64)
	}
	if r.IntN(4) == 0 {
		s.repairPercent = []int{1, 50, 100}[r.IntN(3)]
	}
	if r.IntN(4) == 0 {
		s.burst = 1 + r.IntN(8)
	}
	return s
}

type simNode struct {
	sim     *simRun
	idx     int
	id      frame.MemberID
	ep      *testnet.Endpoint
	info    frame.MemberInfo
	core    *Core
	stepper *core.Stepper
	sink    *memSink
	rx      []link.Frame
	up      bool
	// crashes: when it went down (a member named missing that committed
	// a file must have crashed after its commit).
	crashes  []time.Time
	upSince  time.Time
	received map[inKey]*Report
	spins    int
	steps    int
	reports  []Report
}

// explainDeadline names the timers due at or before now.
func (c *Core) explainDeadline(now Time) string {
	var b strings.Builder
	at := func(what string) func(Time) {
		return func(t Time) {
			if t != 0 && t <= now {
				fmt.Fprintf(&b, " %s@%d", what, t)
			}
		}
	}
	at("pace")(c.paceAt)
	c.senderDeadlines(at("sender"))
	c.receiverDeadlines(at("receiver"))
	for _, f := range c.open {
		fmt.Fprintf(&b, "\n open %v next %d ended %v judged %v endAt %d blocked %d probe %d", f.meta, f.next, f.ended, f.judged, f.endAt, f.blockedSince, f.probeAt)
	}
	for _, t := range c.in {
		fmt.Fprintf(&b, "\n in %v state %d heard %d reportAt %d reported %d arrived %d retry %d", t.meta, t.state, t.heard, t.reportAt, t.reported, t.arrived, t.retry)
	}
	fmt.Fprintf(&b, "\n tokens %d queue %d", c.tokens, len(c.queue))
	return b.String()
}

type simRun struct {
	t      testing.TB
	sc     *scenario
	net    *testnet.Network
	clock  wall.Clock
	nodes  []*simNode
	failed error
	byKey  map[inKey]*simFile
	start  time.Time
	boots  int // late starts, crashes and restarts still to come
}

func (s *simRun) fail(format string, args ...any) {
	if s.failed == nil {
		s.failed = fmt.Errorf("at %v: %s", s.net.Now().Sub(s.start), fmt.Sprintf(format, args...))
	}
}

func (s *simRun) infos(withGhost bool) []frame.MemberInfo {
	var ms []frame.MemberInfo
	for _, n := range s.nodes {
		if n.idx == s.sc.ghost && !withGhost {
			continue
		}
		ms = append(ms, n.info)
	}
	return ms
}

func (s *simRun) config(n *simNode, withGhost bool) Config {
	return Config{Group: 7, Self: n.id, Members: s.infos(withGhost), MTU: s.sc.link.MTU, BlockSize: s.sc.block, Sink: n.sink,
		Rate: cmp.Or(s.sc.rate, 60_000_000), FileTimeout: 5 * Second, Window: s.sc.window, Credit: s.sc.credit, StatusEvery: s.sc.statusEvery,
		RepairPercent: s.sc.repairPercent, Burst: s.sc.burst, MaxBlocks: s.maxBlocks(n), MaxReceiving: s.sc.maxReceiving}
}

// blocks is the number of blocks of f.
func (s *simRun) blocks(f *simFile) uint64 {
	bs := s.sc.block
	if bs == 0 {
		bs = frame.MaxPayload(cmp.Or(s.sc.link.MTU, DefaultMTU), 0, 0) - frame.FileDataHead
	}
	return frame.FileBlocks(uint64(len(f.data)), uint32(bs))
}

// maxBlocks is n's MaxBlocks: 1 at the member past whose MaxBlocks the
// scenario's files are, else the default.
func (s *simRun) maxBlocks(n *simNode) int {
	if n.idx == s.sc.limit && n.idx > 0 && s.sc.limitCause == CauseTooLarge {
		return 1
	}
	return 0
}

// boot starts (or restarts) a member's core: a new incarnation, the same
// sink.
func (n *simNode) boot(now time.Time) {
	s := n.sim
	n.info.Incarnation++
	cfg := s.config(n, s.sc.ghost < 0 || n.idx == s.sc.ghost || s.nodes[s.sc.ghost].core != nil)
	c, err := New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	n.core, n.up, n.upSince = c, true, now
	n.stepper = core.NewStepper(c, 7, frame.EtherType)
	n.stepper.Tick(s.clock.Core(now))
	if n.idx < len(s.sc.files) && (n.info.Incarnation == 1 || s.sc.resend) {
		for _, f := range s.sc.files[n.idx] {
			if f.sent && f.verdict != nil {
				continue
			}
			f.src = &memSource{data: f.data, bs: c.cfg.BlockSize, fail: -1}
			if s.sc.failRead && n.idx == 0 && f == s.sc.files[0][0] && len(f.data) > 3*c.cfg.BlockSize {
				f.src.fail = 2
			}
			o := Outgoing{Name: f.name, Size: uint64(len(f.data)), Hash: f.hash, HashAlg: f.alg, Source: f.src, To: f.to}
			if f.late {
				o.Hash = [32]byte{}
			}
			id, err := c.Send(s.clock.Core(now), o)
			if err != nil {
				s.t.Fatal(err)
			}
			f.key, f.sent, f.verdict = inKey{n.id, n.info.Incarnation, id}, true, nil
			s.byKey[f.key] = f
		}
	}
	n.ep.Bind(n)
}

func (n *simNode) Step(now time.Time) time.Time {
	if !n.up {
		return time.Time{}
	}
	t := n.sim.clock.Core(now)
	n.steps++
	for {
		k, _ := n.ep.Recv(time.Time{}, n.rx)
		for _, f := range n.rx[:k] {
			_ = n.stepper.Step(t, f.Data)
		}
		n.stepper.Tick(t)
		n.flush(now)
		if k == 0 {
			break
		}
	}
	d := n.stepper.Deadline()
	if d != 0 && d <= t {
		if n.spins++; n.spins > 10000 {
			n.sim.fail("member %d: deadline %d not after now %d: %s", n.id, d, t, n.core.explainDeadline(t))
			n.up = false
		}
	} else {
		n.spins = 0
	}
	return n.sim.clock.Wall(d)
}

func (n *simNode) flush(now time.Time) {
	rd := n.stepper.Ready()
	if len(rd.Frames) > 0 {
		if _, err := n.ep.Send(rd.Frames); err != nil && !n.ep.Crashed() {
			n.sim.fail("member %d: send: %v", n.id, err)
		}
	}
	for _, r := range n.core.Reports() {
		n.check(now, r)
	}
	n.stepper.Advance()
}

// check is the checker of one report.
func (n *simNode) check(now time.Time, r Report) {
	s := n.sim
	n.reports = append(n.reports, r)
	k := inKey{r.Meta.Sender, r.Meta.Incarnation, r.Meta.ID}
	switch r.Kind {
	case Received:
		f := s.byKey[k]
		switch {
		case f == nil:
			s.fail("member %d: received %v, which nobody sent", n.id, r.Meta)
		case f.liar:
			s.fail("member %d: received %v, whose hash its sender lied about", n.id, r.Meta)
		case r.Meta.Name != f.name || r.Meta.Size != uint64(len(f.data)) || r.Meta.Hash != f.hash:
			s.fail("member %d: received %v, sent as %q of %d bytes", n.id, r.Meta, f.name, len(f.data))
		case !bytes.Equal(n.sink.commits[k], f.data):
			s.fail("member %d: received %v, but its sink holds %d other bytes", n.id, r.Meta, len(n.sink.commits[k]))
		case n.received[k] != nil && len(n.crashes) == 0:
			s.fail("member %d: received %v twice", n.id, r.Meta)
		case f.again && f.holders[n.idx] && s.sc.senders == 1 && len(f.data) > 0 && r.Held == f.changed:
			// It stored the first copy when this one was sent, and only
			// one sender sends files of this name.
			s.fail("member %d: received %v with Held %v Replaced %v; it stored the first copy and this one is changed %v", n.id, r.Meta, r.Held, r.Replaced, f.changed)
		case f.again && f.holders[n.idx] && s.sc.senders == 1 && r.Replaced != f.changed:
			s.fail("member %d: received %v with Replaced %v; it stored the first copy and this one is changed %v", n.id, r.Meta, r.Replaced, f.changed)
		}
		n.received[k] = &r
	case Incomplete:
		if _, ok := n.sink.commits[k]; ok {
			s.fail("member %d: %v reported incomplete, but it was committed", n.id, r.Meta)
		}
	case Verdict:
		f := s.byKey[k]
		if f == nil || k.sender != n.id {
			s.fail("member %d: a verdict on %v, which it did not send", n.id, r.Meta)
			return
		}
		if f.verdict != nil {
			s.fail("member %d: a second verdict on %v", n.id, r.Meta)
		}
		f.verdict, f.endAt = &r, now
		want := f.to
		if want == nil {
			for _, m := range n.core.members {
				if m.ID != n.id {
					want = append(want, m.ID)
				}
			}
		}
		var got []frame.MemberID
		for _, id := range r.Done {
			got = append(got, id)
			m := s.nodes[id]
			if _, ok := m.sink.commits[k]; !ok {
				s.fail("verdict on %v names member %d done; it did not commit the file", r.Meta, id)
			}
		}
		for _, ms := range r.Missing {
			got = append(got, ms.Member)
			m := s.nodes[ms.Member]
			if _, ok := m.sink.commits[k]; ok && len(m.crashes) == 0 && m.core != nil && m.upSince.Equal(s.start) {
				s.fail("verdict on %v names member %d missing (%v); it committed the file and was up throughout", r.Meta, ms.Member, ms.Cause)
			}
			if f.liar && r.Err == nil && ms.Cause != CauseHash && ms.Cause != CauseSilent && ms.Cause != CauseStorage && ms.Cause != CauseDeclined && !ms.Cause.Limit() {
				s.fail("verdict on %v: member %d missing for %v, want a hash mismatch", r.Meta, ms.Member, ms.Cause)
			}
		}
		slices.Sort(got)
		noGhost := slices.DeleteFunc(slices.Clone(want), func(id frame.MemberID) bool { return int(id) == s.sc.ghost })
		if !slices.Equal(got, want) && !slices.Equal(got, noGhost) {
			s.fail("verdict on %v covers %v, its snapshot is %v: %v", r.Meta, got, want, r)
		}
	}
}

func (n *simNode) crash(now time.Time) {
	n.up = false
	n.crashes = append(n.crashes, now)
	n.ep.Crash()
	n.sink.crash()
}

func runSim(t testing.TB, sc *scenario, trace func(testnet.Event)) (*simRun, error) {
	net, err := testnet.New(sc.seed, testnet.Config{Latency: sc.latency, Bandwidth: sc.bandwidth})
	if err != nil {
		t.Fatal(err)
	}
	if trace != nil {
		net.Trace(trace)
	}
	s := &simRun{t: t, sc: sc, net: net, clock: wall.Clock{Epoch: net.Now()}, byKey: map[inKey]*simFile{}, start: net.Now()}
	for i := range sc.n {
		ep, err := net.Attach(sc.link.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		n := &simNode{sim: s, idx: i, id: frame.MemberID(i), ep: ep, rx: make([]link.Frame, 32), received: map[inKey]*Report{}}
		n.info = frame.MemberInfo{ID: n.id, MAC: [6]byte(ep.HardwareAddr())}
		n.sink = newMemSink(func(format string, args ...any) { s.fail("member %d: sink: %s", n.id, fmt.Sprintf(format, args...)) })
		if i == sc.refuse {
			n.sink.refuse = "refused-"
		}
		n.sink.decline = i == sc.decline && i > 0
		if i == sc.limit && i > 0 && sc.limitCause == CauseNoSpace {
			n.sink.limit = fmt.Errorf("no room: %w", ErrNoSpace)
		}
		if loss, ok := sc.inLoss[i]; ok {
			im := sc.link.In
			im.Loss = loss
			if err := ep.SetImpairment(testnet.In, im); err != nil {
				t.Fatal(err)
			}
		}
		s.nodes = append(s.nodes, n)
	}
	now := net.Now()
	for _, n := range s.nodes {
		if at, ok := sc.late[n.idx]; ok {
			s.boots++
			net.At(now.Add(at), func() {
				s.boots--
				if n.idx == sc.ghost {
					// The group's view changes: every member learns of it.
					for _, m := range s.nodes {
						if m.core != nil {
							m.core.SetMembers(s.infos(true))
						}
					}
				}
				n.boot(net.Now())
			})
			continue
		}
		n.boot(now)
	}
	for i, c := range sc.crash {
		n := s.nodes[i]
		s.boots++ // the crash, then the restart
		if c[1] > 0 {
			s.boots++
		}
		net.At(now.Add(c[0]), func() {
			s.boots--
			n.crash(net.Now())
			if c[1] > 0 {
				net.At(net.Now().Add(c[1]), func() {
					s.boots--
					n.ep.Restart()
					n.boot(net.Now())
				})
			}
		})
	}
	limit := now.Add(120 * time.Second)
	done := func() bool {
		if s.boots > 0 {
			return false
		}
		for _, n := range s.nodes {
			// Busy, or a file still open at its sender: a member that
			// restarted may still fetch it.
			if n.up && (n.core.Busy() || len(n.core.open) > 0) {
				return false
			}
		}
		for i, fs := range sc.files {
			if !s.nodes[i].up {
				continue
			}
			for _, f := range fs {
				if f.sent && f.verdict == nil {
					return false
				}
			}
		}
		return true
	}
	for s.failed == nil && net.Now().Before(limit) {
		if done() && !s.sendAgain(net.Now()) {
			break
		}
		net.RunFor(10 * time.Millisecond)
	}
	// Let the last reports land before the final checks.
	net.RunFor(50 * time.Millisecond)
	if s.failed != nil {
		return s, s.failed
	}
	if !done() {
		var b strings.Builder
		for _, n := range s.nodes {
			if n.core == nil {
				continue
			}
			fmt.Fprintf(&b, "\n  member %d up %v steps %d stats %+v:", n.id, n.up, n.steps, n.core.stats)
			fmt.Fprintf(&b, "\n    %s", n.core.explainDeadline(s.clock.Core(net.Now())))
			for _, p := range n.core.Progress() {
				fmt.Fprintf(&b, "\n    %v sending %v %s %d/%d %+v", p.Meta, p.Sending, p.State, p.Held, p.Blocks, p.Receivers)
			}
		}
		return s, fmt.Errorf("not finished after 120 s of virtual time:%s", b.String())
	}
	return s, s.final()
}

// sendAgain sends sender 0's files once more (scenario.again), with no
// hash in their offers, once they all have their verdicts; every other
// one with other bytes of the same size. It reports whether it sent.
func (s *simRun) sendAgain(now time.Time) bool {
	sc := s.sc
	n := s.nodes[0]
	if !sc.again || !n.up || len(sc.files) == 0 {
		return false
	}
	var again []*simFile
	for i, f := range sc.files[0] {
		if f.again || f.verdict == nil {
			return false
		}
		g := &simFile{name: f.name, data: bytes.Clone(f.data), late: true, to: f.to, again: true, first: f, holders: map[int]bool{}, alg: f.alg}
		if g.changed = i%2 == 0 && len(g.data) > 0; g.changed {
			g.data[len(g.data)/2] ^= 0x5a
		}
		if (s.sc.seed>>3)&1 == 1 {
			// Sent again under the other algorithm: the file stored
			// is held all the same (its hash under this one matches).
			g.alg = frame.FileHashSHA256 + frame.FileHashBLAKE3 - f.alg
		}
		g.hash = mustSum(g.alg, g.data)
		for _, m := range s.nodes {
			if d, ok := m.sink.stored[f.name]; ok && bytes.Equal(d, f.data) {
				g.holders[m.idx] = true
			}
		}
		again = append(again, g)
	}
	if len(again) == 0 {
		return false
	}
	t := s.clock.Core(now)
	for _, g := range again {
		g.src = &memSource{data: g.data, bs: n.core.cfg.BlockSize, fail: -1}
		id, err := n.core.Send(t, Outgoing{Name: g.name, Size: uint64(len(g.data)), HashAlg: g.alg, Source: g.src, To: g.to})
		if err != nil {
			s.t.Fatal(err)
		}
		g.key, g.sent = inKey{n.id, n.info.Incarnation, id}, true
		s.byKey[g.key] = g
		sc.files[0] = append(sc.files[0], g)
	}
	n.ep.Bind(n) // a step now, which sends them
	return true
}

// final checks what must hold at the end of a run.
func (s *simRun) final() error {
	sc := s.sc
	for i, fs := range sc.files {
		sender := s.nodes[i]
		for _, f := range fs {
			if !sender.up || f.verdict == nil {
				continue
			}
			if f.liar || f.verdict.Err != nil {
				for _, n := range s.nodes {
					if _, ok := n.sink.commits[f.key]; ok {
						return fmt.Errorf("member %d committed %q, whose %s", n.id, f.name, map[bool]string{true: "hash its sender lied about", false: "source failed"}[f.liar])
					}
				}
				continue
			}
			// Every member up at the end that was up before the verdict
			// (restarted, late, or a ghost included) fetched the file
			// while it was open.
			for _, n := range s.nodes {
				if n.idx == i || !n.up || n.upSince.After(f.endAt) || len(sender.crashes) > 0 {
					continue
				}
				if n.idx == sc.refuse && strings.HasPrefix(f.name, "refused-") || n.idx == sc.decline && n.idx > 0 || n.idx == sc.limit && n.idx > 0 && s.blocks(f) > 1 {
					continue
				}
				if got, ok := n.sink.commits[f.key]; !ok || !bytes.Equal(got, f.data) {
					return fmt.Errorf("member %d, up since %v, does not hold %q at the end (verdict at %v: %v)", n.id, n.upSince.Sub(s.start), f.name, f.endAt.Sub(s.start), f.verdict)
				}
			}
			for _, ms := range f.verdict.Missing {
				m := s.nodes[ms.Member]
				steady := len(m.crashes) == 0 && m.core != nil && m.upSince.Sub(s.start) == 0 && ms.Member != frame.MemberID(sc.ghost)
				declined := sc.decline > 0 && ms.Member == frame.MemberID(sc.decline)
				if declined && steady && ms.Cause != CauseDeclined {
					return fmt.Errorf("verdict on %q names member %d missing for %v, want declined (its sink declines every file)", f.name, ms.Member, ms.Cause)
				}
				limited := sc.limit > 0 && ms.Member == frame.MemberID(sc.limit)
				if limited && steady && ms.Cause != sc.limitCause {
					return fmt.Errorf("verdict on %q names member %d missing for %v, want %v (the file is beyond that limit of it)", f.name, ms.Member, ms.Cause, sc.limitCause)
				}
				if steady && !declined && !limited && !(ms.Member == frame.MemberID(sc.refuse) && strings.HasPrefix(f.name, "refused-")) && len(sender.crashes) == 0 {
					return fmt.Errorf("verdict on %q names member %d missing (%v, %d of %d blocks), though it was up throughout: %v", f.name, ms.Member, ms.Cause, ms.Held, ms.Blocks, f.verdict)
				}
				if ms.Member == frame.MemberID(sc.refuse) && strings.HasPrefix(f.name, "refused-") && ms.Cause != CauseStorage && steady {
					return fmt.Errorf("verdict on %q names member %d missing for %v, want a storage failure", f.name, ms.Member, ms.Cause)
				}
			}
		}
	}
	return nil
}

func TestSim(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	seeds := simtest.Seeds(t, 300)
	t.Cleanup(func() {
		t.Logf("scenarios seen in %d seeds: %v", seeds, seen)
		if seeds < 200 || t.Failed() {
			return
		}
		// The impairments the scenarios draw must have happened, with the
		// outcome each promises, or the checkers above checked nothing.
		for _, what := range []string{"receiver resumed after a restart", "ghost fetched", "late member fetched after the verdict",
			"sender crash ended transfers", "restarted sender's offer resumed", "hash mismatch named", "storage refusal named",
			"read failure aborted", "declined named", "limit named", "repair to the group", "window stall", "repair to one receiver",
			"file sent again held already", "changed file replaced the stored one", "pass skipped: every receiver held the file"} {
			if seen[what] == 0 {
				t.Errorf("no seed showed %q", what)
			}
		}
	})
	simtest.RunSeeds(t, 300, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		sc := drawScenario(seed)
		s, err := runSim(t, sc, nil)
		if err == nil {
			mu.Lock()
			for k, v := range s.coverage() {
				seen[k] += v
			}
			mu.Unlock()
		}
		return sc, err
	})
}

// coverage names what happened in a run, for TestSim's check that the
// scenarios do what they are drawn for.
func (s *simRun) coverage() map[string]int {
	seen := map[string]int{}
	add := func(what string, ok bool) {
		if ok {
			seen[what]++
		}
	}
	for _, n := range s.nodes {
		if n.core == nil {
			continue
		}
		st := n.core.stats
		sender := n.idx < s.sc.senders
		add("receiver resumed after a restart", !sender && len(n.crashes) > 0 && st.Resumed > 0 && len(n.received) > 0)
		add("restarted sender's offer resumed", !sender && s.sc.resend && st.Resumed > 0)
		add("repair to the group", st.RepairsToGroup > 0)
		add("repair to one receiver", st.BlocksRepaired > st.RepairsToGroup)
		add("window stall", st.WindowStalls > 0)
		add("pass skipped: every receiver held the file", st.PassesSkipped > 0)
		if n.idx == s.sc.ghost {
			add("ghost fetched", len(n.received) > 0)
		}
		for _, fs := range s.sc.files {
			for _, f := range fs {
				if f.verdict != nil && n.upSince.After(f.endAt) && n.idx != s.sc.ghost {
					_, ok := n.sink.commits[f.key]
					add("late member fetched after the verdict", ok)
				}
			}
		}
		for _, r := range n.reports {
			if f := s.byKey[inKey{r.Meta.Sender, r.Meta.Incarnation, r.Meta.ID}]; f != nil && f.again && r.Kind == Received {
				add("file sent again held already", !f.changed && r.Held && len(f.data) > 0)
				add("changed file replaced the stored one", f.changed && r.Replaced)
			}
			add("sender crash ended transfers", r.Kind == Incomplete && (r.Cause == CauseSilent || r.Cause == CauseRestarted) && len(s.nodes[r.Meta.Sender].crashes) > 0)
			for _, m := range r.Missing {
				add("hash mismatch named", m.Cause == CauseHash)
				add("storage refusal named", m.Cause == CauseStorage)
				add("declined named", m.Cause == CauseDeclined)
				add("limit named", m.Cause.Limit())
			}
			add("read failure aborted", r.Kind == Verdict && r.Err != nil)
		}
	}
	return seen
}

func TestSimDeterministic(t *testing.T) {
	simtest.Deterministic(t, 20, func(t testing.TB, seed uint64, trace func(testnet.Event)) error {
		_, err := runSim(t, drawScenario(seed), trace)
		return err
	})
}
