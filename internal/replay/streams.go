package replay

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
)

// senderKey names one sequence space: a member id in one incarnation.
type senderKey struct {
	ID   frame.MemberID
	Inc  uint32
	View uint32 // a group that changes numbers each view afresh
}

func (k senderKey) String() string {
	if k.View != 0 {
		return fmt.Sprintf("%d.%d@v%d", k.ID, k.Inc, k.View)
	}
	return fmt.Sprintf("%d.%d", k.ID, k.Inc)
}

// Gap is a sequence number a receiver learned was missing (a later one
// arrived, or an Ack, Heartbeat, Nack or Leave named a later end), or
// first saw in a retransmission.
type Gap struct {
	Seq         uint32
	Opened      time.Time
	OpenFrame   int
	Repaired    time.Time // zero if never
	RepairFrame int
	// ViaRetransmit: the seq was first seen in a retransmission, with no
	// earlier sign that it was missing.
	ViaRetransmit bool
	// Discarded (sequencer protocol): an election agreed that the global
	// was never numbered; a later epoch numbers it again.
	Discarded bool
}

// stream is one sender's Data as one receiver view saw it.
type stream struct {
	key      senderKey
	started  bool
	next     uint32          // one past the highest seq known sent
	seen     map[uint32]bool // seqs received
	original map[uint32]bool // seqs received in a first transmission
	missing  map[uint32]*Gap
	gaps     []*Gap
	received int // Data frames, duplicates and retransmissions included
	dups     int
	jumps    []int // frames whose seq jumped implausibly far (not expanded)
	budget   *int  // seqs all streams may still expand into gaps
}

// maxJump bounds how many missing seqs one frame may reveal; a larger jump
// is reported, not expanded (a corrupt or foreign sequence space; a
// correct sender is never more than its window ahead, 256 by default).
// gapBudget bounds the seqs all streams together walk and track, so a
// hostile capture cannot make the analysis slow.
const (
	maxJump   = 1 << 12
	gapBudget = 1 << 26
)

// view is what one receiver saw: an interface's inbound frames, or the
// whole capture when it carries no direction.
type view struct {
	name    string
	iface   int // -1 for the global view
	self    map[senderKey]bool
	streams map[senderKey]*stream
	budget  *int
}

func (v *view) stream(k senderKey, base uint32) *stream {
	s := v.streams[k]
	if s == nil {
		s = &stream{key: k, next: base, started: true, seen: map[uint32]bool{}, original: map[uint32]bool{}, missing: map[uint32]*Gap{}, budget: v.budget}
		v.streams[k] = s
	}
	return s
}

// learn records that the sender has sent everything before end.
func (s *stream) learn(end uint32, r *Record) {
	if !frame.SeqLess(s.next, end) {
		return
	}
	if frame.SeqDiff(end, s.next) > maxJump || *s.budget <= 0 {
		s.jumps = append(s.jumps, r.N)
		return
	}
	*s.budget -= int(end - s.next)
	for q := s.next; q != end; q++ {
		if !s.seen[q] && s.missing[q] == nil {
			*s.budget--
			g := &Gap{Seq: q, Opened: r.Time, OpenFrame: r.N}
			s.missing[q] = g
			s.gaps = append(s.gaps, g)
		}
	}
	s.next = end
}

func (s *stream) data(r *Record) {
	v := r.View
	q := v.Seq()
	s.received++
	if s.seen[q] {
		s.dups++
		return
	}
	if g := s.missing[q]; g != nil {
		g.Repaired, g.RepairFrame = r.Time, r.N
		delete(s.missing, q)
	} else if v.Retransmission() && !frame.SeqLess(q, s.next) {
		s.learn(q, r)
		g := &Gap{Seq: q, Opened: r.Time, OpenFrame: r.N, Repaired: r.Time, RepairFrame: r.N, ViaRetransmit: true}
		s.gaps = append(s.gaps, g)
	} else {
		s.learn(q, r)
	}
	s.seen[q] = true
	if !v.Retransmission() {
		s.original[q] = true
	}
	if frame.SeqLess(q, s.next) {
		return
	}
	s.next = q + 1
}

// analysis is everything summary and check share.
type analysis struct {
	c      *Capture
	order  []*Record // by time, file order among equal times
	base   map[senderKey]uint32
	macs   map[senderKey][6]byte
	views  []*view
	txs    []*Record // frames as transmitted, each once
	groups map[uint32]int
	// fileGroups counts the file frames (types 0x40–0x4F) by group.
	fileGroups map[uint32]int
	seq        *seqAnalysis
	// fromBase: the ViewCommits of a group that changes, by the view
	// they change from (a view's streams are owed up to their cuts, and
	// only to the members that move on).
	fromBase map[uint32][]*frame.ViewCommitBody
	// seqSenders: members (in an incarnation) that sent sequencer frames.
	seqSenders map[senderKey]bool
}

