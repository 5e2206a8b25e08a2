package capture

import (
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// Invariants checks, as frames pass the links wrapped with it, the
// protocol invariants one node's traffic shows at once — the online part
// of 'pcap-replay check' — and reports each violation, typically to dump a
// flight recorder (Recorder.DumpOnViolation) while the frames that show it
// are still in memory:
//
//   - seq-reuse: one sender, incarnation and sequence number in two Data
//     frames (or request number in two SeqRequest frames) with different
//     payloads;
//   - global-reuse: one global number of an epoch bound to two requests
//     or two payloads (SeqData, SeqAccept), or to a change of the member
//     list (SeqMember) and anything else, or to two different changes;
//   - sequenced-twice: one request numbered with two globals in an epoch
//     (not a member change: a member may be removed, readmitted and
//     removed again within an epoch).
//
// It remembers the last Window bindings of each kind (a hash of each
// payload, not the payload), so memory is bounded; a binding older than
// that is not compared. Frames that do not decode are not its business
// (the runtime counts them).
type Invariants struct {
	mu          sync.Mutex
	seed        maphash.Seed
	window      int
	data        bounded[dataKey, payloadHash]
	globals     bounded[globalKey, globalBinding]
	uids        bounded[uidKey, uint32]
	onViolation func(Violation)
	count       map[string]uint64
}

// Violation is one broken invariant seen by Invariants.
type Violation struct {
	Kind   string // seq-reuse, global-reuse, sequenced-twice
	Detail string
	At     time.Time // the capture time of the frame that showed it
	Frame  []byte    // that frame (a copy)
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// DefaultInvariantsWindow is NewInvariants' default window: bindings of
// the last 64 Ki frames of each kind, about 14 MB of heap once the three
// windows are full (measured: HeapAlloc after GC, before and after 3×64 Ki
// insertions of each kind, Go 1.26, amd64).
const DefaultInvariantsWindow = 1 << 16

type dataKey struct {
	t      frame.Type
	sender frame.MemberID
	inc    uint32
	seq    uint32
}

type payloadHash uint64

type globalKey struct{ epoch, global uint32 }

// globalBinding is what a global number is bound to: a request (uid),
// or, for a SeqMember, a change of the member list (uid Origin NoMember,
// Incarnation the member's, Seq the member id; hash of change and reason).
type globalBinding struct {
	uid  frame.UID
	hash payloadHash
	has  bool // hash is set (a SeqData or SeqMember; an Accept carries no payload)
}

// memberChange is a SeqMember's binding key: no request has Origin NoMember.
func memberChange(c frame.SeqMemberBody) frame.UID {
	return frame.UID{Origin: frame.NoMember, Incarnation: c.Incarnation, Seq: uint32(c.Member)}
}

// boundTo names a binding's uid in a violation.
func boundTo(u frame.UID) string {
	if u.Origin == frame.NoMember {
		return fmt.Sprintf("the change of member %d.%d", u.Seq, u.Incarnation)
	}
	return fmt.Sprintf("request %d.%d#%d", u.Origin, u.Incarnation, u.Seq)
}

type uidKey struct {
	epoch uint32
	uid   frame.UID
}

// NewInvariants returns a checker remembering window bindings of each
// kind (0 means DefaultInvariantsWindow) and calling onViolation, on the
// goroutine of the link's Send or Recv, for each violation: it must not
// block (start a dump in a goroutine, as DumpOnViolation does).
func NewInvariants(window int, onViolation func(Violation)) *Invariants {
	if window <= 0 {
		window = DefaultInvariantsWindow
	}
	return &Invariants{seed: maphash.MakeSeed(), window: window, onViolation: onViolation,
		data: newBounded[dataKey, payloadHash](window), globals: newBounded[globalKey, globalBinding](window),
		uids: newBounded[uidKey, uint32](window), count: map[string]uint64{}}
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

// observe checks one Ethernet frame passing the link.
func (iv *Invariants) observe(ts int64, data []byte, etherType uint16) {
	_, body, err := frame.SplitEthernet(data, etherType)
	if err != nil {
		return
	}
	v, err := frame.Parse(body)
	if err != nil {
		return
	}
	iv.mu.Lock()
	var found []Violation
	report := func(kind, format string, args ...any) {
		iv.count[kind]++
		found = append(found, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), At: time.Unix(0, ts), Frame: append([]byte(nil), data...)})
	}
	hash := func(b []byte, bundled bool) payloadHash {
		var h maphash.Hash
		h.SetSeed(iv.seed)
		if bundled {
			h.WriteByte(1)
		} else {
			h.WriteByte(0)
		}
		h.Write(b)
		return payloadHash(h.Sum64())
	}
	bundled := v.Flags()&frame.FlagBundle != 0
	bindGlobal := func(epoch, g uint32, b globalBinding) {
		k := globalKey{epoch, g}
		old, ok := iv.globals.get(k)
		switch {
		case !ok:
			iv.globals.put(k, b)
		case old.uid != b.uid:
			report("global-reuse", "epoch %d global %d is bound to %s and to %s", epoch, g, boundTo(old.uid), boundTo(b.uid))
		case old.has && b.has && old.hash != b.hash:
			what := "payloads"
			if b.uid.Origin == frame.NoMember {
				what = "changes"
			}
			report("global-reuse", "epoch %d global %d (%s) is sent with two different %s", epoch, g, boundTo(b.uid), what)
		case !old.has && b.has:
			iv.globals.put(k, b)
		}
		if b.uid.Origin == frame.NoMember {
			return // a member change: no request numbered twice
		}
		ku := uidKey{epoch, b.uid}
		if og, ok := iv.uids.get(ku); !ok {
			iv.uids.put(ku, g)
		} else if og != g {
			report("sequenced-twice", "epoch %d: %s is numbered global %d and global %d", epoch, boundTo(b.uid), og, g)
		}
	}
	switch v.Type() {
	case frame.Data, frame.SeqRequest:
		k := dataKey{v.Type(), v.Sender(), v.Incarnation(), v.Seq()}
		h := hash(v.Payload(), bundled)
		if old, ok := iv.data.get(k); !ok {
			iv.data.put(k, h)
		} else if old != h {
			report("seq-reuse", "member %d.%d sends %v seq %d with two different payloads", k.sender, k.inc, k.t, k.seq)
		}
	case frame.SeqData:
		bindGlobal(v.SeqDataEpoch(), v.Seq(), globalBinding{uid: v.SeqDataUID(), hash: hash(v.Payload(), bundled), has: true})
	case frame.SeqMember:
		c := v.SeqMemberChange()
		bindGlobal(c.Epoch, v.Seq(), globalBinding{uid: memberChange(c), hash: hash([]byte{byte(c.Change), byte(c.Reason)}, false), has: true})
	case frame.SeqAccept:
		al := v.Accepts()
		for i := range al.Len() {
			e := al.At(i)
			bindGlobal(v.AcceptEpoch(), e.Global, globalBinding{uid: e.UID})
		}
	}
	iv.mu.Unlock()
	if iv.onViolation != nil {
		for _, f := range found {
			iv.onViolation(f)
		}
	}
}

// bounded is a map that keeps its last n insertions.
type bounded[K comparable, V any] struct {
	m    map[K]V
	keys []K // ring of insertion order
	next int
	full bool
}

func newBounded[K comparable, V any](n int) bounded[K, V] {
	return bounded[K, V]{m: make(map[K]V), keys: make([]K, n)}
}

func (b *bounded[K, V]) get(k K) (V, bool) {
	v, ok := b.m[k]
	return v, ok
}

func (b *bounded[K, V]) put(k K, v V) {
	if _, ok := b.m[k]; ok {
		b.m[k] = v
		return
	}
	if b.full {
		delete(b.m, b.keys[b.next])
	}
	b.keys[b.next] = k
	b.m[k] = v
	b.next++
	if b.next == len(b.keys) {
		b.next, b.full = 0, true
	}
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
