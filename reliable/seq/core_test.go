package seq

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// Hand-fed transcripts: frames out of one core's Ready are looked at, then
// handed (or not) to the others.

const testGroup = 77

// t0 is the first instant of every transcript.
const t0 Time = 1_000_000_000

func testMAC(id frame.MemberID) [6]byte { return [6]byte{0x02, 0, 0, 0, 0, byte(id + 1)} }

func testMembers(n int) []frame.MemberInfo {
	ms := make([]frame.MemberInfo, n)
	for i := range ms {
		ms[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: testMAC(frame.MemberID(i)), Incarnation: 5}
	}
	return ms
}

func testConfig(self frame.MemberID, n int, method Method) Config {
	// The transcripts check frames one by one: they run with the
	// sequencer-only resilience (no acknowledgement round); the
	// SafeMajority transcripts set it back.
	return Config{Group: testGroup, Self: self, Members: testMembers(n), Method: method, InitialGlobal: 1000, Resilience: SafeSequencer}
}

// out is one frame a core sent.
type out struct {
	dst [6]byte
	src [6]byte
	v   frame.View
}

func (o out) String() string {
	return fmt.Sprintf("%v from %d to %x seq %d", o.v.Type(), o.v.Sender(), o.dst, o.v.Seq())
}

// group is a handful of cores wired by hand.
type group struct {
	t     *testing.T
	cores []*Core
	now   Time
	got   [][]Delivery // per core, copied
	evs   [][]Event
}

func newGroup(t *testing.T, n int, mod func(*Config)) *group {
	g := &group{t: t, now: t0, got: make([][]Delivery, n), evs: make([][]Event, n)}
	for i := range n {
		cfg := testConfig(frame.MemberID(i), n, Hybrid)
		if mod != nil {
			mod(&cfg)
		}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Tick(g.now)
		g.cores = append(g.cores, c)
	}
	return g
}

// ready collects core i's output: frames (copied and parsed), deliveries
// and events are recorded.
func (g *group) ready(i int) []out {
	g.t.Helper()
	rd := g.cores[i].Ready()
	var outs []out
	for _, f := range rd.Frames {
		b := bytes.Clone(f)
		eth, body, err := frame.SplitEthernet(b, frame.EtherType)
		if err != nil {
			g.t.Fatal(err)
		}
		v, err := frame.ParseGroup(body, testGroup)
		if err != nil {
			g.t.Fatalf("core %d built a bad frame: %v", i, err)
		}
		outs = append(outs, out{dst: eth.Dst(), src: eth.Src(), v: v})
	}
	for _, d := range rd.Deliveries {
		d.Data = bytes.Clone(d.Data)
		g.got[i] = append(g.got[i], d)
	}
	g.evs[i] = append(g.evs[i], rd.Events...)
	g.cores[i].Advance()
	return outs
}

// to hands frame o to core j, as the network would when j is addressed.
func (g *group) to(j int, o out) error {
	return g.cores[j].Step(g.now, o.src, frame.Broadcast, o.v)
}

// pump runs the group until no frame moves; drop decides losses.
func (g *group) pump(drop func(from, to int, o out) bool) {
	g.t.Helper()
	for range 1000 {
		moved := false
		for i := range g.cores {
			for _, o := range g.ready(i) {
				for j := range g.cores {
					if j == i || (o.dst != frame.Broadcast && o.dst != testMAC(frame.MemberID(j))) {
						continue
					}
					if drop != nil && drop(i, j, o) {
						continue
					}
					moved = true
					if g.cores[j].Halted() {
						continue
					}
					g.to(j, o)
				}
			}
		}
		if !moved {
			return
		}
	}
	g.t.Fatal("the group never went quiet")
}

// run advances time to t in steps of 5 ms, pumping frames after each.
func (g *group) run(t Time, drop func(from, to int, o out) bool) {
	for g.now < t {
		g.advance(min(t, g.now.Add(5*Millisecond)))
		g.pump(drop)
	}
}

// advance moves time to t and ticks everyone.
func (g *group) advance(t Time) {
	g.now = t
	for _, c := range g.cores {
		if !c.Halted() {
			c.Tick(t)
		}
	}
}

func (g *group) propose(i int, msg string) {
	g.t.Helper()
	if err := g.cores[i].Propose(g.now, []byte(msg)); err != nil {
		g.t.Fatal(err)
	}
}

func (g *group) delivered(i int) string {
	var s []string
	for _, d := range g.got[i] {
		s = append(s, fmt.Sprintf("%d:%d/%d=%s", d.Global, d.From, d.Seq, d.Data))
	}
	return strings.Join(s, " ")
}

func only(t *testing.T, outs []out, want ...frame.Type) {
	t.Helper()
	var got []frame.Type
	for _, o := range outs {
		got = append(got, o.v.Type())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames %v, want %v (%v)", got, want, outs)
	}
}

