package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// CheckOptions configure Check.
type CheckOptions struct {
	// Group, when set, is the only group allowed; otherwise frames of any
	// group but the most common one are reported.
	Group *uint32
	// NackStormCount and NackStormWindow: more than NackStormCount Nacks
	// naming the same range (target, first, last) within NackStormWindow
	// is a storm. Zero means DefaultNackStormCount, DefaultNackStormWindow.
	NackStormCount  int
	NackStormWindow time.Duration
}

// Defaults of CheckOptions: the PBP core re-asks every NackTimeout (4 ms)
// with back-off, so a receiver alone sends about 3 per 10 ms; 16 in 10 ms
// takes several receivers asking far faster than the timer allows.
const (
	DefaultNackStormCount  = 16
	DefaultNackStormWindow = 10 * time.Millisecond
)

// Violation kinds.
const (
	KindSeqReuse    = "seq-reuse"
	KindGap         = "unrepaired-gap"
	KindOrder       = "delivery-order"
	KindNackStorm   = "nack-storm"
	KindForeign     = "foreign-group"
	KindVersion     = "foreign-version"
	KindCorrupt     = "corrupt-frame"
	KindImplausible = "seq-jump"
	// The sequencer protocol's: one global number of an epoch bound to two
	// messages; one request numbered twice in an epoch.
	KindGlobalReuse    = "global-reuse"
	KindSequencedTwice = "sequenced-twice"
)

// Violation is one broken invariant, with the frames involved.
type Violation struct {
	Kind   string
	Frames []int
	Detail string
}

func (v Violation) String() string {
	fs := make([]string, len(v.Frames))
	for i, f := range v.Frames {
		fs[i] = strconv.Itoa(f)
	}
	return fmt.Sprintf("%s [frames %s]: %s", v.Kind, strings.Join(fs, ","), v.Detail)
}

// Check verifies the protocol invariants a capture can show: no sequence
// number reused with different content; every gap repaired by the end (per
// receiving interface when the capture has direction flags, else over the
// whole capture); no member acknowledging (so delivering) a frame its own
// interface had not received, and no acknowledgement going backwards; no
// Nack storm; no frame of a foreign group or version; no corrupt frame.
// For the sequencer protocol: no global number of an epoch bound to two
// messages (nor a SeqData's payload differing from its request's), no
// request numbered twice in an epoch, no request number reused with
// different content, every global a receiver learned of received by the
// end (globals an election discarded excepted), no delivered cursor
// beyond what the member's interface received or going back.
// Violations come in a stable order.
func Check(c *Capture, opts CheckOptions) []Violation {
	if opts.NackStormCount <= 0 {
		opts.NackStormCount = DefaultNackStormCount
	}
	if opts.NackStormWindow <= 0 {
		opts.NackStormWindow = DefaultNackStormWindow
	}
	a := analyse(c)
	var out []Violation
	add := func(kind string, detail string, frames ...int) {
		out = append(out, Violation{Kind: kind, Frames: frames, Detail: detail})
	}

	// Corrupt frames and foreign versions, in file order.
	for i := range c.Records {
		r := &c.Records[i]
		switch {
		case r.Err == nil, isForeignEtherType(r.Err):
		case errors.Is(r.Err, frame.ErrVersion):
			add(KindVersion, fmt.Sprintf("on %s: %v", c.Interfaces[r.Iface].Label(), r.Err), r.N)
		default:
			add(KindCorrupt, fmt.Sprintf("on %s, %d bytes: %v", c.Interfaces[r.Iface].Label(), len(r.Data), r.Err), r.N)
		}
	}

	// Foreign groups.
	group, ok := a.majorityGroup()
	how := "the capture's most common group"
	if opts.Group != nil {
		group, ok, how = *opts.Group, true, "the -group given"
	}
	if ok {
		for i := range c.Records {
			r := &c.Records[i]
			if r.View != nil && r.View.Group() != group {
				add(KindForeign, fmt.Sprintf("%v from %d.%d on %s is of group %d, %s is %d", r.View.Type(), r.View.Sender(), r.View.Incarnation(), c.Interfaces[r.Iface].Label(), r.View.Group(), how, group), r.N)
			}
		}
	}

	// Sequence numbers reused with different content.
	type seqKey struct {
		k   senderKey
		seq uint32
	}
	first := map[seqKey]*Record{}
	reported := map[seqKey][][]byte{}
	for _, r := range a.order {
		v := r.View
		if v == nil || v.Type() != frame.Data {
			continue
		}
		sk := seqKey{senderKey{v.Sender(), v.Incarnation()}, v.Seq()}
		f := first[sk]
		if f == nil {
			first[sk] = r
			continue
		}
		p := dataContent(v)
		if bytes.Equal(dataContent(f.View), p) {
			continue
		}
		dup := false
		for _, q := range reported[sk] {
			dup = dup || bytes.Equal(q, p)
		}
		if dup {
			continue
		}
		reported[sk] = append(reported[sk], p)
		add(KindSeqReuse, fmt.Sprintf("member %s seq %d: frame %d carries %d payload bytes that differ from the %d of frame %d", sk.k, sk.seq, r.N, len(p), len(dataContent(f.View)), f.N), f.N, r.N)
	}

	// Gaps never repaired, and implausible jumps.
	for _, vw := range a.views {
		for _, k := range sortedKeys(vw.streams) {
			st := vw.streams[k]
			for _, g := range st.gaps {
				if g.Repaired.IsZero() {
					add(KindGap, fmt.Sprintf("at %s: seq %d of member %s, missing since frame %d, never received by the end of the capture", vw.name, g.Seq, k, g.OpenFrame), g.OpenFrame)
				}
			}
			for _, n := range st.jumps {
				add(KindImplausible, fmt.Sprintf("at %s: member %s's sequence jumps more than %d past %d", vw.name, k, maxJump, st.next), n)
			}
		}
	}

	out = append(out, a.seq.check()...)
	out = append(out, checkAcks(c, a)...)
	out = append(out, checkNackStorms(a, opts)...)
	return out
}