// isPBP reports a frame of PBP: one of its types, and not the Leave of a
// member of a total-order group.
func (a *analysis) isPBP(v frame.View) bool {
	if !isPBPType(v.Type()) {
		return false
	}
	return v.Type() != frame.Leave || !a.seqSenders[senderKey{v.Sender(), v.Incarnation(), v.ViewID()}]
}

func analyse(c *Capture) *analysis {
	a := &analysis{c: c, base: map[senderKey]uint32{}, macs: map[senderKey][6]byte{}, groups: map[uint32]int{}, fileGroups: map[uint32]int{}, seqSenders: map[senderKey]bool{}}
	for i := range c.Records {
		a.order = append(a.order, &c.Records[i])
		if v := c.Records[i].View; v != nil && isSeqType(v.Type()) {
			a.seqSenders[senderKey{v.Sender(), v.Incarnation(), v.ViewID()}] = true
		}
	}
	sort.SliceStable(a.order, func(i, j int) bool { return a.order[i].Time.Before(a.order[j].Time) })
	// PBP's analyses see only PBP's frames: not the sequencer's, nor a
	// Leave of a member of a total-order group (its ack vector is a
	// delivered cursor).
	pbpFrame := func(v frame.View) bool { return a.isPBP(v) }

	// Baseline of each sequence space: its lowest Data seq, or a lower
	// ack for its id (the receivers' exp_seqno before the first delivery).
	minAck := map[frame.MemberID]uint32{}
	hasOut := map[senderKey]bool{}
	for _, r := range a.order {
		v := r.View
		if v == nil {
			continue
		}
		if invariant.IsFileType(v.Type()) {
			a.fileGroups[v.Group()]++
		} else {
			a.groups[v.Group()]++
		}
		k := senderKey{v.Sender(), v.Incarnation(), v.ViewID()}
		if _, ok := a.macs[k]; !ok {
			a.macs[k] = r.Src
		}
		if r.Dir == DirOut {
			hasOut[k] = true
		}
		if v.Type() == frame.Data {
			if b, ok := a.base[k]; !ok || frame.SeqLess(v.Seq(), b) {
				a.base[k] = v.Seq()
			}
		}
		if !pbpFrame(v) {
			continue // the sequencer's ack vector is a delivered cursor
		}
		for i := range v.AckCount() {
			id := frame.MemberID(int(v.AckBase()) + i)
			if id == v.Sender() {
				continue
			}
			if m, ok := minAck[id]; !ok || frame.SeqLess(v.Ack(i), m) {
				minAck[id] = v.Ack(i)
			}
		}
	}
	for k, b := range a.base {
		if m, ok := minAck[k.ID]; ok && frame.SeqLess(m, b) && frame.SeqDiff(b, m) < maxJump {
			a.base[k] = m
		}
	}

	// Transmissions: outbound records; records without direction; and
	// inbound copies of senders whose own interface was not captured,
	// once per distinct frame.
	seenTx := map[[32]byte]bool{}
	for _, r := range a.order {
		switch {
		case r.Dir == DirOut || r.Dir == DirUnknown:
			a.txs = append(a.txs, r)
		case r.View != nil && !hasOut[senderKey{r.View.Sender(), r.View.Incarnation(), r.View.ViewID()}]:
			h := sha256.Sum256(r.Data)
			if !seenTx[h] {
				seenTx[h] = true
				a.txs = append(a.txs, r)
			}
		}
	}

	// Receiver views.
	budget := gapBudget
	if c.HasDirection {
		for i := range c.Interfaces {
			a.views = append(a.views, &view{name: c.Interfaces[i].Label(), iface: i, self: map[senderKey]bool{}, streams: map[senderKey]*stream{}, budget: &budget})
		}
	} else {
		a.views = append(a.views, &view{name: "capture", iface: -1, self: map[senderKey]bool{}, streams: map[senderKey]*stream{}, budget: &budget})
	}
	for _, r := range a.order {
		if r.View != nil && r.Dir == DirOut && c.HasDirection {
			a.views[r.Iface].self[senderKey{r.View.Sender(), r.View.Incarnation(), r.View.ViewID()}] = true
		}
	}
	for _, r := range a.order {
		v := r.View
		if v == nil {
			continue
		}
		var w *view
		switch {
		case !c.HasDirection:
			w = a.views[0]
		case r.Dir == DirIn:
			w = a.views[r.Iface]
		default:
			continue
		}
		k := senderKey{v.Sender(), v.Incarnation(), v.ViewID()}
		if w.self[k] || k.ID == frame.NoMember || !pbpFrame(v) && v.Type() != frame.ViewRelay {
			continue
		}
		base, ok := a.base[k]
		if !ok && v.Type() != frame.Data {
			// No Data from this sender anywhere: nothing to miss, unless
			// it announces an end.
			base = 0
			if v.Type() == frame.Leave {
				base = v.Seq()
			} else {
				base = v.Seq() + 1
			}
			a.base[k] = base
		}
		switch v.Type() {
		case frame.ViewRelay:
			// A departing member's frame relayed to those that miss it
			// (reliable/view): as good as the frame.
			in := v.RelayFrame()
			if in == nil || in.Type() != frame.Data {
				continue
			}
			ik := senderKey{in.Sender(), in.Incarnation(), in.ViewID()}
			if w.self[ik] {
				continue
			}
			ib, ok := a.base[ik]
			if !ok {
				ib = in.Seq()
				a.base[ik] = ib
			}
			relayed := *r
			relayed.View = in
			w.stream(ik, ib).data(&relayed)
		case frame.Data:
			w.stream(k, base).data(r)
		case frame.Ack, frame.Heartbeat, frame.Nack:
			w.stream(k, base).learn(v.Seq()+1, r)
		case frame.Leave:
			w.stream(k, base).learn(v.Seq(), r)
		}
	}
	a.fromBase = map[uint32][]*frame.ViewCommitBody{}
	seenCommit := map[uint32]bool{}
	for _, r := range a.order {
		if v := r.View; v != nil && v.Type() == frame.ViewCommit && !seenCommit[v.ViewNext()] {
			seenCommit[v.ViewNext()] = true
			_, b := v.Decode()
			cb := b.(*frame.ViewCommitBody)
			a.fromBase[cb.Base] = append(a.fromBase[cb.Base], cb)
		}
	}
	a.seq = analyseSeq(c, a)
	return a
}