func TestMethod1(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	g.propose(1, "hello")
	req := g.ready(1)
	only(t, req, frame.SeqRequest)
	if req[0].dst != testMAC(0) || req[0].v.Seq() != firstRequest {
		t.Fatalf("request %v: want point to point to the sequencer, request number %d", req[0], firstRequest)
	}
	if a, _ := req[0].v.AckFor(0); a != 1000 {
		t.Fatalf("ack entry %d, want the delivered cursor 1000", a)
	}
	if err := g.to(0, req[0]); err != nil {
		t.Fatal(err)
	}
	data := g.ready(0)
	only(t, data, frame.SeqData)
	d := data[0]
	if d.dst != frame.Broadcast || d.v.Seq() != 1000 || d.v.SeqDataUID() != (frame.UID{Origin: 1, Incarnation: 5, Seq: firstRequest}) || string(d.v.Payload()) != "hello" {
		t.Fatalf("SeqData %v uid %+v payload %q", d, d.v.SeqDataUID(), d.v.Payload())
	}
	for _, j := range []int{1, 2} {
		if err := g.to(j, d); err != nil {
			t.Fatal(err)
		}
		g.ready(j)
	}
	for i := range 3 {
		if got := g.delivered(i); got != "1000:1/1=hello" {
			t.Errorf("member %d delivered %q", i, got)
		}
	}
	if n := g.cores[1].outstanding(); n != 0 {
		t.Fatalf("sender still has %d requests outstanding after its own delivery", n)
	}
}

func TestMethod2AcceptsShareAFrame(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method2 })
	g.cores[1].sealAhead = 3 // three requests in flight at once
	var reqs []out
	for i, msg := range []string{"a", "bb", "ccc"} {
		g.propose(1, msg)
		r := g.ready(1)
		only(t, r, frame.SeqRequest)
		if r[0].dst != frame.Broadcast {
			t.Fatalf("request %d to %x, want broadcast (method 2)", i, r[0].dst)
		}
		reqs = append(reqs, r[0])
	}
	for _, r := range reqs {
		g.to(0, r)
	}
	acc := g.ready(0)
	only(t, acc, frame.SeqAccept)
	if al := acc[0].v.Accepts(); al.Len() != 3 || al.At(2).Global != 1002 || acc[0].v.Seq() != 1002 {
		t.Fatalf("one Accept frame with 3 entries up to 1002 expected, got %d entries, seq %d", al.Len(), acc[0].v.Seq())
	}
	// Member 2 gets the Accept before two of the requests: it waits for
	// them, then delivers all three in order.
	g.to(2, reqs[0])
	g.to(2, acc[0])
	g.ready(2)
	if got := g.delivered(2); got != "1000:1/1=a" {
		t.Fatalf("before the requests: %q", got)
	}
	g.to(2, reqs[2])
	g.to(2, reqs[1])
	g.ready(2)
	if got, want := g.delivered(2), "1000:1/1=a 1001:1/2=bb 1002:1/3=ccc"; got != want {
		t.Fatalf("member 2 delivered %q, want %q", got, want)
	}
	// The sender matches the Accept to its own pending requests.
	g.to(1, acc[0])
	g.ready(1)
	if got := g.delivered(1); got != "1000:1/1=a 1001:1/2=bb 1002:1/3=ccc" {
		t.Fatalf("sender delivered %q", got)
	}
	if st := g.cores[2].Counters(); st.PayloadsMatched != 3 {
		t.Fatalf("PayloadsMatched %d, want 3", st.PayloadsMatched)
	}
}

func TestMethod2MissingPayloadIsFetched(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method2 })
	g.propose(1, "lost on the way to 2")
	req := g.ready(1)
	g.to(0, req[0])
	acc := g.ready(0)
	g.to(2, acc[0]) // the broadcast request never reaches member 2
	only(t, g.ready(2))
	g.advance(t0.Add(DefaultNackTimeout))
	ask := g.ready(2)
	only(t, ask, frame.SeqRetransmit)
	if ask[0].dst != testMAC(0) || ask[0].v.RetransmitRanges().At(0) != (frame.Range{First: 1000, Last: 1000}) {
		t.Fatalf("retransmit request %v ranges %v", ask[0], ask[0].v.RetransmitRanges().At(0))
	}
	g.to(0, ask[0])
	ans := g.ready(0)
	// (The group quiet for NackTimeout, the sequencer also asks for the
	// received cursors that move the all-held cursor: see held.go.)
	only(t, ans, frame.SeqData, frame.SeqStatusRequest)
	if ans[0].dst != testMAC(2) || !ans[0].v.Retransmission() {
		t.Fatalf("answer %v: want a private retransmission to member 2", ans[0])
	}
	g.to(2, ans[0])
	g.ready(2)
	if got := g.delivered(2); got != "1000:1/1=lost on the way to 2" {
		t.Fatalf("member 2 delivered %q", got)
	}
}

