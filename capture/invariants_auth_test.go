package capture

import (
	"bytes"
	"net"
	"reflect"
	"testing"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
)

// The online checker of an encrypted group, through a wrapped link under
// the auth decorator (as rbcastd wraps it): without the key a Nack is a
// corrupt frame and a retransmission, sealed anew, a seq-reuse; with it
// (SetKeys) neither, and frames that would not verify at a member (a
// replay of a sealed frame, a frame under another key) are counted by
// reason and not checked.
func TestInvariantsSetKeys(t *testing.T) {
	mkKey := func(seed byte) *auth.Key {
		k, err := auth.NewKey(bytes.Repeat([]byte{seed}, auth.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	key, other := mkKey(1), mkKey(2)
	run := func(keys ...*auth.Key) *Invariants {
		iv := NewInvariants(0, nil)
		if keys != nil {
			if err := iv.SetKeys(keys...); err != nil {
				t.Fatal(err)
			}
		}
		mem := &memLink{mac: net.HardwareAddr(testSrc[:])}
		c, err := Wrap(mem, nil, Options{Node: "3", Invariants: iv})
		if err != nil {
			t.Fatal(err)
		}
		send := func(k *auth.Key, h frame.Header, b frame.Body) []byte {
			t.Helper()
			a, err := auth.Wrap(&tap{Link: c}, auth.Config{Group: 1, Key: k, Encrypt: true})
			if err != nil {
				t.Fatal(err)
			}
			eth := frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType)
			if eth, err = frame.Append(eth, &h, b); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Send([][]byte{eth}); err != nil {
				t.Fatal(err)
			}
			return a.Unwrap().(*tap).last
		}
		data := &frame.Payload{T: frame.Data, Data: []byte("payload")}
		send(key, frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: 0}, data)
		send(key, frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: 0, Flags: frame.FlagRetransmit}, data)
		sealed := send(key, frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: 0}, &frame.NackBody{Target: 2, Ranges: []frame.Range{{First: 4, Last: 9}}})
		c.Send([][]byte{sealed}) // the same sealed frame again: a replay
		send(other, frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: 1}, data)
		return iv
	}
	if got := run().Counts(); got[invariant.KindCorrupt] == 0 || got[invariant.KindSeqReuse] == 0 {
		t.Fatalf("without the key: %v, want corrupt-frame and seq-reuse", got)
	}
	iv := run(key)
	if got := iv.Counts(); len(got) != 0 {
		t.Fatalf("with the key: violations %v", got)
	}
	verified, dropped := iv.AuthStats()
	want := map[string]uint64{"a replay (counter seen before)": 1, "a key id of neither key slot": 1}
	if verified != 3 || !reflect.DeepEqual(dropped, want) {
		t.Fatalf("with the key: %d verified, dropped %v; want 3 and %v", verified, dropped, want)
	}
	if err := NewInvariants(0, nil).SetKeys(); err == nil || err.Error() != "capture: Invariants.SetKeys: 0 keys given, want one, or two across a rotation" {
		t.Fatalf("SetKeys(): %v", err)
	}
}

// tap passes frames to Link and keeps a copy of the last one sent.
type tap struct {
	link.Link
	last []byte
}

func (t *tap) Send(frames [][]byte) (int, error) {
	t.last = bytes.Clone(frames[len(frames)-1])
	return t.Link.Send(frames)
}
