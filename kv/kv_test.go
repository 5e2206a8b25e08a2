package kv

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

func TestStoreOps(t *testing.T) {
	s := NewStore()
	steps := []struct {
		op   Op
		want string
	}{
		{Op{Kind: OpGet, Key: "a"}, "not found"},
		{Op{Kind: OpCAS, Key: "a", Expect: nil, Value: []byte("1")}, "not found"},
		{Op{Kind: OpPut, Key: "a", Value: []byte("1")}, "ok"},
		{Op{Kind: OpGet, Key: "a"}, `ok "1"`},
		{Op{Kind: OpCAS, Key: "a", Expect: []byte("0"), Value: []byte("2")}, `mismatch "1"`},
		{Op{Kind: OpCAS, Key: "a", Expect: []byte("1"), Value: []byte("2")}, "ok"},
		{Op{Kind: OpGet, Key: "a"}, `ok "2"`},
		{Op{Kind: OpDelete, Key: "a"}, "ok"},
		{Op{Kind: OpDelete, Key: "a"}, "not found"},
	}
	for i, st := range steps {
		res, err := ParseResult(s.Apply(AppendOp(nil, st.op)))
		if err != nil {
			t.Fatal(err)
		}
		if res.String() != st.want {
			t.Errorf("step %d %v = %v, want %s", i, st.op, res, st.want)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	q := Request{Client: 7, Seq: 9, Local: true, Op: Op{Kind: OpCAS, Key: "k", Value: []byte("v"), Expect: []byte("e")}}
	got, err := ParseRequest(AppendRequest(nil, q))
	if err != nil || got.String() != q.String() || !got.Local || !bytes.Equal(got.Op.Expect, q.Op.Expect) {
		t.Fatalf("request round trip = %v, %v; want %v", got, err, q)
	}
	open := Request{Open: true, Seq: 5}
	if b := AppendRequest(nil, open); len(b) != 17 {
		t.Fatalf("an open request is %d bytes, want 17 (no op)", len(b))
	} else if got, err := ParseRequest(b); err != nil || !got.Open || got.Seq != 5 || got.String() != "open#5" {
		t.Fatalf("open round trip = %v, %v", got, err)
	}
	p := Reply{Client: 7, Seq: 9, Result: Result{Status: StatusMismatch, Value: []byte("x")}}
	gp, err := ParseReply(AppendReply(nil, p))
	if err != nil || gp.Client != 7 || gp.Seq != 9 || gp.Result.String() != p.Result.String() {
		t.Fatalf("reply round trip = %+v, %v", gp, err)
	}
}

func TestCodecErrors(t *testing.T) {
	good := AppendRequest(nil, Request{Client: 1, Seq: 2, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}})
	bad := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		b    []byte
		want string
	}{
		{good[:5], "malformed request: field client at offset 0: 5 bytes left, want 8"},
		{bad(func(b []byte) []byte { b[16] = 4; return b }), "field flags at offset 16: unknown flags 0x4"},
		{bad(func(b []byte) []byte { b[17] = 9; return b }), "field op at offset 17: kind 9, want 1..4"},
		{bad(func(b []byte) []byte { b[21] = 200; return b }), "field key at offset 22: 10 bytes left, want 200"},
		{append(bytes.Clone(good), 0), "field end at offset 32: 1 trailing bytes"},
		{bad(func(b []byte) []byte { b[15] = 0; return b }), "field seq at offset 8: 0, want 1 or more"},
		{bad(func(b []byte) []byte { b[16] = 3; return b }), "field flags at offset 16: a local read cannot open a session"},
		{bad(func(b []byte) []byte { b[16] = 2; return b[:17] }), "field client at offset 0: 1 in a request that opens a session, want 0"},
	}
	for _, c := range cases {
		_, err := ParseRequest(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRequest(%x) = %v, want an error containing %q", c.b, err, c.want)
		}
	}
	if err := NewStore().Restore([]byte{0, 0, 0, 1, 0}); err == nil || !strings.Contains(err.Error(), "store snapshot: field key 0 length") {
		t.Errorf("Restore of a truncated snapshot = %v", err)
	}
}

