package capture

import (
	"bytes"
	"fmt"
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

// The checker follows a rotation (SetKeys again after each step, as
// rbcastd's daemon tells it): a frame under a key not yet installed is
// dropped as the member drops it; once installed, frames under it are
// verified and checked (a seq-reuse under the new key is found), and a
// frame verified before the step is still a replay; once the old key is
// retired, frames under it are dropped again.
func TestInvariantsSetKeysRotation(t *testing.T) {
	mkKey := func(seed uint16) *auth.Key {
		k, err := auth.NewKey(bytes.Repeat([]byte{byte(seed), byte(seed >> 8)}, auth.KeySize/2))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	oldKey, newKey := mkKey(1), mkKey(2)
	iv := NewInvariants(0, nil)
	if err := iv.SetKeys(oldKey); err != nil {
		t.Fatal(err)
	}
	mem := &memLink{mac: net.HardwareAddr(testSrc[:])}
	c, err := Wrap(mem, nil, Options{Node: "3", Invariants: iv})
	if err != nil {
		t.Fatal(err)
	}
	send := func(k *auth.Key, seq uint32, payload string) []byte {
		t.Helper()
		a, err := auth.Wrap(&tap{Link: c}, auth.Config{Group: 1, Key: k, Encrypt: true})
		if err != nil {
			t.Fatal(err)
		}
		eth := frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType)
		if eth, err = frame.Append(eth, &frame.Header{Group: 1, Sender: 3, Incarnation: 1, Seq: seq}, &frame.Payload{T: frame.Data, Data: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Send([][]byte{eth}); err != nil {
			t.Fatal(err)
		}
		return a.Unwrap().(*tap).last
	}
	expect := func(step string, verified uint64, dropped map[string]uint64, counts map[string]uint64) {
		t.Helper()
		v, d := iv.AuthStats()
		if got := iv.Counts(); v != verified || !reflect.DeepEqual(d, dropped) || !reflect.DeepEqual(got, counts) {
			t.Fatalf("%s: %d verified, dropped %v, violations %v; want %d, %v, %v", step, v, d, got, verified, dropped, counts)
		}
	}
	const unknown, replay = "a key id of neither key slot", "a replay (counter seen before)"
	first := send(oldKey, 0, "zero")
	send(newKey, 1, "one")
	expect("before install", 1, map[string]uint64{unknown: 1}, map[string]uint64{})

	if err := iv.SetKeys(oldKey, newKey); err != nil { // install
		t.Fatal(err)
	}
	c.Send([][]byte{first})
	send(newKey, 1, "one")
	send(newKey, 0, "not zero") // checked: the same seq, another payload
	expect("after install", 3, map[string]uint64{unknown: 1, replay: 1}, map[string]uint64{invariant.KindSeqReuse: 1})

	if err := iv.SetKeys(newKey); err != nil { // retire
		t.Fatal(err)
	}
	send(oldKey, 2, "two")
	send(newKey, 2, "two")
	expect("after retire", 4, map[string]uint64{unknown: 2, replay: 1}, map[string]uint64{invariant.KindSeqReuse: 1})

	// Two keys of one id: refused, the keys before kept.
	var twin *auth.Key
	for seed := uint16(3); twin == nil; seed++ {
		if k := mkKey(seed); k.ID() == newKey.ID() {
			twin = k
		}
	}
	want := fmt.Sprintf("capture: Invariants.SetKeys: auth: key %s has the id %d of key %s in slot 0; generate another", twin, twin.ID(), newKey)
	if err := iv.SetKeys(newKey, twin); err == nil || err.Error() != want {
		t.Fatalf("SetKeys of two keys with one id: %v, want %q", err, want)
	}
	send(newKey, 3, "three")
	expect("after a refused SetKeys", 5, map[string]uint64{unknown: 2, replay: 1}, map[string]uint64{invariant.KindSeqReuse: 1})
	if err := iv.SetKeys(newKey, nil); err == nil || err.Error() != "capture: Invariants.SetKeys: key 1 is nil" {
		t.Fatalf("SetKeys with a nil key: %v", err)
	}
}