func TestHybridThreshold(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Threshold = 10 })
	g.propose(1, "short")
	small := g.ready(1)
	g.propose(1, "long enough for method 2")
	big := g.ready(1)
	if small[0].dst != testMAC(0) || big[0].dst != frame.Broadcast {
		t.Fatalf("short request to %x, long to %x: want the sequencer's MAC, then broadcast", small[0].dst, big[0].dst)
	}
	g.to(0, small[0])
	g.to(0, big[0])
	only(t, g.ready(0), frame.SeqData, frame.SeqAccept)
}

func TestBundleSharesOneGlobal(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Method = Method1 })
	g.propose(1, "x")
	g.propose(1, "yy")
	g.propose(1, "")
	g.pump(nil)
	if got, want := g.delivered(0), "1000:1/1=x 1000:1/1=yy 1000:1/1="; got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if g.got[0][2].Index != 2 {
		t.Fatalf("third message of the bundle has index %d", g.got[0][2].Index)
	}
}

func TestSequencerOwnMessagesInTheirPlace(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.propose(1, "one")
	g.propose(0, "zero")
	g.propose(2, "two")
	g.pump(nil)
	want := g.delivered(0)
	for i := range 3 {
		if g.delivered(i) != want || len(g.got[i]) != 3 {
			t.Fatalf("member %d delivered %q, sequencer %q", i, g.delivered(i), want)
		}
	}
}

func TestDuplicateRequestNotSequencedTwice(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Method = Method1 })
	g.propose(1, "once")
	req := g.ready(1)
	g.to(0, req[0])
	first := g.ready(0)
	only(t, first, frame.SeqData)
	// The SeqData is lost; the sender's resend timer sends the request
	// again.
	g.advance(t0.Add(DefaultResendTimeout))
	again := g.ready(1)
	only(t, again, frame.SeqRequest)
	if !again[0].v.Retransmission() || again[0].v.Seq() != req[0].v.Seq() {
		t.Fatalf("resent request %v: want the same number, flagged as a retransmission", again[0])
	}
	g.to(0, again[0])
	ans := g.ready(0)
	only(t, ans, frame.SeqData, frame.SeqStatusRequest) // and the all-held ask (held.go)
	if ans[0].dst != testMAC(1) || ans[0].v.Seq() != 1000 {
		t.Fatalf("duplicate answered with %v, want global 1000 to the sender", ans[0])
	}
	st := g.cores[0].Counters()
	if st.Sequenced != 1 || st.DuplicateRequests != 1 {
		t.Fatalf("Sequenced %d DuplicateRequests %d, want 1 and 1", st.Sequenced, st.DuplicateRequests)
	}
	g.to(1, ans[0])
	g.ready(1)
	if got := g.delivered(1); got != "1000:1/1=once" {
		t.Fatalf("sender delivered %q", got)
	}
}

func TestRequestsNumberedInOrderOfTheirOrigin(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Method = Method1 })
	g.propose(1, "first")
	r1 := g.ready(1)
	g.propose(1, "second")
	r2 := g.ready(1)
	g.to(0, r2[0]) // overtakes the first: held, not numbered
	only(t, g.ready(0))
	g.to(0, r1[0])
	only(t, g.ready(0), frame.SeqData, frame.SeqData)
	if got := g.delivered(0); got != "1000:1/1=first 1001:1/2=second" {
		t.Fatalf("sequencer delivered %q", got)
	}
}

func TestGapAskedAtOnce(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	g.propose(0, "m0")
	g.ready(0) // lost at member 2
	g.propose(0, "m1")
	d1 := g.ready(0)
	g.to(2, d1[0]) // 1000 lost at member 2
	ask := g.ready(2)
	only(t, ask, frame.SeqRetransmit)
	if r := ask[0].v.RetransmitRanges(); r.Len() != 1 || r.At(0) != (frame.Range{First: 1000, Last: 1000}) || ask[0].dst != testMAC(0) {
		t.Fatalf("asked %v for %v", ask[0], r.At(0))
	}
	g.to(0, ask[0])
	ans := g.ready(0)
	g.to(2, ans[0])
	g.ready(2)
	if got := g.delivered(2); got != "1000:0/1=m0 1001:0/2=m1" {
		t.Fatalf("member 2 delivered %q", got)
	}
}