// A snapshot that holds a key, or a session, twice is damaged: Restore
// refuses it, naming the key and both entries, and changes nothing.
func TestRestoreRefusesDuplicates(t *testing.T) {
	long := strings.Repeat("k", 100)
	storeSnap := func(keys ...string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(keys)))
		for _, k := range keys {
			b = appendBytes(appendBytes(b, []byte(k)), []byte("v"))
		}
		return b
	}
	cases := []struct {
		snap []byte
		want string
	}{
		{storeSnap("a", "b", "a"), `field key 2 at offset 24: key "a" again, first in entry 0`},
		{storeSnap(long, long), `field key 1 at offset 113: key "` + long[:64] + `"… (100 bytes) again, first in entry 0`},
	}
	for _, c := range cases {
		s := NewStore()
		s.Do(Op{Kind: OpPut, Key: "x", Value: []byte("1")})
		before := s.Snapshot()
		if err := s.Restore(c.snap); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Store.Restore(% x) = %v, want an error containing %q", c.snap, err, c.want)
		}
		if after := s.Snapshot(); !bytes.Equal(after, before) {
			t.Errorf("a refused snapshot changed the store: % x → % x", before, after)
		}
	}

	r := NewReplica(NewStore(), 4)
	r.Open()
	r.Open()
	snap := r.Snapshot()
	binary.BigEndian.PutUint64(snap[32+28:], 1) // the second session's id: 2 → 1
	before := r.Snapshot()
	if err := r.Restore(snap); err == nil || !strings.Contains(err.Error(), "field session 1 id at offset 60: session 1 again, first in entry 0") {
		t.Errorf("Replica.Restore with a session twice = %v", err)
	}
	if after := r.Snapshot(); !bytes.Equal(after, before) {
		t.Errorf("a refused snapshot changed the replica: % x → % x", before, after)
	}
}

// A retry is answered with the first result and applied once; an older
// request is stale; a session never opened is refused; the session table
// travels in the snapshot.
func TestReplicaSessions(t *testing.T) {
	r := NewReplica(NewStore(), 0)
	put := AppendOp(nil, Op{Kind: OpPut, Key: "a", Value: []byte("1")})
	get := AppendOp(nil, Op{Kind: OpGet, Key: "a"})
	c1, c2 := r.Open(), r.Open()
	if c1 != 1 || c2 != 2 {
		t.Fatalf("sessions opened %d, %d; want their places 1, 2", c1, c2)
	}
	if _, fresh := r.Execute(c1, 1, get); !fresh {
		t.Fatal("first request not fresh")
	}
	first, _ := r.Execute(c1, 1, get)
	r.Execute(c2, 1, put)
	again, fresh := r.Execute(c1, 1, get)
	if fresh || !bytes.Equal(again, first) {
		t.Fatalf("retry: fresh %v result %x, want the first result %x", fresh, again, first)
	}
	r.Execute(c1, 2, get)
	if res, _ := r.Execute(c1, 1, get); !strings.Contains(mustResult(t, res).String(), "stale") {
		t.Fatalf("an older request = %v, want stale", mustResult(t, res))
	}
	if res, fresh := r.Execute(99, 1, put); fresh || mustResult(t, res).String() != `session expired "session 99 expired or was never opened"` {
		t.Fatalf("a request of a session never opened: fresh %v %v", fresh, mustResult(t, res))
	}
	if r.Applied != 3 || r.Ordered != 9 {
		t.Fatalf("Applied %d Ordered %d, want 3 and 9", r.Applied, r.Ordered)
	}
	c := NewReplica(NewStore(), 0)
	if err := c.Restore(r.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.Snapshot(), r.Snapshot()) {
		t.Fatal("snapshot round trip differs")
	}
	if res, fresh := c.Execute(c2, 1, put); fresh || mustResult(t, res).Status != StatusOK {
		t.Fatalf("a retry after restore: fresh %v %v", fresh, mustResult(t, res))
	}
}

