package kv

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// thesisTrio is three thesis nodes whose writes a test moves by hand.
type thesisTrio struct {
	t     *testing.T
	nodes []*ThesisNode
	logs  [][]string
	t0    time.Time
}

func newThesisTrio(t *testing.T) *thesisTrio {
	tr := &thesisTrio{t: t, logs: make([][]string, 3), t0: time.Unix(1000, 0)}
	for i := range 3 {
		n, err := NewThesisNode(ThesisConfig{Replicas: 3, Self: i, Tr: 10 * time.Millisecond, Eps: time.Millisecond, Slots: 4, SlotSize: 96,
			OnApply: func(q Request, res []byte, fresh bool) {
				r, _ := ParseResult(res)
				tr.logs[i] = append(tr.logs[i], q.String()+" "+r.String()+map[bool]string{true: "", false: " (retry)"}[fresh])
			}})
		if err != nil {
			t.Fatal(err)
		}
		tr.nodes = append(tr.nodes, n)
	}
	return tr
}

func (tr *thesisTrio) at(ms int) time.Time { return tr.t0.Add(time.Duration(ms) * time.Millisecond) }

// move delivers node from's writes to the nodes in to at time ms.
func (tr *thesisTrio) move(ms, from int, to ...int) {
	for _, w := range tr.nodes[from].Writes() {
		for _, j := range to {
			if err := tr.nodes[j].Remote(tr.at(ms), from, w.Loc, w.Data); err != nil {
				tr.t.Fatal(err)
			}
		}
	}
}

// all moves every node's writes to the other two at time ms.
func (tr *thesisTrio) all(ms int) {
	tr.move(ms, 0, 1, 2)
	tr.move(ms, 1, 0, 2)
	tr.move(ms, 2, 0, 1)
}

func (tr *thesisTrio) tick(ms int) {
	for _, n := range tr.nodes {
		n.Tick(tr.at(ms))
	}
}

func open(t *testing.T, n *ThesisNode, now time.Time, nonce uint64) *[]byte {
	var got []byte
	n.Request(now, AppendRequest(nil, Request{Open: true, Seq: nonce}), func(b []byte) { got = b })
	return &got
}

// A request reaches every replica through the lists and is executed by
// each once Δ (t_c + 2(t_r + ε) = 22 ms for three replicas) has passed,
// in timestamp order; a retry stamped again at another replica is
// answered with the first result and not executed again.
func TestThesisOrder(t *testing.T) {
	tr := newThesisTrio(t)
	if d := tr.nodes[0].Config().Delta(); d != 22*time.Millisecond {
		t.Fatalf("Δ = %v, want 22ms (t_c 0 + 2·(10ms + 1ms))", d)
	}
	// Session opens at r1 (t=1) and r0 (t=2): ordered by timestamp.
	a := open(t, tr.nodes[1], tr.at(1), 7)
	b := open(t, tr.nodes[0], tr.at(2), 8)
	tr.move(3, 0, 1, 2)
	tr.move(3, 1, 0, 2)
	tr.move(4, 2, 0, 1) // r2's copies (hop 1)
	tr.tick(23)         // Δ after t=1 has not passed: executed when more than Δ old
	if len(tr.logs[0]) != 0 || *a != nil {
		t.Fatalf("executed before Δ: %v", tr.logs[0])
	}
	tr.tick(25)
	for i, l := range tr.logs {
		if strings.Join(l, "|") != `open#7 ok "\x00\x00\x00\x00\x00\x00\x00\x01"|open#8 ok "\x00\x00\x00\x00\x00\x00\x00\x02"` {
			t.Fatalf("replica %d executed %q", i, l)
		}
	}
	if p, _ := ParseReply(*a); binary.BigEndian.Uint64(p.Result.Value) != 1 || *b == nil {
		t.Fatalf("answers %q, %q", *a, *b)
	}
	// A put of session 1 at r0, its answer lost; the retry at r2.
	put := AppendRequest(nil, Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}})
	var first, retry []byte
	tr.nodes[0].Request(tr.at(30), put, func(b []byte) { first = b })
	tr.move(31, 0, 1, 2)
	tr.nodes[2].Request(tr.at(35), put, func(b []byte) { retry = b })
	tr.all(36)
	tr.all(37)
	tr.tick(60)
	for i, l := range tr.logs {
		if got := strings.Join(l[2:], "|"); got != `c1#1 put("k", "v") ok|c1#1 put("k", "v") ok (retry)` {
			t.Fatalf("replica %d executed %q", i, got)
		}
	}
	if first == nil || retry == nil {
		t.Fatalf("answers %q, %q", first, retry)
	}
	if tr.nodes[0].Replica().Applied != 1 {
		t.Fatalf("applied %d, want 1", tr.nodes[0].Replica().Applied)
	}
}