func TestLostTailFromStatusRequest(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Method = Method1 })
	g.propose(0, "tail")
	g.ready(0) // lost
	g.advance(t0.Add(DefaultHeartbeatInterval))
	hb := g.ready(0)
	only(t, hb, frame.SeqStatusRequest)
	if hb[0].v.StatusDelivered() != 1000 {
		t.Fatalf("status request names %d, want 1000", hb[0].v.StatusDelivered())
	}
	g.to(1, hb[0])
	outs := g.ready(1)
	only(t, outs, frame.SeqStatusReply, frame.SeqRetransmit)
}

func TestHistoryGarbageCollection(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.History = 4; c.Method = Method1 })
	for i := range 5 {
		g.propose(0, fmt.Sprint(i))
		g.ready(0) // member 1 hears nothing: no acknowledgement
	}
	st := g.cores[0].Counters()
	if st.Sequenced != 4 || st.InHistory != 4 || st.HistoryFull != 1 {
		t.Fatalf("Sequenced %d InHistory %d HistoryFull %d, want 4, 4 and 1", st.Sequenced, st.InHistory, st.HistoryFull)
	}
	// The sequencer asks for status (rate-limited: next Ready after the
	// hold); member 1's reply frees the history.
	g.advance(t0.Add(DefaultNackTimeout))
	sr := g.ready(0)
	only(t, sr, frame.SeqStatusRequest)
	reply := frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, AckBase: 0, Acks: []uint32{1004}}
	b, _ := frame.Append(nil, &reply, &frame.StatusBody{T: frame.SeqStatusReply, Epoch: 1, Delivered: 1003})
	v, _ := frame.Parse(b)
	if err := g.cores[0].Step(g.now, testMAC(1), frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
	only(t, g.ready(0), frame.SeqData)
	if st := g.cores[0].Counters(); st.Sequenced != 5 || st.InHistory != 1 {
		t.Fatalf("after the reply: Sequenced %d InHistory %d, want 5 and 1", st.Sequenced, st.InHistory)
	}
}