// The table holds MaxSessions sessions; opening one more expires the
// least recently used (by its last request's place), whose requests are
// then refused and not executed, retries included. A restored replica
// keeps the order and the size, so it expires the same sessions next.
func TestReplicaSessionExpiry(t *testing.T) {
	r := NewReplica(NewStore(), 2)
	put := func(v string) []byte { return AppendOp(nil, Op{Kind: OpPut, Key: "a", Value: []byte(v)}) }
	a, b := r.Open(), r.Open()
	r.Execute(b, 1, put("b1"))
	r.Execute(a, 1, put("a1")) // a is now the most recently used
	twin := NewReplica(NewStore(), 0)
	if err := twin.Restore(r.Snapshot()); err != nil || twin.MaxSessions() != 2 {
		t.Fatalf("restore: %v, max sessions %d; want 2", err, twin.MaxSessions())
	}
	for _, rep := range []*Replica{r, twin} {
		c := rep.Open()
		if rep.Sessions() != 2 || rep.Expired != 1 {
			t.Fatalf("after a third open: %d sessions, %d expired; want 2 and 1", rep.Sessions(), rep.Expired)
		}
		applied := rep.Applied
		for _, seq := range []uint64{1, 2} { // b's retry, and its next request
			res, fresh := rep.Execute(b, seq, put("b2"))
			if fresh || mustResult(t, res).Status != StatusExpired {
				t.Fatalf("session b after it expired, request %d: fresh %v %v", seq, fresh, mustResult(t, res))
			}
		}
		if res, fresh := rep.Execute(a, 1, put("a1")); fresh || mustResult(t, res).Status != StatusOK {
			t.Fatalf("a's retry: fresh %v %v; want the first result", fresh, mustResult(t, res))
		}
		if _, fresh := rep.Execute(c, 1, put("c1")); !fresh || rep.Applied != applied+1 {
			t.Fatalf("c's first request: fresh %v, applied %d → %d", fresh, applied, rep.Applied)
		}
	}
	if !bytes.Equal(r.Snapshot(), twin.Snapshot()) {
		t.Fatal("the restored replica expired differently")
	}
	bad := r.Snapshot()
	bad[27] = 0 // max sessions 0
	if err := NewReplica(NewStore(), 0).Restore(bad); err == nil || !strings.Contains(err.Error(), "field max sessions at offset 24: 0, want at least 1") {
		t.Errorf("Restore with max sessions 0 = %v", err)
	}
}

