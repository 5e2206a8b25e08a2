package capture

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/auth"
)

// Invariants checks, as frames pass the links wrapped with it, the
// protocol invariants of package invariant — the same checker 'pcap-replay
// check' runs over a capture file, fed one frame at a time — and reports
// each violation, typically to dump a flight recorder
// (Recorder.DumpOnViolation) while the frames that show it are still in
// memory: seq-reuse, global-reuse, sequenced-twice, delivery-order (a
// member acknowledging a frame its link never received, or an ack going
// back), nack-storm, corrupt-frame and foreign-version. Only the checks
// that need a whole capture (gaps never repaired by its end) are left to
// pcap-replay.
//
// It remembers the last Window bindings of each kind (a hash of each
// payload, not the payload), so memory is bounded; a binding older than
// that is not compared.
type Invariants struct {
	mu          sync.Mutex
	c           *invariant.Checker
	onViolation func(Violation)
	count       map[string]uint64

	// With keys (SetKeys), every rbcast frame is verified first, as a
	// member's link verifies it (one auth.Verifier per wrapped link,
	// group and algorithm), and checked decrypted; what does not verify
	// is counted in authDropped, not checked.
	keys        []*auth.Key
	verifiers   map[verifierKey]*auth.Verifier
	verified    uint64
	authDropped map[string]uint64
}

type verifierKey struct {
	iface   int
	group   uint32
	encrypt bool
}

// Violation is one broken invariant: the type package invariant and
// 'pcap-replay check' report. Online, Frames numbers frames in the order
// they passed the checker (the capture file's numbering when one Writer
// records exactly the links this Invariants checks), and Frame is a copy
// of the Ethernet frame that showed it.
type Violation = invariant.Violation

// DefaultInvariantsWindow is NewInvariants' default window: bindings of
// the last 64 Ki frames of each kind. Measured (HeapAlloc after GC, Go
// 1.26, amd64): 6.6 MB after 3×64 Ki Data frames, 14.4 MB after 3×64 Ki
// SeqData frames (three windows: global, request, numbering).
const DefaultInvariantsWindow = 1 << 16

// NewInvariants returns a checker remembering window bindings of each
// kind (0 means DefaultInvariantsWindow) and calling onViolation, on the
// goroutine of the link's Send or Recv, for each violation: it must not
// block (start a dump in a goroutine, as DumpOnViolation does).
func NewInvariants(window int, onViolation func(Violation)) *Invariants {
	if window <= 0 {
		window = DefaultInvariantsWindow
	}
	return &Invariants{c: invariant.New(invariant.Options{Window: window}), onViolation: onViolation, count: map[string]uint64{}}
}

// Counts returns how many violations of each kind were seen.
func (iv *Invariants) Counts() map[string]uint64 {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	out := make(map[string]uint64, len(iv.count))
	for k, n := range iv.count {
		out[k] = n
	}
	return out
}

// SetKeys gives the checker the group's keys (one, or two across a
// rotation), for a group that authenticates its frames (link/auth,
// rbcastd -key-file): every rbcast frame a wrapped link sends or
// receives is then verified with auth.Verifier.Check on a copy, per
// link, group and algorithm, as a member's link verifies what it
// receives, and checked decrypted. Without the key an encrypted group's
// structured frames (Nack, view frames, FileStatus) do not decode and
// its retransmissions, sealed anew, carry other ciphertext: corrupt-frame
// and seq-reuse that are neither. A frame that does not verify (a
// rogue's, a replay, a key the checker was not given) is not checked
// but counted by reason (AuthStats), as the member's link drops it.
//
// Call it before any frame passes, and again with the keys the member's
// links accept after every step of a rotation (rbcastd rekey install,
// activate, retire; daemon.Config.KeysChanged): the verifiers then
// accept the new set and keep their replay windows, so frames under a
// key installed later are verified and checked, frames under a retired
// key are dropped as the member drops them, and a frame seen before the
// step is still a replay. The counters go on.
func (iv *Invariants) SetKeys(keys ...*auth.Key) error {
	if len(keys) == 0 || len(keys) > 2 {
		return fmt.Errorf("capture: Invariants.SetKeys: %d keys given, want one, or two across a rotation", len(keys))
	}
	for i, k := range keys {
		if k == nil {
			return fmt.Errorf("capture: Invariants.SetKeys: key %d is nil", i)
		}
	}
	// Two keys of one id are refused here, before any verifier changes.
	probe, err := auth.NewVerifier(auth.Config{Key: keys[0]})
	if err == nil {
		err = probe.SetKeys(keys...)
	}
	if err != nil {
		return fmt.Errorf("capture: Invariants.SetKeys: %w", err)
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for _, v := range iv.verifiers {
		v.SetKeys(keys...) // cannot fail: the probe took them
	}
	iv.keys = slices.Clone(keys)
	if iv.verifiers == nil {
		iv.verifiers = map[verifierKey]*auth.Verifier{}
		iv.authDropped = map[string]uint64{}
	}
	return nil
}

// AuthStats returns, with keys (SetKeys), how many frames verified and,
// per reason (auth.DropError's text), how many did not and were not
// checked.
func (iv *Invariants) AuthStats() (verified uint64, dropped map[string]uint64) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	dropped = make(map[string]uint64, len(iv.authDropped))
	for k, n := range iv.authDropped {
		dropped[k] = n
	}
	return iv.verified, dropped
}