func TestWindowFullAndTooLarge(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Window = 2; c.MaxPayload = 100 })
	for range 2 {
		g.propose(1, "w")
		g.ready(1)
	}
	// With the window full, a third request collects messages, unsent,
	// until it is full: then Propose refuses.
	n := 0
	for ; n < 100; n++ {
		err := g.cores[1].Propose(g.now, []byte("0123456789"))
		if errors.Is(err, ErrWindowFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != 100/12 || !g.cores[1].Blocked() {
		t.Fatalf("the collecting request took %d messages of 10 bytes (blocked %v), want %d (100 bytes, 2 of length each)", n, g.cores[1].Blocked(), 100/12)
	}
	if rd := g.cores[1].Ready(); len(rd.Frames) != 0 {
		t.Fatalf("%d frames sent with the window full, want 0", len(rd.Frames))
	}
	g.cores[1].Advance()
	var tl *TooLargeError
	if err := g.cores[1].Propose(g.now, make([]byte, 101)); !errors.As(err, &tl) || tl.Size != 101 || tl.Max != 100 ||
		!strings.Contains(err.Error(), "101") || !strings.Contains(err.Error(), "100") {
		t.Fatalf("oversize message: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	g := newGroup(t, 2, nil)
	c := g.cores[0]
	build := func(h frame.Header, body frame.Body) frame.View {
		b, err := frame.Append(nil, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	req := &frame.Payload{T: frame.SeqRequest, Data: []byte("forged")}
	cases := []struct {
		name string
		src  [6]byte
		h    frame.Header
		body frame.Body
		want error
	}{
		{"other group", testMAC(1), frame.Header{Group: 9, Sender: 1, Incarnation: 5, Seq: 1}, req, ErrGroup},
		{"non-member", testMAC(1), frame.Header{Group: testGroup, Sender: 40, Incarnation: 5, Seq: 1}, req, ErrNotMember},
		{"wrong incarnation", testMAC(1), frame.Header{Group: testGroup, Sender: 1, Incarnation: 6, Seq: 1}, req, ErrIncarnation},
		{"wrong MAC", testMAC(7), frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, Seq: 1}, req, ErrSourceMAC},
		{"our own id", testMAC(7), frame.Header{Group: testGroup, Sender: 0, Incarnation: 5, Seq: 1}, req, ErrSourceMAC},
		{"PBP frame", testMAC(1), frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, Seq: 1}, &frame.Payload{T: frame.Data, Data: []byte("x")}, ErrFrameType},
		{"unknown origin", testMAC(1), frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, Seq: 1000},
			&frame.SeqDataBody{Epoch: 1, UID: frame.UID{Origin: 33, Incarnation: 5, Seq: 1}, Data: []byte("x")}, ErrBadOrigin},
	}
	for _, tc := range cases {
		err := c.Step(g.now, tc.src, frame.Broadcast, build(tc.h, tc.body))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	st := c.Counters()
	if st.Sequenced != 0 || st.WrongGroup != 1 || st.NotMember != 1 || st.WrongIncarnation != 1 || st.WrongMAC != 2 || st.UnhandledTypes != 1 || st.BadOrigin != 1 {
		t.Fatalf("counters %+v", st)
	}
}

func TestConfigErrors(t *testing.T) {
	base := func() Config { return testConfig(0, 3, Hybrid) }
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no members", func(c *Config) { c.Members = nil }, "Members is empty"},
		{"self missing", func(c *Config) { c.Self = 9 }, "Self (9) is not in Members"},
		{"duplicate id", func(c *Config) { c.Members[1].ID = 0 }, "both have id 0"},
		{"multicast MAC", func(c *Config) { c.Members[1].MAC[0] = 1 }, "want a unicast address"},
		{"window", func(c *Config) { c.Window = MaxWindow + 1 }, "Window is"},
		{"history not a power of two", func(c *Config) { c.History = 100 }, "History is 100"},
		{"method", func(c *Config) { c.Method = 9 }, "Method is"},
		{"threshold", func(c *Config) { c.Threshold = -1 }, "Threshold is -1"},
		{"mtu", func(c *Config) { c.MTU = 100 }, "MTU is 100"},
		{"max payload", func(c *Config) { c.MaxPayload = 5000 }, "MaxPayload is 5000"},
		{"unicast dst", func(c *Config) { c.Dst = testMAC(1) }, "unicast address"},
		{"negative timeout", func(c *Config) { c.NackTimeout = -1 }, "NackTimeout is -1"},
		{"failure timeout", func(c *Config) { c.FailureTimeout = DefaultHeartbeatInterval }, "must exceed twice HeartbeatInterval"},
		{"quorum", func(c *Config) { c.Quorum = 4 }, "Quorum is 4, want 1..3"},
	}
	for _, tc := range cases {
		cfg := base()
		tc.mod(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

// electionGroup: three members; the sequencer (0) delivered 1000..1002 to
// member 2 and only 1000 to member 1, then crashed.
func electionGroup(t *testing.T) *group {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	var data []out
	for i := range 3 {
		g.propose(0, fmt.Sprint("m", i))
		data = append(data, g.ready(0)...)
	}
	g.to(1, data[0])
	for _, d := range data {
		g.to(2, d)
	}
	g.ready(1)
	g.ready(2)
	g.cores = g.cores[:3]
	return g
}

func TestElectionAgreesOnTheLastGlobal(t *testing.T) {
	g := electionGroup(t)
	crashed := func(from, to int, o out) bool { return from == 0 || to == 0 }
	// Member 0 never votes: it is excluded once silent for FailureTimeout
	// counted from the election's start.
	g.run(t0.Add(2*DefaultFailureTimeout+DefaultElectionRetry), crashed)
	// Member 1 is the lowest live id: it collected member 2's vote
	// (last 1002), fetched 1001..1002 from member 2 and took over.
	epoch := g.cores[1].Counters().Epoch
	if !g.cores[1].IsSequencer() || epoch < 2 {
		t.Fatalf("member 1: %+v", g.cores[1].Counters())
	}
	for _, i := range []int{1, 2} {
		if got := g.delivered(i); got != "1000:0/1=m0 1001:0/2=m1 1002:0/3=m2" {
			t.Fatalf("member %d delivered %q", i, got)
		}
		var changed *Event
		for k := range g.evs[i] {
			if g.evs[i][k].Kind == SequencerChanged {
				changed = &g.evs[i][k]
			}
		}
		if changed == nil || changed.Member != 1 || changed.Epoch != epoch || changed.Last != 1002 {
			t.Fatalf("member %d events %v", i, g.evs[i])
		}
	}
	// The new sequencer removes member 0 in the stream (global 1003):
	// both report it there, once.
	for _, i := range []int{1, 2} {
		var failed []string
		for _, e := range g.evs[i] {
			if e.Kind == MemberFailed {
				failed = append(failed, fmt.Sprintf("%d@%d:%s", e.Member, e.Last, e.Reason))
			}
		}
		if fmt.Sprint(failed) != "[0@1002:the sequencer before, replaced]" {
			t.Fatalf("member %d: MemberFailed %v", i, failed)
		}
		if ms := g.cores[i].MemberStates(); ms[0].Live {
			t.Fatalf("member %d still shows member 0 live: %+v", i, ms)
		}
	}
	// The new epoch numbers from 1004, its messages in the same order at
	// both.
	g.propose(2, "after")
	g.propose(1, "new")
	g.pump(crashed)
	if g.delivered(1) != g.delivered(2) || !strings.HasSuffix(g.delivered(1), "1005:2/1=after") {
		t.Fatalf("after the election: member 1 %q, member 2 %q", g.delivered(1), g.delivered(2))
	}
}

func TestElectionResubmitsUnsequencedRequests(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	g.propose(2, "never reached the sequencer")
	g.ready(2) // lost, and then the sequencer crashes
	crashed := func(from, to int, o out) bool { return from == 0 || to == 0 }
	g.run(t0.Add(2*DefaultFailureTimeout+DefaultElectionRetry), crashed)
	for _, i := range []int{1, 2} {
		if got := g.delivered(i); got != "1001:2/1=never reached the sequencer" { // 1000: member 0's removal
			t.Fatalf("member %d delivered %q", i, got)
		}
	}
}

func TestLeftOutOfTheElectionHalts(t *testing.T) {
	g := newGroup(t, 3, nil)
	// Member 1 announces itself sequencer of epoch 2; member 2 never voted.
	h := frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, AckBase: 1, Acks: []uint32{1000}}
	b, _ := frame.Append(nil, &h, &frame.ElectionBody{Epoch: 2, Phase: frame.ElectionElected, Candidate: 1, LastGlobal: 999})
	v, _ := frame.Parse(b)
	if err := g.cores[2].Step(g.now, testMAC(1), frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
	g.ready(2)
	if !g.cores[2].Halted() || len(g.evs[2]) != 1 || g.evs[2][0].Kind != SelfRemoved || !strings.Contains(g.evs[2][0].Reason, "left out") {
		t.Fatalf("events %v", g.evs[2])
	}
	if err := g.cores[2].Propose(g.now, []byte("x")); !errors.Is(err, ErrHalted) {
		t.Fatalf("Propose after halting: %v", err)
	}
	if err := g.cores[2].Step(g.now, testMAC(1), frame.Broadcast, v); !errors.Is(err, ErrHalted) {
		t.Fatalf("Step after halting: %v", err)
	}
}

func TestSequencerRemovesSilentMember(t *testing.T) {
	g := newGroup(t, 3, nil)
	alive := func(from, to int, o out) bool { return from == 2 || to == 2 }
	for k := Time(1); k <= 25; k++ {
		g.advance(t0.Add(Duration(k) * DefaultHeartbeatInterval))
		g.pump(alive)
	}
	var removed []frame.MemberID
	for _, e := range g.evs[0] {
		if e.Kind == MemberFailed {
			removed = append(removed, e.Member)
		}
	}
	if fmt.Sprint(removed) != "[2]" || g.cores[1].Counters().Electing {
		t.Fatalf("removed %v, want [2]; member 1 %+v", removed, g.cores[1].Counters())
	}
	// The follower learns it from the stream, at the same place.
	if k := kinds(g.evs[1]); k != "failed" || g.evs[1][0] != (Event{Kind: MemberFailed, Member: 2, Epoch: 1, Last: 999, At: g.evs[1][0].At, Reason: "silent past the failure timeout"}) ||
		g.evs[0][0].Last != 999 || g.evs[0][0].Reason != g.evs[1][0].Reason {
		t.Fatalf("member 1 events %v, sequencer %v", g.evs[1], g.evs[0])
	}
	if ms := g.cores[1].MemberStates(); ms[2].Live || !ms[0].Live || g.cores[1].Counters().MembersFailed != 1 {
		t.Fatalf("member 1's view: %+v, %+v", ms, g.cores[1].Counters())
	}
	ms := g.cores[0].MemberStates()
	if len(ms) != 3 || !ms[0].Self || !ms[0].Sequencer || !ms[1].Live || ms[2].Live {
		t.Fatalf("the sequencer's member view: %+v", ms)
	}
}

func TestZeroAllocsSteadyState(t *testing.T) {
	// A small history and window, so that warming up touches every ring
	// slot: buffers are allocated on first use, then reused.
	g := newGroup(t, 3, func(c *Config) { c.History = 64; c.Window = 8 })
	msg := make([]byte, 100)
	round := func() {
		g.cores[1].Propose(g.now, msg)
		g.cores[2].Propose(g.now, msg)
		for i, c := range g.cores {
			rd := c.Ready()
			frames := rd.Frames
			for _, f := range frames {
				eth, body, _ := frame.SplitEthernet(f, frame.EtherType)
				v, _ := frame.Parse(body)
				for j, d := range g.cores {
					if j != i && (eth.Dst() == frame.Broadcast || eth.Dst() == testMAC(frame.MemberID(j))) {
						d.Step(g.now, eth.Src(), frame.Broadcast, v)
					}
				}
			}
			c.Advance()
		}
	}
	for range 200 {
		round() // warm up: buffers, rings
	}
	if n := testing.AllocsPerRun(500, round); n != 0 {
		t.Fatalf("%v allocations per round, want 0", n)
	}
}

func TestMinorityCannotElect(t *testing.T) {
	g := newGroup(t, 3, nil) // quorum: a majority, 2
	cut := func(from, to int, o out) bool { return (from == 2) != (to == 2) }
	g.run(t0.Add(4*DefaultFailureTimeout), cut)
	st := g.cores[2].Counters()
	if !st.Electing || st.IsSequencer || st.Halted {
		t.Fatalf("the cut-off member: %+v, want still electing", st)
	}
	if !g.cores[0].IsSequencer() || g.cores[1].Counters().Electing {
		t.Fatalf("the majority side changed: %+v / %+v", g.cores[0].Counters(), g.cores[1].Counters())
	}
	// With Quorum 1 (crash-stop trust) it elects itself.
	g = newGroup(t, 3, func(c *Config) { c.Quorum = 1 })
	g.run(t0.Add(3*DefaultFailureTimeout), cut)
	if !g.cores[2].IsSequencer() {
		t.Fatalf("with Quorum 1: %+v", g.cores[2].Counters())
	}
}

func TestReplacedSequencerHalts(t *testing.T) {
	g := newGroup(t, 3, nil)
	h := frame.Header{Group: testGroup, Sender: 1, Incarnation: 5, AckBase: 1, Acks: []uint32{1000}}
	b, _ := frame.Append(nil, &h, &frame.StatusBody{T: frame.SeqStatusRequest, Epoch: 2, Delivered: 1004})
	v, _ := frame.Parse(b)
	if err := g.cores[0].Step(g.now, testMAC(1), frame.Broadcast, v); err != nil {
		t.Fatal(err)
	}
	g.ready(0)
	if !g.cores[0].Halted() || len(g.evs[0]) != 1 || g.evs[0][0].Kind != SelfRemoved {
		t.Fatalf("sequencer events %v", g.evs[0])
	}
}

// TestRandomFramesNeverPanic steps well-formed frames with random fields
// of every sequencer type, from members and strangers, into cores in every
// role (sequencer, follower, electing), with time moving. Nothing may
// panic, and every refusal must be one of the package's errors.
func TestRandomFramesNeverPanic(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	u32 := func() uint32 {
		switch r.IntN(4) {
		case 0:
			return 1000 + uint32(r.IntN(40))
		case 1:
			return uint32(r.IntN(5))
		case 2:
			return ^uint32(0) - uint32(r.IntN(5))
		}
		return r.Uint32()
	}
	uid := func() frame.UID {
		return frame.UID{Origin: frame.MemberID(r.IntN(5)), Incarnation: 5 - uint32(r.IntN(2)), Seq: u32()}
	}
	known := []error{ErrHalted, ErrNotMember, ErrIncarnation, ErrSourceMAC, ErrGroup, ErrRemoved, ErrFrameType, ErrBadOrigin}
	for round := range 30 {
		g := newGroup(t, 4, func(c *Config) { c.History = 16; c.Window = 4; c.Method = Method(round % 3) })
		for step := range 3000 {
			sender := frame.MemberID(r.IntN(5))
			var body frame.Body
			switch r.IntN(8) {
			case 0:
				body = &frame.Payload{T: frame.SeqRequest, Data: make([]byte, r.IntN(700))}
			case 1:
				body = &frame.SeqDataBody{Epoch: u32() % 4, UID: uid(), Data: make([]byte, r.IntN(50))}
			case 2:
				es := make([]frame.AcceptEntry, 1+r.IntN(4))
				for i := range es {
					es[i] = frame.AcceptEntry{Global: u32(), UID: uid()}
				}
				body = &frame.SeqAcceptBody{Epoch: u32() % 4, Entries: es}
			case 3:
				body = &frame.StatusBody{T: frame.SeqStatusRequest, Epoch: u32() % 4, Delivered: u32()}
			case 4:
				body = &frame.StatusBody{T: frame.SeqStatusReply, Epoch: u32() % 4, Delivered: u32()}
			case 5:
				a, b := u32(), u32()
				if frame.SeqLess(b, a) {
					a, b = b, a
				}
				body = &frame.RetransmitBody{Epoch: u32() % 4, Ranges: []frame.Range{{First: a, Last: b}}}
			case 6:
				body = &frame.ElectionBody{Epoch: u32() % 5, Phase: frame.ElectionPhase(1 + r.IntN(3)), Candidate: frame.MemberID(r.IntN(5)), LastGlobal: u32()}
			default:
				body = &frame.Bundle{T: frame.SeqRequest, Msgs: [][]byte{[]byte("a"), nil}}
			}
			h := frame.Header{Group: testGroup, Sender: sender, Incarnation: 5, Seq: u32(), AckBase: 0, Acks: []uint32{u32()}}
			b, err := frame.Append(nil, &h, body)
			if err != nil {
				t.Fatal(err)
			}
			v, err := frame.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			to := r.IntN(4)
			err = g.cores[to].Step(g.now, testMAC(sender), frame.Broadcast, v)
			if err != nil && !slices.ContainsFunc(known, func(k error) bool { return errors.Is(err, k) }) {
				t.Fatalf("round %d step %d: unexpected error %v", round, step, err)
			}
			if r.IntN(10) == 0 {
				g.cores[r.IntN(4)].Propose(g.now, make([]byte, r.IntN(100)))
			}
			if r.IntN(50) == 0 {
				g.advance(g.now.Add(Duration(r.IntN(int(DefaultFailureTimeout)))))
			}
			for i := range g.cores {
				g.ready(i)
			}
		}
	}
}

func TestFalseSuspicionReturnsToTheSequencer(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Method = Method1 })
	cutUntil := t0.Add(DefaultFailureTimeout + 100*Millisecond)
	// Member 2 hears nothing from the sequencer; the sequencer still hears
	// it (so it is not removed).
	cut := func(from, to int, o out) bool { return g.now < cutUntil && from == 0 && to == 2 }
	g.propose(0, "missed by 2")
	g.pump(cut)
	g.run(cutUntil.Add(-10*Millisecond), cut)
	if st := g.cores[2].Counters(); !st.Electing {
		t.Fatalf("member 2 cut off from the sequencer for the failure timeout: %+v, want electing", st)
	}
	g.run(cutUntil.Add(DefaultHeartbeatInterval), cut)
	st := g.cores[2].Counters()
	if st.Electing || st.Halted || st.Epoch != 1 || g.delivered(2) != "1000:0/1=missed by 2" {
		t.Fatalf("after the cut: %+v, delivered %q", st, g.delivered(2))
	}
	if !g.cores[0].IsSequencer() || g.cores[1].Counters().Electing {
		t.Fatalf("the others moved: %+v / %+v", g.cores[0].Counters(), g.cores[1].Counters())
	}
}

// SafeMajority: a message is delivered — at its sender too — only once
// ⌈n/2⌉ members hold it. The docs' counter-example: 5 members, only the
// sender receives the sequencer's broadcast; it must not be told (its
// message may die with it and the sequencer). Once a third member holds
// it, everyone delivers at once: the members acknowledge what they
// received and the sequencer announces the safe point without waiting
// for a heartbeat (no virtual time passes).
func TestSafeMajority(t *testing.T) {
	g := newGroup(t, 5, func(c *Config) { c.Resilience = SafeMajority; c.Method = Method1 })
	lose := func(from, to int, o out) bool { return from == 0 && to != 2 && o.v.Type() == frame.SeqData }
	g.propose(2, "m")
	g.pump(lose)
	for i := range 5 {
		if got := g.delivered(i); got != "" {
			t.Fatalf("member %d delivered %q with only the sequencer and the sender holding it", i, got)
		}
	}
	if st := g.cores[0].Counters(); st.Sequenced != 1 || st.Safe != 1000 {
		t.Fatalf("sequencer: sequenced %d, safe %d; want 1 and 1000", st.Sequenced, st.Safe)
	}
	// Member 3 gets it (a retransmission, as after a gap): 3 of 5 hold it.
	lose2 := func(from, to int, o out) bool {
		return from == 0 && (to == 1 || to == 4) && o.v.Type() == frame.SeqData
	}
	g.cores[0].sendData(&g.cores[0].log[1000&g.cores[0].lmask], testMAC(3), frame.FlagRetransmit)
	g.pump(lose2)
	for _, i := range []int{0, 2, 3} {
		if got := g.delivered(i); got != "1000:2/1=m" {
			t.Fatalf("member %d delivered %q once 3 of 5 hold it", i, got)
		}
	}
	if st := g.cores[2].Counters(); st.Outstanding != 0 || st.Safe != 1001 {
		t.Fatalf("sender: outstanding %d, safe %d", st.Outstanding, st.Safe)
	}
	// Members 1 and 4 learn of the gap from the announcement and fetch it.
	g.run(g.now.Add(10*Millisecond), nil)
	for _, i := range []int{1, 4} {
		if got := g.delivered(i); got != "1000:2/1=m" {
			t.Fatalf("member %d delivered %q", i, got)
		}
	}
}

// With two members, SafeMajority is SafeSequencer: the sequencer alone
// is ⌈2/2⌉ holders, and nothing waits for an acknowledgement.
func TestSafeMajorityTwoMembers(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.Resilience = SafeMajority; c.Method = Method1 })
	g.propose(1, "x")
	g.pump(nil)
	for i := range 2 {
		if got := g.delivered(i); got != "1000:1/1=x" {
			t.Fatalf("member %d delivered %q", i, got)
		}
	}
	if st := g.cores[0].Counters(); st.StatusRequests != 0 {
		t.Fatalf("the sequencer sent %d status requests (announcements) in a 2-member group", st.StatusRequests)
	}
}