func mustResult(t *testing.T, b []byte) Result {
	t.Helper()
	r, err := ParseResult(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// laggingStore is a planted bug: a get answers the value before the last
// put of the key (deterministically, so replicas still agree).
type laggingStore struct {
	*Store
	prev map[string][]byte
}

func (s *laggingStore) Apply(cmd []byte) []byte {
	o, err := ParseOp(cmd)
	if err == nil && o.Kind == OpPut {
		if v, ok := s.Get(o.Key); ok {
			s.prev[o.Key] = v
		}
	}
	if err == nil && o.Kind == OpGet {
		if v, ok := s.prev[o.Key]; ok {
			return AppendResult(nil, Result{Status: StatusOK, Value: v})
		}
	}
	return s.Store.Apply(cmd)
}

// The linearizability check catches the planted bug.
func TestSimCatchesPlantedBug(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		sc := scenario{replicas: 3, clients: 3}
		failed := runSim(t, seed, sc, func() StateMachine { return &laggingStore{NewStore(), map[string][]byte{}} })
		if len(failed) == 0 {
			continue
		}
		if msg := strings.Join(failed, "\n"); !strings.Contains(msg, "is not linearizable (porcupine: Illegal)") {
			t.Fatalf("seed %d: the planted bug failed for another reason:\n%s", seed, msg)
		}
		return
	}
	t.Fatal("the planted bug (stale gets) passed 5 seeds")
}

// A node answers from its state only once it has some, reads locally
// only when asked, and names what was wrong with a malformed request.
func TestNodeRequests(t *testing.T) {
	n, err := NewNode(NodeConfig{MaxMessage: 100})
	if err != nil {
		t.Fatal(err)
	}
	var replies []Reply
	reply := func(b []byte) {
		p, err := ParseReply(b)
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, p)
	}
	req := func(q Request) { n.Request(AppendRequest(nil, q), reply) }
	put := Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "a", Value: []byte("1")}}
	req(put)
	if len(replies) != 1 || replies[0].Result.Status != StatusUnavailable || len(n.Outbox()) != 0 {
		t.Fatalf("before a view: %+v, want unavailable and nothing sent", replies)
	}
	n.OnEvent(reliable.Event{Kind: reliable.ViewInstalled, Member: 0, View: &reliable.ViewInfo{ID: 1, Members: []frame.MemberInfo{{ID: 0, Incarnation: 1}}}})
	// Its announcement (no state held) delivered: the only replica
	// starts the service empty.
	for _, m := range n.Outbox() {
		n.Deliver(0, m)
	}
	if !n.Ready() {
		t.Fatal("a founding view of the only replica, its announcement delivered: not ready")
	}
	// A session opens through the order; its id is its place (the
	// announcement is no request: the first).
	replies = nil
	req(Request{Open: true, Seq: 77})
	out := n.Outbox()
	if len(replies) != 0 || len(out) != 1 {
		t.Fatalf("an open in view 1: replies %+v, %d messages to send; want none and 1", replies, len(out))
	}
	n.Deliver(0, out[0])
	if len(replies) != 1 || replies[0].Seq != 77 || replies[0].Result.String() != `ok "\x00\x00\x00\x00\x00\x00\x00\x01"` {
		t.Fatalf("the open delivered: %+v, want ok and id 1", replies)
	}
	replies = nil
	req(put)
	out = n.Outbox()
	if len(replies) != 0 || len(out) != 1 {
		t.Fatalf("a put in view 1: replies %+v, %d messages to send; want none and 1", replies, len(out))
	}
	n.Deliver(0, out[0])
	if len(replies) != 1 || replies[0].Result.Status != StatusOK || replies[0].Seq != 1 {
		t.Fatalf("the put delivered: %+v", replies)
	}
	replies = nil
	req(put) // a retry: the first result, without ordering it again
	req(Request{Client: 2, Seq: 1, Local: true, Op: Op{Kind: OpGet, Key: "a"}})
	n.Request([]byte{1, 2, 3}, reply)
	req(Request{Client: 0, Seq: 77, Op: Op{Kind: OpGet, Key: "a"}}) // not an open: refused, not ordered
	if len(n.Outbox()) != 0 || len(replies) != 4 || replies[3].Result.Status != StatusExpired || replies[0].Result.Status != StatusOK ||
		replies[1].Result.String() != `ok "1"` || replies[2].Result.Status != StatusBadRequest ||
		!strings.Contains(string(replies[2].Result.Value), "field client at offset 0") {
		t.Fatalf("retry, local get, bad request, a request of session 0: %+v", replies)
	}
}

// A run is a function of its seed.
func TestSimDeterministic(t *testing.T) {
	sc := drawScenario(4, 5)
	trace := func() string {
		s := runSimTrace(t, 4, sc)
		return s
	}
	if a, b := trace(), trace(); a != b {
		t.Fatalf("two runs of seed 4 differ:\n%.500s\n%.500s", a, b)
	}
}

// CheckHistory passes a linearizable history, one whose unanswered put
// took effect late, and fails a read of an overwritten value.
func TestCheckHistory(t *testing.T) {
	put := func(c uint64, call, ret int64, v string) HistoryOp {
		return HistoryOp{Client: c, Call: call, Return: ret, Answered: ret > 0, Op: Op{Kind: OpPut, Key: "a", Value: []byte(v)}, Result: Result{Status: StatusOK}}
	}
	get := func(c uint64, call, ret int64, v string) HistoryOp {
		res := Result{Status: StatusOK, Value: []byte(v)}
		if v == "" {
			res = Result{Status: StatusNotFound}
		}
		return HistoryOp{Client: c, Call: call, Return: ret, Answered: true, Op: Op{Kind: OpGet, Key: "a"}, Result: res}
	}
	for _, tc := range []struct {
		name string
		h    []HistoryOp
		want string
	}{
		{"sequential", []HistoryOp{get(1, 0, 1, ""), put(1, 2, 3, "x"), get(2, 4, 5, "x")}, ""},
		{"unanswered put applied late", []HistoryOp{put(1, 0, 0, "x"), get(2, 1, 2, ""), get(2, 10, 11, "x")}, ""},
		{"stale read", []HistoryOp{put(1, 0, 1, "x"), put(1, 2, 3, "y"), get(2, 4, 5, "x")}, "not linearizable (porcupine: Illegal)"},
	} {
		err := CheckHistory(tc.h, time.Second)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