// owed reports whether seq of stream k is owed at receiver view w. In a
// group that changes, a view's streams are owed only up to each sender's
// cut in the commit that ends the view, and only to the members that move
// on with that commit: a member left out of it (crashed, removed, left)
// owes nothing, nor does a process that was no member of the view (a
// restarted one, with a new incarnation). Without a commit from the view
// (the capture's last view) everything is owed, as in a group that never
// changes; so is everything of view 0.
func (a *analysis) owed(w *view, k senderKey, seq uint32) bool {
	commits := a.fromBase[k.View]
	if k.View == 0 || len(commits) == 0 {
		return true
	}
	var self senderKey
	if w.iface >= 0 {
		found := false
		for s := range w.self {
			if s.View == k.View && s.ID != frame.NoMember {
				self, found = s, true
				break
			}
		}
		if !found {
			return false // the interface's process was no member of the view
		}
	}
	for _, cb := range commits {
		if w.iface >= 0 && !listed(cb.Members, self.ID, self.Inc) {
			continue
		}
		for _, x := range cb.Cuts {
			if x.Member == k.ID && frame.SeqLess(seq, x.Cut) {
				return true
			}
		}
	}
	return false
}

func listed(ms []frame.MemberInfo, id frame.MemberID, inc uint32) bool {
	for _, m := range ms {
		if m.ID == id && m.Incarnation == inc {
			return true
		}
	}
	return false
}

// majorityGroup is the most common group of decoded frames but the file
// frames.
func (a *analysis) majorityGroup() (uint32, bool) { return majority(a.groups) }

// majorityFilesGroup is the most common group of the file frames (rbcastd
// sends them in a group of their own).
func (a *analysis) majorityFilesGroup() (uint32, bool) { return majority(a.fileGroups) }

func majority(groups map[uint32]int) (uint32, bool) {
	best, n := uint32(0), 0
	for g, k := range groups {
		if k > n || (k == n && g < best) {
			best, n = g, k
		}
	}
	return best, n > 0
}

func sortedKeys[V any](m map[senderKey]V) []senderKey {
	keys := make([]senderKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ID != keys[j].ID {
			return keys[i].ID < keys[j].ID
		}
		return keys[i].Inc < keys[j].Inc
	})
	return keys
}