// dataContent is what must not change between copies of one Data frame:
// the payload and whether it is a bundle.
func dataContent(v frame.View) []byte {
	if v.Flags()&frame.FlagBundle != 0 {
		return append([]byte{1}, v.Payload()...)
	}
	return append([]byte{0}, v.Payload()...)
}

// checkAcks is the delivery-order check a capture without delivery records
// allows: a member's ack vector entry for j is its exp_seqno[j], so it has
// delivered every seq of j before it, in order, which it can only have done
// if its interface received them. Every ack a member sends must therefore
// be covered by what its own interface captured inbound, and never move
// backwards. Needs direction flags (a node's own interface).
func checkAcks(c *Capture, a *analysis) []Violation {
	if !c.HasDirection {
		return nil
	}
	var out []Violation
	for _, vw := range a.views {
		type ackState struct {
			last    uint32
			frame   int
			has     bool
			bad     bool   // reported once per sender
			checked uint32 // every seq before it was received
			hasChk  bool
		}
		received := map[frame.MemberID]map[uint32]bool{}
		acks := map[[2]frame.MemberID]*ackState{}
		for _, r := range a.order {
			if r.Iface != vw.iface || r.View == nil {
				continue
			}
			v := r.View
			if r.Dir == DirIn {
				if v.Type() == frame.Data {
					if received[v.Sender()] == nil {
						received[v.Sender()] = map[uint32]bool{}
					}
					received[v.Sender()][v.Seq()] = true
				}
				continue
			}
			if r.Dir != DirOut || !a.isPBP(v) {
				continue
			}
			me := v.Sender()
			for i := range v.AckCount() {
				j := frame.MemberID(int(v.AckBase()) + i)
				if j == me {
					continue
				}
				ack := v.Ack(i)
				st := acks[[2]frame.MemberID{me, j}]
				if st == nil {
					st = &ackState{}
					acks[[2]frame.MemberID{me, j}] = st
				}
				if st.has && frame.SeqLess(ack, st.last) {
					out = append(out, Violation{Kind: KindOrder, Frames: []int{st.frame, r.N},
						Detail: fmt.Sprintf("at %s: member %d's ack for member %d went back from %d to %d", vw.name, me, j, st.last, ack)})
				}
				if !st.bad {
					base, known := a.baseOf(j)
					if st.hasChk && frame.SeqLess(base, st.checked) {
						base = st.checked
					}
					if known && frame.SeqLess(base, ack) && frame.SeqDiff(ack, base) <= maxJump {
						st.checked, st.hasChk = ack, true
						for q := base; q != ack; q++ {
							if !received[j][q] {
								st.bad = true
								out = append(out, Violation{Kind: KindOrder, Frames: []int{r.N},
									Detail: fmt.Sprintf("at %s: member %d acknowledges member %d up to seq %d, so it delivered seq %d, which its interface had not received", vw.name, me, j, ack-1, q)})
								break
							}
						}
					}
				}
				if !st.has || frame.SeqLess(st.last, ack) {
					st.last, st.frame, st.has = ack, r.N, true
				}
			}
		}
	}
	return out
}

