package kv

import (
	"slices"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// FuzzParseOp: an op off the total order (what Store.Apply decodes,
// sent by any replica's client) either fails with a FormatError or
// encodes back to exactly its bytes.
func FuzzParseOp(f *testing.F) {
	for _, o := range []Op{
		{Kind: OpGet, Key: "k"},
		{Kind: OpPut, Key: "key", Value: []byte("value")},
		{Kind: OpDelete, Key: ""},
		{Kind: OpCAS, Key: "k", Value: []byte("new"), Expect: []byte("old")},
	} {
		f.Add(AppendOp(nil, o))
	}
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, ParseOp, AppendOp) })
}

// FuzzParseResult: a result (what Store.Apply returns, carried in a
// reply) either fails with a FormatError or encodes back to exactly its
// bytes.
func FuzzParseResult(f *testing.F) {
	f.Add(AppendResult(nil, Result{Status: StatusOK, Value: []byte("v")}))
	f.Add(AppendResult(nil, Result{Status: StatusNotFound}))
	f.Add(AppendResult(nil, Result{Status: StatusBadRequest, Value: []byte("kv: op: kind 9")}))
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, ParseResult, AppendResult) })
}

// FuzzNodeDeliver: replicas that hear the same messages in the same
// order (the total order) keep the same state whatever the messages
// hold: four replicas (the fourth joined by a snapshot) are delivered
// arbitrary messages from any member, and handed arbitrary client
// datagrams; nothing panics, every reply parses, and every replica
// with state holds the same snapshot after each step. The input is a
// list of chunks: kind and member (u8), length (u8), bytes.
func FuzzNodeDeliver(f *testing.F) {
	req := func(q Request) []byte { return append([]byte{msgRequest}, AppendRequest(nil, q)...) }
	var seed []byte
	for _, c := range []struct {
		kind byte
		b    []byte
	}{
		{1, AppendRequest(nil, Request{Open: true, Seq: 5})},
		{0, req(Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}})},
		{0, req(Request{Client: 1, Seq: 1, Op: Op{Kind: OpPut, Key: "k", Value: []byte("v")}})},
		{1, AppendRequest(nil, Request{Client: 1, Seq: 2, Op: Op{Kind: OpCAS, Key: "k", Value: []byte("w"), Expect: []byte("v")}})},
		{0, []byte{msgSnapshot, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}},
		{0, []byte{msgAnnounce, 0, 0, 0, 2, 1}},
		{2, AppendRequest(nil, Request{Client: 1, Seq: 3, Local: true, Op: Op{Kind: OpGet, Key: "k"}})},
	} {
		seed = append(seed, c.kind, byte(len(c.b)))
		seed = append(seed, c.b...)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, in []byte) {
		g := newOrderGroup(t, 3, nil, 0, 1, 2)
		g.install(1, 0, 1, 2)
		g.pump()
		n, err := NewNode(NodeConfig{MaxMessage: 40, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		g.nodes[3] = n
		g.install(2, 0, 1, 2, 3)
		g.pump()
		want := g.state(0)
		for m := range frame.MemberID(4) {
			if got := g.state(m); got == "" || got != want {
				t.Fatalf("before the input: replica %d holds %x, replica 0 %x", m, got, want)
			}
		}
		reply := func(b []byte) {
			if _, err := ParseReply(b); err != nil {
				t.Fatalf("a reply does not parse: %v\n% x", err, b)
			}
		}
		for len(in) >= 2 {
			kind, m, l := in[0]%4, frame.MemberID(in[0]>>2%4), min(int(in[1]), len(in)-2)
			b := in[2 : 2+l]
			in = in[2+l:]
			switch kind {
			case 0, 3:
				g.deliver([]frame.MemberID{m}, [][]byte{b})
			default:
				g.nodes[m].Request(slices.Clone(b), reply)
			}
			g.pump()
			want := g.state(0)
			for m := range frame.MemberID(4) {
				if got := g.state(m); got != want {
					t.Fatalf("replica %d holds %x, replica 0 %x", m, got, want)
				}
			}
		}
	})
}