// A copy seen after its adoption deadline (t_c + (hop+1)·(t_r + ε) after
// its timestamp) is refused, and one written at hop F+1 too: no replica
// that stays up could have adopted it in time.
func TestThesisLateCopy(t *testing.T) {
	tr := newThesisTrio(t)
	open(t, tr.nodes[0], tr.at(0), 1)
	w := tr.nodes[0].Writes()
	// Hop 0: valid until 0 + 10 + 1 = 11 ms.
	if err := tr.nodes[1].Remote(tr.at(12), 0, w[0].Loc, w[0].Data); err != nil {
		t.Fatal(err)
	}
	if tr.nodes[1].Refused != 1 || tr.nodes[1].Pending() != 0 {
		t.Fatalf("a copy 12 ms old at hop 0: refused %d, pending %d; want refused", tr.nodes[1].Refused, tr.nodes[1].Pending())
	}
	if err := tr.nodes[2].Remote(tr.at(11), 0, w[0].Loc, w[0].Data); err != nil {
		t.Fatal(err)
	}
	if tr.nodes[2].Pending() != 1 {
		t.Fatalf("a copy 11 ms old at hop 0 not adopted")
	}
	// r2's copy is at hop 1: valid at r1 until 22 ms.
	c := tr.nodes[2].Writes()
	if err := tr.nodes[1].Remote(tr.at(22), 2, c[0].Loc, c[0].Data); err != nil {
		t.Fatal(err)
	}
	if tr.nodes[1].Pending() != 1 {
		t.Fatalf("a hop-1 copy 22 ms old not adopted")
	}
	// r1's copy is at hop 2 = F+1: nobody takes it.
	c = tr.nodes[1].Writes()
	if c[0].Data[1] != 2 {
		t.Fatalf("r1's copy at hop %d, want 2", c[0].Data[1])
	}
	n, _ := NewThesisNode(ThesisConfig{Replicas: 3, Self: 0, Tr: 10 * time.Millisecond, Slots: 4, SlotSize: 96})
	if err := n.Remote(tr.at(1), 1, c[0].Loc, c[0].Data); err != nil {
		t.Fatal(err)
	}
	if n.Refused != 1 {
		t.Fatalf("a hop-2 copy adopted")
	}
}

// Q and D are freed once every live replica's D holds the request, and
// a full Q answers unavailable.
func TestThesisCleanAndFull(t *testing.T) {
	tr := newThesisTrio(t)
	for i := range 4 {
		open(t, tr.nodes[0], tr.at(0), uint64(i+1))
	}
	if got := open(t, tr.nodes[0], tr.at(0), 9); *got == nil {
		t.Fatal("no answer with a full Q")
	} else if p, _ := ParseReply(*got); p.Result.Status != StatusUnavailable {
		t.Fatalf("a full Q answered %v, want unavailable", p.Result)
	}
	for ms := 1; ms < 100; ms++ {
		tr.all(ms)
		tr.tick(ms)
	}
	for i, n := range tr.nodes {
		if len(tr.logs[i]) != 4 {
			t.Fatalf("replica %d executed %d, want 4", i, len(tr.logs[i]))
		}
		for s, e := range n.q {
			if e != nil {
				t.Fatalf("replica %d's Q slot %d still holds %v", i, s, e.id)
			}
		}
		for s, e := range n.d {
			if e != nil {
				t.Fatalf("replica %d's D slot %d still holds %v", i, s, *e)
			}
		}
	}
}

func TestThesisErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  ThesisConfig
		want string
	}{
		{ThesisConfig{Replicas: 3, Self: 3, Tr: time.Millisecond}, "replica 3 of 3"},
		{ThesisConfig{Replicas: 3, Tr: 0}, "want t_r > 0"},
		{ThesisConfig{Replicas: 3, Tr: time.Millisecond, SlotSize: 20}, "slot size 20, want at least 31"},
	} {
		if _, err := NewThesisNode(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	n, _ := NewThesisNode(ThesisConfig{Replicas: 3, Tr: time.Millisecond, SlotSize: 40})
	var got []byte
	n.Request(time.Unix(1, 0), AppendRequest(nil, Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "key", Value: []byte("a long value")}}), func(b []byte) { got = b })
	if p, _ := ParseReply(got); p.Result.Status != StatusBadRequest || !strings.Contains(string(p.Result.Value), "request of 45 bytes: thesis mode's entries hold 26") {
		t.Errorf("a long request: %v", p.Result)
	}
	bad := make([]byte, 40)
	bad[0] = 9
	if err := n.Remote(time.Unix(1, 0), 1, 3, bad); err == nil || err.Error() != "kv: thesis mode: replica 1's location 3: kind 9 at offset 0, want 0..3" {
		t.Errorf("a bad kind: %v", err)
	}
	bad[0], bad[13] = slotQ, 200
	if err := n.Remote(time.Unix(1, 0), 1, 3, bad); err == nil || !strings.Contains(err.Error(), "length 200 at offset 12 runs past the location's 40 bytes") {
		t.Errorf("a bad length: %v", err)
	}
	if err := n.Remote(time.Unix(1, 0), 0, 3, bad); err == nil || !strings.Contains(err.Error(), "an update from replica 0") {
		t.Errorf("an update from itself: %v", err)
	}
	if err := n.Remote(time.Unix(1, 0), 1, 3, make([]byte, 41)); err == nil || err.Error() != "kv: thesis mode: replica 1's location 3: 41 bytes, want the slot size 40" {
		t.Errorf("a location of another size: %v", err)
	}
	if err := n.Remote(time.Unix(1, 0), 1, 193, make([]byte, 40)); err == nil || err.Error() != "kv: thesis mode: replica 1's location 193: no such location: want 0..192" {
		t.Errorf("a location out of range: %v", err)
	}
}

// A replica whose every update is refused (other slots) is logged once
// in full, then a line per interval counting the rest, per replica; what
// was counted after a replica's last line is logged an interval after it
// (at the serving loop's tick) or when the server ends, even if that
// replica sends nothing more.
func TestMalformedLogged(t *testing.T) {
	var buf bytes.Buffer
	m := malformedLog{log: slog.New(slog.NewTextHandler(&buf, nil)), every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	bad := errSlot{2, 7, "300 bytes, want the slot size 256"}
	for i := range 1000 { // 1000 refusals from replica 2 in 12.5 s
		m.note(t0.Add(time.Duration(i)*12500*time.Microsecond), 2, bad)
	}
	m.note(t0, 1, errSlot{1, 3, "kind 9 at offset 0, want 0..3"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (replica 2's first and one count, replica 1's first):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{
		"replica=2 err=\"kv: thesis mode: replica 2's location 7: 300 bytes, want the slot size 256\"",
		"malformed entries\" replica=2 count=800 last=",
		"replica=1 err=\"kv: thesis mode: replica 1's location 3: kind 9",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %s\nwant it to contain %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "further ones from this replica are counted, a line every 10s") {
		t.Errorf("first line does not say what follows: %s", lines[0])
	}

	// Replica 2's last 199 (10.0125 s to 12.4875 s) wait for an interval
	// after its line at 10 s; replica 3's second waits for the end.
	m.note(t0.Add(19*time.Second), 3, errSlot{3, 1, "kind 8 at offset 0, want 0..3"})
	m.note(t0.Add(19500*time.Millisecond), 3, errSlot{3, 4, "kind 8 at offset 0, want 0..3"})
	buf.Reset()
	m.tick(t0.Add(19999 * time.Millisecond))
	if buf.Len() != 0 {
		t.Errorf("a tick before the interval logged:\n%s", buf.String())
	}
	m.tick(t0.Add(20 * time.Second))
	m.flush(t0.Add(21 * time.Second))
	m.flush(t0.Add(22 * time.Second))
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines after the ticks and the end, want 2 (replica 2's count at the tick, replica 3's at the end):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{
		"malformed entries\" replica=2 count=199 last=\"kv: thesis mode: replica 2's location 7",
		"malformed entries\" replica=3 count=1 last=\"kv: thesis mode: replica 3's location 4",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %s\nwant it to contain %s", i, lines[i], want)
		}
	}
}