// baseOf returns the lowest sequence number of member id (any incarnation
// seen; the lowest).
func (a *analysis) baseOf(id frame.MemberID) (uint32, bool) {
	var b uint32
	ok := false
	for _, k := range sortedKeys(a.base) {
		if k.ID == id {
			if !ok || frame.SeqLess(a.base[k], b) {
				b = a.base[k]
			}
			ok = true
		}
	}
	return b, ok
}

// checkNackStorms reports more than NackStormCount Nacks naming the same
// range within NackStormWindow, once per burst.
func checkNackStorms(a *analysis, opts CheckOptions) []Violation {
	type rangeKey struct {
		target      frame.MemberID
		first, last uint32
	}
	type hit struct {
		at time.Time
		n  int
	}
	hits := map[rangeKey][]hit{}
	inStorm := map[rangeKey]bool{}
	var out []Violation
	for _, r := range a.txs {
		v := r.View
		if v == nil || v.Type() != frame.Nack {
			continue
		}
		rl := v.NackRanges()
		for i := range rl.Len() {
			rg := rl.At(i)
			k := rangeKey{v.NackTarget(), rg.First, rg.Last}
			h := append(hits[k], hit{r.Time, r.N})
			for len(h) > 0 && r.Time.Sub(h[0].at) > opts.NackStormWindow {
				h = h[1:]
			}
			hits[k] = h
			if len(h) > opts.NackStormCount {
				if !inStorm[k] {
					inStorm[k] = true
					frames := make([]int, len(h))
					for i := range h {
						frames[i] = h[i].n
					}
					out = append(out, Violation{Kind: KindNackStorm, Frames: frames,
						Detail: fmt.Sprintf("%d Nacks to member %d for seqs %d-%d within %v (limit %d)", len(h), k.target, k.first, k.last, opts.NackStormWindow, opts.NackStormCount)})
				}
			} else {
				inStorm[k] = false
			}
		}
	}
	return out
}

// isForeignEtherType reports a frame of another EtherType: not ours to
// judge (tcpdump without a filter captures everything).
func isForeignEtherType(err error) bool {
	var de *frame.DecodeError
	return errors.As(err, &de) && de.Field == "ethernet.type"
}

// WriteViolations prints the violations, sorted by first frame, and a
// total line.
func WriteViolations(w io.Writer, c *Capture, vs []Violation) error {
	sorted := append([]Violation(nil), vs...)
	sort.SliceStable(sorted, func(i, j int) bool { return firstFrame(sorted[i]) < firstFrame(sorted[j]) })
	ew := &errWriter{w: w}
	for _, v := range sorted {
		ew.printf("VIOLATION %s\n", v)
	}
	counts := map[string]int{}
	for _, v := range vs {
		counts[v.Kind]++
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	if len(vs) == 0 {
		ew.printf("# %s: %d frames, all invariants hold\n", c.Path, len(c.Records))
	} else {
		ew.printf("# %s: %d frames, %d violations (%s)\n", c.Path, len(c.Records), len(vs), strings.Join(parts, ", "))
	}
	return ew.err
}

func firstFrame(v Violation) int {
	if len(v.Frames) == 0 {
		return 0
	}
	m := v.Frames[0]
	for _, f := range v.Frames {
		m = min(m, f)
	}
	return m
}