// authenticate verifies eth (a sealed rbcast frame of f's link) on a
// copy and returns the copy's rbcast frame, decrypted; ok is false if
// it did not verify (counted).
func (iv *Invariants) authenticate(l *Link, eth []byte, sealed frame.View) (body []byte, ok bool, err error) {
	alg, _, _ := sealed.Auth()
	k := verifierKey{iface: l.invIface, group: sealed.Group(), encrypt: alg == auth.AlgGCM}
	v := iv.verifiers[k]
	if v == nil {
		if v, err = auth.NewVerifier(auth.Config{Group: k.group, EtherType: l.etherType, Key: iv.keys[0], Encrypt: k.encrypt}); err != nil {
			return nil, false, err
		}
		if err := v.SetKeys(iv.keys...); err != nil {
			return nil, false, err
		}
		iv.verifiers[k] = v
	}
	cp := bytes.Clone(eth)
	if err := v.Check(cp); err != nil {
		var de *auth.DropError
		if !errors.As(err, &de) {
			return nil, false, err
		}
		iv.authDropped[strings.TrimPrefix(err.Error(), "auth: frame dropped: ")]++
		return nil, false, nil
	}
	iv.verified++
	_, body, err = frame.SplitEthernet(cp, l.etherType)
	return body, err == nil, err
}

// addInterface registers a wrapped link under the name violations give
// it: "n" and the node's id, as pcap-replay names a capture's interface.
func (iv *Invariants) addInterface(node string) int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return iv.c.AddInterface("n" + node)
}

// observe records one Ethernet frame passing the link into its sinks and
// checks it, under one lock so that the checker numbers frames in the
// order the sinks got them.
func (iv *Invariants) observe(l *Link, rec record, ts int64, dir invariant.Dir) {
	iv.mu.Lock()
	l.addToSinks(rec)
	f := invariant.Frame{Time: time.Unix(0, ts), Iface: l.invIface, Dir: dir, Data: rec.data}
	_, body, err := frame.SplitEthernet(rec.data, l.etherType)
	switch {
	case err == nil && iv.keys != nil:
		sealed, serr := frame.ParseSealed(body)
		if serr != nil {
			// Not a frame a verifier judges: it reaches no core
			// either, and is checked (and reported) as it is.
			f.View, f.Err = frame.Parse(body)
			break
		}
		plain, ok, aerr := iv.authenticate(l, rec.data, sealed)
		if aerr != nil || !ok {
			iv.c.Skip() // dropped by the member's link: counted, not checked
			iv.mu.Unlock()
			return
		}
		f.View, f.Err = frame.Parse(plain)
	case err == nil:
		f.View, f.Err = frame.Parse(body)
	case foreignEtherType(err):
		iv.c.Skip() // not ours to judge
		iv.mu.Unlock()
		return
	default:
		f.Err = err
	}
	found := iv.c.Check(&f)
	for _, v := range found {
		iv.count[v.Kind]++
	}
	iv.mu.Unlock()
	if iv.onViolation != nil {
		for _, v := range found {
			iv.onViolation(v)
		}
	}
}

// foreignEtherType reports a frame of another EtherType.
func foreignEtherType(err error) bool {
	var de *frame.DecodeError
	return errors.As(err, &de) && de.Field == "ethernet.type"
}

// DumpOnViolation returns an Invariants callback that dumps the recorder
// to a new file in dir, rbcast-invariant-<kind>-<UTC time>.pcapng, at most
// once per minInterval (0 means one minute: a violation tends to repeat
// with every retransmission), in a goroutine so the link never waits.
// done, if not nil, is called after each dump with the violation, the
// file's path and the error, if any.
func (r *Recorder) DumpOnViolation(dir string, minInterval time.Duration, done func(v Violation, path string, err error)) func(Violation) {
	if minInterval <= 0 {
		minInterval = time.Minute
	}
	var mu sync.Mutex
	var last time.Time
	return func(v Violation) {
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < minInterval {
			mu.Unlock()
			return
		}
		last = now
		mu.Unlock()
		go func() {
			path := dumpPath(dir, "rbcast-invariant-"+v.Kind, now)
			err := r.DumpFile(path)
			if done != nil {
				done(v, path, err)
			}
		}()
	}
}
