package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
	rview "github.com/rbcast/rbcast/reliable/view"
)

// A group with views (reliable.Config.Views, docs/membership.md) runs a
// membership core per process (reliable/view: a fresh PBP core per view,
// and reliable/vtotal above it for Agreed and Safe). Its re-run is of one
// process — one MAC and incarnation — which holds one member id from the
// view that admits it on: -node names it by that id. The core is built
// by reliable.NewViewCore, as the runtime builds it, from what the
// process's ViewJoin frames carry (incarnation, nonce, config hash,
// requested id, MTU) and the settings the capture does not carry, which
// come from SimOptions or are inferred (simulateViews says how, in the
// notes).

// ViewOrder is the delivery level of a group with views.
type ViewOrder uint8

const (
	// ViewOrderAuto: from the process's Join (its config hash tells FIFO
	// from total order) and the frames (Safe's held reports).
	ViewOrderAuto ViewOrder = iota
	ViewFIFO
	ViewAgreed
	ViewSafe
)

func (o ViewOrder) String() string {
	switch o {
	case ViewFIFO:
		return "fifo"
	case ViewAgreed:
		return "agreed"
	case ViewSafe:
		return "safe"
	}
	return "auto"
}

// SimViews is how a process of a group with views was re-run.
type SimViews struct {
	Member frame.MemberID
	Order  ViewOrder
	// Config and Process are what reliable.NewViewCore built the core
	// from.
	Config  reliable.Config
	Process reliable.ViewProcess
	// Join is the frame number of the process's first ViewJoin.
	Join int
}

// The layer reliable/vtotal puts a kind byte before every message it
// sends through the FIFO group (docs/membership.md, "Agreed over views"):
// the application's data (Agreed; Safe's, revision 4, kind 4), the
// orderer's order messages, Safe's held reports (up to revision 2).
const (
	vtotalData  = 1
	vtotalOrder = 2
	vtotalHeld  = 3
	vtotalSafe  = 4
)

// viewProc is one process of a group with views seen in a capture: a MAC
// and incarnation under one member id.
type viewProc struct {
	group uint32
	id    frame.MemberID
	mac   [6]byte
	inc   uint32
	views []uint32 // the views whose commits list it
	first int      // the first frame that names it
}

func (p *viewProc) String() string {
	s := fmt.Sprintf("%v incarnation %d", net.HardwareAddr(p.mac[:]), p.inc)
	if len(p.views) > 0 {
		s += fmt.Sprintf(" (views %s)", formatViewIDs(p.views))
	}
	return s
}

func formatViewIDs(ids []uint32) string {
	var b strings.Builder
	for i, v := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, v)
	}
	return b.String()
}

// hasViews reports whether the capture (opts' group and interface, if
// given) carries a group with views: view frames, or frames of a view.
func hasViews(c *Capture, opts SimOptions) bool {
	for i := range c.Records {
		r := &c.Records[i]
		if r.View == nil || opts.Group != nil && r.View.Group() != *opts.Group || opts.Iface >= 0 && r.Iface != opts.Iface {
			continue
		}
		// A Datagram of view 0 is a registered group's (PBP's Unreliable
		// level): views number theirs from 1; a ViewRelay of view 0 a
		// static group's relay (pbp.Config.Relay).
		if invariant.IsViewFrame(r.View) || r.View.ViewID() != 0 {
			return true
		}
	}
	return false
}

// viewProcesses lists the processes of groups with views in c: every
// member a ViewCommit lists, and every sender of a frame of a view.
func viewProcesses(c *Capture) []*viewProc {
	var procs []*viewProc
	find := func(group uint32, id frame.MemberID, mac [6]byte, inc uint32, n int) *viewProc {
		for _, p := range procs {
			if p.group == group && p.id == id && p.mac == mac && p.inc == inc {
				return p
			}
		}
		p := &viewProc{group: group, id: id, mac: mac, inc: inc, first: n}
		procs = append(procs, p)
		return p
	}
	for i := range c.Records {
		r := &c.Records[i]
		v := r.View
		if v == nil {
			continue
		}
		if v.Type() == frame.ViewCommit {
			ml := v.ViewMembers()
			for k := range ml.Len() {
				m := ml.At(k)
				p := find(v.Group(), m.ID, m.MAC, m.Incarnation, r.N)
				if !slices.Contains(p.views, v.ViewNext()) {
					p.views = append(p.views, v.ViewNext())
				}
			}
			continue
		}
		if v.ViewID() != 0 && v.Sender() != frame.NoMember {
			find(v.Group(), v.Sender(), r.Src, v.Incarnation(), r.N)
		}
	}
	for _, p := range procs {
		slices.Sort(p.views)
	}
	return procs
}

// joinersNeverAdmitted describes the processes that sent ViewJoins and
// are in no view of the capture.
func joinersNeverAdmitted(c *Capture, procs []*viewProc) string {
	type key struct {
		mac [6]byte
		inc uint32
	}
	var seen []key
	var out []string
	for i := range c.Records {
		r := &c.Records[i]
		if r.View == nil || r.View.Type() != frame.ViewJoin {
			continue
		}
		k := key{r.Src, r.View.Incarnation()}
		if slices.Contains(seen, k) {
			continue
		}
		seen = append(seen, k)
		admitted := false
		for _, p := range procs {
			admitted = admitted || p.mac == k.mac && p.inc == k.inc
		}
		if !admitted {
			j := r.View.ViewJoin()
			want := "any id"
			if j.Requested != frame.NoMember {
				want = fmt.Sprintf("id %d", j.Requested)
			}
			out = append(out, fmt.Sprintf("%v incarnation %d asking for %s (frame %d)", net.HardwareAddr(k.mac[:]), k.inc, want, r.N))
		}
	}
	return strings.Join(out, "; ")
}

// pickViewProcess finds the process opts.Node names.
func pickViewProcess(c *Capture, opts SimOptions) (*viewProc, error) {
	all := viewProcesses(c)
	var cands []*viewProc
	for _, p := range all {
		if p.id == opts.Node && (opts.Group == nil || p.group == *opts.Group) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "member %d never joined a view in %s: no ViewCommit lists it and no frame of a view comes from it", opts.Node, c.Path)
		var ids []string
		for _, p := range all {
			if opts.Group == nil || p.group == *opts.Group {
				ids = append(ids, fmt.Sprintf("%d=%v", p.id, p))
			}
		}
		if len(ids) > 0 {
			fmt.Fprintf(&b, "; the members of its views are %s", strings.Join(ids, ", "))
		} else {
			b.WriteString("; the capture holds no view of the group")
		}
		if j := joinersNeverAdmitted(c, all); j != "" {
			fmt.Fprintf(&b, "; processes that asked to join and are in no view: %s", j)
		}
		return nil, fmt.Errorf("%s", b.String())
	}
	if opts.Incarnation != 0 {
		var incs []string
		k := 0
		for _, p := range cands {
			incs = append(incs, fmt.Sprint(p.inc))
			if p.inc == opts.Incarnation {
				cands[k] = p
				k++
			}
		}
		if k == 0 {
			return nil, fmt.Errorf("member %d has no incarnation %d in %s; its incarnations are %s", opts.Node, opts.Incarnation, c.Path, strings.Join(incs, ", "))
		}
		cands = cands[:k]
	}
	if len(cands) > 1 && opts.Iface >= 0 && opts.Iface < len(c.Interfaces) && c.Interfaces[opts.Iface].MAC != [6]byte{} {
		mac := c.Interfaces[opts.Iface].MAC
		k := 0
		for _, p := range cands {
			if p.mac == mac {
				cands[k] = p
				k++
			}
		}
		if k > 0 {
			cands = cands[:k]
		}
	}
	if len(cands) > 1 {
		var ps []string
		groups := false
		for _, p := range cands {
			ps = append(ps, fmt.Sprintf("group %d %v", p.group, p))
			groups = groups || p.group != cands[0].group
		}
		pick := "-incarnation"
		if groups {
			pick = "-group (and -incarnation)"
		}
		return nil, fmt.Errorf("member %d was %d processes in %s: %s; pick one with %s", opts.Node, len(cands), c.Path, strings.Join(ps, "; "), pick)
	}
	return cands[0], nil
}

// pickViewInterface is the interface with the process's MAC, or the only
// one, or opts.Iface.
func pickViewInterface(c *Capture, opts SimOptions, p *viewProc) (int, error) {
	if opts.Iface >= 0 {
		if opts.Iface >= len(c.Interfaces) {
			return 0, fmt.Errorf("interface %d does not exist; %s has %d (%s)", opts.Iface, c.Path, len(c.Interfaces), listInterfaces(c))
		}
		return opts.Iface, nil
	}
	found := -1
	for i := range c.Interfaces {
		if c.Interfaces[i].MAC == p.mac {
			if found >= 0 {
				return 0, fmt.Errorf("interfaces %d and %d both have member %d's MAC %v; pick one with -iface", found, i, p.id, net.HardwareAddr(p.mac[:]))
			}
			found = i
		}
	}
	switch {
	case found >= 0:
		return found, nil
	case len(c.Interfaces) == 1:
		return 0, nil
	}
	return 0, fmt.Errorf("no interface of %s has member %d's MAC %v, and there are %d (%s); pick one with -iface", c.Path, p.id, net.HardwareAddr(p.mac[:]), len(c.Interfaces), listInterfaces(c))
}

// viewLevelFromFrames tells the level of a group with views from its Data
// frames' messages: under Agreed and Safe every message starts with
// vtotal's kind byte and the orderer sends order messages; only Safe
// sent held reports, up to its revision 2 (revision 3 reads stability
// off the acknowledgement vectors and sends none: then the config hash
// tells). total is false when no well-formed order message
// is seen or a message does not fit vtotal's kinds; safe says whether a
// held report is seen.
func viewLevelFromFrames(c *Capture, group uint32) (total, safe bool, msgs int) {
	fits, ordered := true, false
	for i := range c.Records {
		v := c.Records[i].View
		if v == nil || v.Type() != frame.Data || v.Group() != group || v.ViewID() == 0 || v.Retransmission() {
			continue
		}
		for _, m := range messagesOf(v) {
			msgs++
			switch {
			case len(m) == 0:
				fits = false
			case m[0] == vtotalData, m[0] == vtotalSafe:
			case m[0] == vtotalOrder && len(m) >= 5 && (len(m)-5)%6 == 0 && binary.BigEndian.Uint32(m[1:]) == v.ViewID():
				ordered = true
			case m[0] == vtotalHeld && len(m) == 9 && binary.BigEndian.Uint32(m[1:]) == v.ViewID():
				safe = true
			default:
				fits = false
			}
		}
	}
	return fits && ordered, safe, msgs
}

// viewConfig is the reliable.Config of a process of group at level o
// with opts' settings.
func viewConfig(opts SimOptions, group uint32, o ViewOrder, maxMembers, found int, requested frame.MemberID, unicast bool) reliable.Config {
	cfg := reliable.Config{
		Group: group, Views: true, Size: found, MaxMembers: maxMembers, RequestID: requested,
		Window: opts.Window, MaxPayload: opts.MaxPayload, EtherType: opts.EtherType,
		ResendTimeout: opts.ResendTimeout, NackTimeout: opts.NackTimeout, HeartbeatInterval: opts.HeartbeatInterval,
		FailureTimeout: opts.FailureTimeout, JoinRetry: opts.JoinRetry,
	}
	if o == ViewFIFO {
		cfg.Mode, cfg.AckDelay, cfg.BundleDelay, cfg.Unicast = opts.Mode, opts.AckDelay, opts.BundleDelay, unicast
		return cfg
	}
	cfg.Order, cfg.Safe = reliable.Total, o == ViewSafe
	cfg.Method, cfg.Threshold, cfg.History, cfg.Quorum, cfg.ElectionRetry = opts.Method, opts.Threshold, opts.History, opts.Quorum, opts.ElectionRetry
	return cfg
}

// matchConfigHash returns the levels (FIFO, Agreed, Safe: the hash
// names the level), MaxMembers and, under FIFO, the Unicast setting whose
// configuration, with opts' other settings, hashes to hash at MTU mtu.
func matchConfigHash(opts SimOptions, group uint32, mtu int, hash uint64) (orders []ViewOrder, maxMembers []int, unicast []bool) {
	levels := []ViewOrder{ViewFIFO, ViewAgreed, ViewSafe}
	if opts.ViewOrder != ViewOrderAuto {
		levels = []ViewOrder{opts.ViewOrder}
	}
	lo, hi := 1, min(reliable.MaxViewMembers, frame.MaxViewMembers(mtu))
	if opts.MaxMembers != 0 {
		lo, hi = opts.MaxMembers, opts.MaxMembers
	}
	for _, o := range levels {
		unis := []bool{false}
		if o == ViewFIFO {
			unis = append(unis, true)
		}
		for _, uni := range unis {
			for mm := lo; mm <= hi; mm++ {
				h, err := reliable.ViewConfigHash(viewConfig(opts, group, o, mm, 0, frame.NoMember, uni), mtu)
				if err == nil && h == hash {
					orders, maxMembers, unicast = append(orders, o), append(maxMembers, mm), append(unicast, uni)
				}
			}
		}
	}
	return orders, maxMembers, unicast
}

// simulateViews re-runs one process of a group with views (Simulate's
// ProtocolViews).
func simulateViews(c *Capture, opts SimOptions) (*SimResult, error) {
	if opts.Members != nil {
		return nil, fmt.Errorf("a group with views has no static member list (-members); its views say who the members are")
	}
	vr := &viewsRerun{c: c, opts: opts, res: &SimResult{Protocol: ProtocolViews, CapturedOut: map[frame.Type]int{}}}
	if err := vr.pick(); err != nil {
		return nil, err
	}
	if err := vr.life(); err != nil {
		return nil, err
	}
	vr.settings()
	if err := vr.build(); err != nil {
		return nil, err
	}
	vr.drive()
	return vr.res, nil
}

// viewsRerun is the re-run of one process of a group with views.
type viewsRerun struct {
	c    *Capture
	opts SimOptions
	res  *SimResult

	p     *viewProc
	iface int
	recs  []*Record // the interface's, in capture order
	// The process's life on the interface: recs[lo:hi], its first Join
	// recs[joinAt] (jb its body).
	lo, joinAt, hi int
	join           *Record
	jb             frame.ViewJoinBody
	retry          time.Duration

	level ViewOrder
	cfg   reliable.Config
	mtu   int
	vc    *rview.Core
	hook  *proposeHook
	st    *core.Stepper
	steps []simStep
	own   *ownStream
	rr    *rerun
	sent  sentIndex
	// owed: our captured frames the re-run has yet to send (see out).
	owed          []owedFrame
	left, removed bool
	diverged      int
}

type owedFrame struct {
	r  *Record
	t  clock.Time
	at time.Time
}

// maxDivergeNotes bounds the notes on frames that differ.
const maxDivergeNotes = 20

func (vr *viewsRerun) note(format string, args ...any) {
	vr.res.Notes = append(vr.res.Notes, fmt.Sprintf(format, args...))
}

// diverge notes where the re-run differs from the capture.
func (vr *viewsRerun) diverge(format string, args ...any) {
	if vr.diverged++; vr.diverged <= maxDivergeNotes {
		vr.note(format, args...)
	}
}

// dir is a record's direction: its flags, or without them (tcpdump) from
// its addresses: the process's MAC as the source means sent.
func (vr *viewsRerun) dir(r *Record) Dir {
	if r.Dir != DirUnknown {
		return r.Dir
	}
	if len(r.Data) >= 12 && [6]byte(r.Data[6:12]) == vr.p.mac {
		return DirOut
	}
	if len(r.Data) >= 6 && (r.Data[0]&1 != 0 || [6]byte(r.Data[0:6]) == vr.p.mac) {
		return DirIn
	}
	return DirUnknown
}

// ours reports whether the process sent r; other, whether another
// incarnation of its MAC did.
func (vr *viewsRerun) ours(r *Record) bool {
	return r.View != nil && r.View.Group() == vr.p.group && r.Src == vr.p.mac && vr.dir(r) == DirOut && r.View.Incarnation() == vr.p.inc
}

func (vr *viewsRerun) other(r *Record) bool {
	return r.View != nil && r.View.Group() == vr.p.group && r.Src == vr.p.mac && vr.dir(r) == DirOut && r.View.Incarnation() != vr.p.inc
}

// pick finds the process and its interface.
func (vr *viewsRerun) pick() error {
	p, err := pickViewProcess(vr.c, vr.opts)
	if err != nil {
		return err
	}
	vr.p = p
	if vr.iface, err = pickViewInterface(vr.c, vr.opts, p); err != nil {
		return err
	}
	vr.res.Iface = vr.iface
	if vr.opts.Protocol == ProtocolAuto {
		vr.note("protocol views: the capture carries view frames or frames of a view")
	}
	vr.note("process %v: member %d, first named by frame %d", net.HardwareAddr(p.mac[:]), p.id, p.first)
	if !vr.c.HasDirection {
		vr.note("no direction flags: frames from %v count as sent, others (to broadcast, multicast or %v) as received", net.HardwareAddr(p.mac[:]), net.HardwareAddr(p.mac[:]))
	}
	for i := range vr.c.Records {
		if r := &vr.c.Records[i]; r.Iface == vr.iface {
			vr.recs = append(vr.recs, r)
		}
	}
	return nil
}

// life finds the process's frames on its interface: from its first Join
// to where another incarnation of its MAC takes the interface over.
func (vr *viewsRerun) life() error {
	recs := vr.recs
	vr.joinAt = -1
	for i, r := range recs {
		if vr.ours(r) && r.View.Type() == frame.ViewJoin {
			vr.joinAt = i
			break
		}
	}
	if vr.joinAt < 0 {
		return fmt.Errorf("member %d (%v) sent no ViewJoin on interface %d (%s) of %s: the capture begins after it joined (a flight-recorder dump?), so its Join nonce and the start of its core are unknown; a process is re-run from its first ViewJoin", vr.p.id, vr.p, vr.iface, vr.c.Interfaces[vr.iface].Label(), vr.c.Path)
	}
	vr.join = recs[vr.joinAt]
	vr.jb = vr.join.View.ViewJoin()
	vr.retry = vr.opts.JoinRetry
	if vr.retry == 0 {
		vr.retry = reliable.DefaultJoinRetry
	}
	// Between the last frame one incarnation sent and the first Join of
	// the next, the capture does not say which of the two read a frame;
	// the frames stamped within a join retry of that Join go to the new
	// one (a starting process reads what arrived while its socket
	// opened), the earlier ones to the old one.
	split := func(last, next int) int {
		for i := last + 1; i < next; i++ {
			if !recs[i].Time.Before(recs[next].Time.Add(-vr.retry)) {
				return i
			}
		}
		return next
	}
	vr.lo, vr.hi = 0, len(recs)
	for i := vr.joinAt - 1; i >= 0; i-- {
		if vr.other(recs[i]) {
			vr.lo = split(i, vr.joinAt)
			vr.note("frame %d: another incarnation (%d) of the same MAC sent its last frame; this process's frames begin with frame %d", recs[i].N, recs[i].View.Incarnation(), recs[vr.lo].N)
			break
		}
	}
	for i := vr.joinAt + 1; i < len(recs); i++ {
		if vr.other(recs[i]) {
			last := vr.joinAt
			for k := i - 1; k > vr.joinAt; k-- {
				if vr.ours(recs[k]) {
					last = k
					break
				}
			}
			vr.hi = split(last, i)
			vr.note("frame %d: another incarnation (%d) of the same MAC sends; this process's frames end with frame %d", recs[i].N, recs[i].View.Incarnation(), recs[vr.hi-1].N)
			break
		}
	}
	var prev *Record
	for _, r := range recs[vr.joinAt:vr.hi] {
		if !vr.ours(r) || r.View.Type() != frame.ViewJoin {
			continue
		}
		if j := r.View.ViewJoin(); j != vr.jb {
			vr.note("frame %d: a ViewJoin of this process with nonce %#x, config hash %#x, requested id %d and MTU %d, unlike its first (frame %d); the re-run takes the first", r.N, j.Nonce, j.ConfigHash, j.Requested, j.MTU, vr.join.N)
			break
		}
		if prev != nil && r.Time.Sub(prev.Time) < vr.retry*99/100 {
			vr.note("WARNING: the process's Joins (frames %d and %d) are %v apart, less than the join retry %v: give the live one with -join-retry", prev.N, r.N, r.Time.Sub(prev.Time), vr.retry)
			break
		}
		prev = r
	}
	return nil
}

// settings reconstructs the process's reliable.Config: what its Join
// carries, the level and MaxMembers its config hash shows (else the
// frames), Found from the view it founded; the rest from SimOptions.
func (vr *viewsRerun) settings() {
	opts, jb, join, group := vr.opts, vr.jb, vr.join, vr.p.group
	vr.mtu = int(jb.MTU)
	if opts.MTU != 0 && opts.MTU != vr.mtu {
		vr.note("MTU %d from the command line; the Join frame %d says the process's link had %d", opts.MTU, join.N, vr.mtu)
		vr.mtu = opts.MTU
	}
	level, maxMembers := opts.ViewOrder, opts.MaxMembers
	hashed := ViewOrderAuto // the order the Join's config hash shows
	unicast, hashedUnicast := false, false
	orders, mms, unis := matchConfigHash(opts, group, vr.mtu, jb.ConfigHash)
	switch {
	case len(orders) == 1:
		hashed, maxMembers, unicast, hashedUnicast = orders[0], mms[0], unis[0], true
		how := "as given"
		if opts.MaxMembers == 0 {
			how = "read off the hash"
		}
		uni := ""
		if unicast {
			uni = ", Unicast (a pair sends to the peer's MAC)"
		}
		vr.note("the Join frame %d's config hash %#x is that of these settings at level %s with max-members %d%s (%s)", join.N, jb.ConfigHash, hashed, maxMembers, uni, how)
	case len(orders) > 1:
		var fits []string
		for i, o := range orders {
			u := ""
			if unis[i] {
				u = ", Unicast"
			}
			fits = append(fits, fmt.Sprintf("%s (max-members %d%s)", o, mms[i], u))
		}
		vr.note("the Join frame %d's config hash %#x fits %s: give -level", join.N, jb.ConfigHash, strings.Join(fits, ", "))
	default:
		vr.note("WARNING: the Join frame %d's config hash %#x is not that of these settings under any order and max-members: the live process had other settings (timers, window, mode, max payload, ...); the re-run keeps its hash but may diverge: give the live settings with flags", join.N, jb.ConfigHash)
	}
	total, safe, msgs := viewLevelFromFrames(vr.c, group)
	switch {
	case level == ViewAgreed && safe:
		vr.note("WARNING: members report the order entries they hold (vtotal's held reports), as only Safe does: give -level safe")
	case level != ViewOrderAuto:
	case hashed == ViewFIFO:
		level = ViewFIFO
	case hashed == ViewSafe:
		level = ViewSafe
		vr.note("level safe, read off the config hash")
	case hashed == ViewAgreed:
		level = ViewAgreed
		vr.note("level agreed, read off the config hash")
	case total && safe:
		level = ViewSafe
		vr.note("level safe, from the %d messages of the group's Data frames (vtotal's kind bytes, held reports among them)", msgs)
	case total:
		level = ViewAgreed
		vr.note("level agreed, from the %d messages of the group's Data frames (vtotal's kind bytes, no held report); Safe since revision 3 sends no held reports either, so a capture of a Safe group whose config hash these settings do not match needs -level safe", msgs)
	default:
		level = ViewFIFO
		vr.note("level fifo: the %d messages of the group's Data frames show no total order", msgs)
	}
	if maxMembers == 0 {
		maxMembers = reliable.DefaultMaxMembers
	}
	found := opts.Found
	if found == 0 {
		// Found (rbcastd run -members) is not on the wire. A founder
		// commits view 1 as soon as it has heard Found processes (itself
		// included) and listened FailureTimeout/2, with all it heard: the
		// founding commit's member count founds at the same moment. A
		// process that did not found never reached its Found: the most
		// members a view may have does the same.
		found = maxMembers
		how := "it did not found the group; any number it never reached does the same"
		for _, r := range vr.recs[vr.joinAt:vr.hi] {
			if vr.ours(r) && r.View.Type() == frame.ViewCommit && r.View.ViewBase() == 0 {
				found = r.View.ViewMembers().Len()
				how = fmt.Sprintf("the members of the view %d it founded (frame %d)", r.View.ViewNext(), r.N)
				break
			}
		}
		vr.note("found %d: %s", found, how)
	}
	if level == ViewFIFO && !hashedUnicast {
		// Unicast (pbp.Config.Unicast) shows in a view of two's frames.
		if n := unicastFrame(vr.recs, group); n != 0 {
			unicast = true
			vr.note("Unicast: frame %d goes to a member's own MAC and answers no Nack (a pair's)", n)
		}
	}
	vr.level = level
	vr.cfg = viewConfig(opts, group, level, maxMembers, found, jb.Requested, unicast && level == ViewFIFO)
}

// build makes the core, as the runtime does (reliable.NewViewCore,
// reliable.ViewLevel), and the steps it takes.
func (vr *viewsRerun) build() error {
	proc := reliable.ViewProcess{MAC: vr.p.mac, MTU: vr.mtu, Incarnation: vr.p.inc, Nonce: vr.jb.Nonce, ConfigHash: vr.jb.ConfigHash}
	vc, err := reliable.NewViewCore(vr.cfg, proc)
	if err != nil {
		return fmt.Errorf("member %d: %w", vr.p.id, err)
	}
	vr.vc = vc
	vr.res.Views = &SimViews{Member: vr.p.id, Order: vr.level, Config: vr.cfg, Process: proc, Join: vr.join.N}
	var cc core.Core = vc
	if vr.level != ViewFIFO {
		vr.hook = &proposeHook{Core: vc, internal: vr.internal, accepted: func() { vr.own.made++ }}
		cc = reliable.ViewLevel(vr.cfg, vr.hook)
	}
	vr.st = core.NewStepper(cc, vr.p.group, vr.opts.EtherType)

	start := vr.opts.Start
	if start.IsZero() {
		// The first Tick of a process's core sends its first Join.
		start = vr.join.Time
		vr.note("core started at the Join frame %d", vr.join.N)
	} else {
		vr.note("core started at the given time")
	}
	// The frames read in the core's first turn were captured before its
	// first Join: capture.Wrap records only what the node read, so those
	// of its life on the interface are stepped at the start. A foreign
	// capture (tcpdump) holds everything on the wire and does not say
	// which the process read.
	from := vr.joinAt
	if vr.c.Interfaces[vr.iface].Node != "" {
		from = vr.lo
		if n := vr.joinAt - vr.lo; n > 0 {
			vr.note("%d frames before the Join (frames %d..%d) are stepped at the start: the core read them in its first turn", n, vr.recs[vr.lo].N, vr.recs[vr.joinAt-1].N)
		}
	} else if vr.joinAt > vr.lo {
		vr.note("%d frames before the Join (frames %d..%d) are not stepped: a foreign capture does not say which of them the process read in its first turn", vr.joinAt-vr.lo, vr.recs[vr.lo].N, vr.recs[vr.joinAt-1].N)
	}
	for _, r := range vr.recs[from:vr.hi] {
		at := r.Time
		if at.Before(start) {
			at = start
		}
		if n := len(vr.steps); n > 0 && at.Before(vr.steps[n-1].at) {
			at = vr.steps[n-1].at
		}
		vr.steps = append(vr.steps, simStep{r: r, at: at})
	}
	end := start
	if len(vr.steps) > 0 {
		end = vr.steps[len(vr.steps)-1].at
	}
	vr.res.Start, vr.res.End = start, end
	vr.own = newOwnStream(vr.steps, vr.ours, vr.level != ViewFIFO, vc.Info().MaxMessage)
	vr.sent.etherType = vr.opts.EtherType
	return nil
}

// drive takes the steps through the core (rerun) and ticks it to the end
// of the process's frames.
func (vr *viewsRerun) drive() {
	rr := newRerun(vr.st, vr.res, vr.res.Start, vr.opts.MaxIdleTicks)
	vr.rr = rr
	rr.settle, rr.before, rr.proposes = vr.settle, vr.before, vr.proposes
	if len(vr.steps) == 0 || vr.dir(vr.steps[0].r) != DirIn || !vr.steps[0].at.Equal(vr.res.Start) {
		rr.tick(rr.clk.Core(vr.res.Start))
	}
	rr.run(vr.steps, vr.dir, vr.stepIn, vr.out)
	vr.settle(nil)
	rr.tickUntil(rr.clk.Core(vr.res.End), true)
	if vr.diverged > maxDivergeNotes {
		vr.note("%d of our captured frames differ from the re-run's in all; the first %d are noted above", vr.diverged, maxDivergeNotes)
	}
}

// propose hands one of the application's messages to the core.
func (vr *viewsRerun) propose(t clock.Time, m []byte, safe bool, where string) {
	vr.res.Proposed++
	var err error
	if vr.level == ViewFIFO {
		err = vr.st.Propose(t, m)
	} else {
		err = vr.st.ProposeLevel(t, m, safe)
	}
	if err != nil {
		vr.diverge("%s: the re-run refused a message of ours: %v (diverges)", where, err)
	}
}

// internal runs as vtotal makes an order message or a held report: the
// application's messages before it in our stream were proposed before it
// (live, they waited in the window or the frozen view's queue), so they
// are proposed now.
func (vr *viewsRerun) internal() {
	vr.own.generated(func(m []byte, safe bool) {
		vr.propose(vr.rr.last, m, safe, fmt.Sprintf("before our order message or held report %d", vr.own.made))
	})
}

// before runs before a turn at instant at: when the core cannot send,
// the messages of our frames that go out at that instant waited for it.
func (vr *viewsRerun) before(t clock.Time, at time.Time) {
	view, sent, ok := waiting(vr.vc)
	if !ok {
		return
	}
	propose := func(m []byte, safe bool) {
		vr.propose(t, m, safe, fmt.Sprintf("at %v, where it waited to go out", at.Sub(vr.res.Start)))
	}
	vr.own.burst(at, view, sent, propose)
	if cur := vr.vc.View().ID; cur == view && vr.own.freezing(cur, at) && vr.own.heldAtFreeze(cur, at) {
		// This turn freezes the view's core with frames waiting for
		// room: they go out first in the next view (Freeze hands them
		// over), and were proposed to this one.
		vr.own.nextView(cur, propose)
	}
}

// proposes reports whether our frame r is the application's (a Propose
// of its own, taking its own turn: see rerun.proposes).
func (vr *viewsRerun) proposes(r *Record) bool {
	if !vr.ours(r) || r.View.Retransmission() {
		return false
	}
	switch r.View.Type() {
	case frame.Datagram:
		return true
	case frame.Data:
		return vr.own.hasApp(r.N)
	}
	return false
}

func (vr *viewsRerun) stepIn(r *Record, t clock.Time) string {
	eth, body, err := frame.SplitEthernet(r.Data, vr.opts.EtherType)
	if err != nil {
		return err.Error()
	}
	v, err := frame.ParseGroup(body, vr.p.group)
	if err != nil {
		return err.Error()
	}
	if err := vr.st.StepView(t, eth.Src(), eth.Dst(), v); err != nil {
		return err.Error()
	}
	return ""
}

// out takes a frame the interface sent: the process's Leave,
// GroupRemove, datagrams and the application's messages of its Data are
// what the application did; each of its Data frames and datagrams must be
// one the re-run sends too.
func (vr *viewsRerun) out(r *Record, t clock.Time) {
	if !vr.ours(r) {
		return
	}
	v, rr := r.View, vr.rr
	vr.res.CapturedOut[v.Type()]++
	switch v.Type() {
	case frame.Leave:
		if !vr.left {
			vr.left = true
			vr.st.Leave(t)
			rr.collectAt(t)
			vr.note("frame %d: our Leave: the application left; the re-run leaves here", r.N)
		}
		return
	case frame.GroupRemove:
		if !vr.removed {
			vr.removed = true
			vr.vc.RemoveGroup()
			rr.collectAt(t)
			vr.note("frame %d: our GroupRemove: the application removed the group; the re-run does here", r.N)
		}
		return
	case frame.Datagram:
		if v.Retransmission() {
			return
		}
		rr.cur = r.N
		vr.res.Proposed++
		if err := vr.st.ProposeUnreliable(t, v.Payload()); err != nil {
			vr.diverge("frame %d: our Datagram %d of view %d: the re-run refused it: %v (diverges)", r.N, v.Seq(), v.ViewID(), err)
		}
		rr.collectAt(t)
		vr.checkOwed()
	case frame.Data:
		if v.Retransmission() {
			return
		}
		if vr.own.propose(r.N, func(m []byte, safe bool) {
			vr.propose(t, m, safe, fmt.Sprintf("frame %d, our Data seq %d of view %d", r.N, v.Seq(), v.ViewID()))
		}) {
			rr.cur = r.N
			rr.collectAt(t)
		}
		if _, ok := vr.sent.find(vr.res.Sent, v.Type(), v.ViewID(), v.Seq()); !ok {
			// vtotal's order messages and held reports are proposed
			// while a Ready is taken, so they go out at a later turn:
			// the next one at this instant that sends (a datagram's, or
			// the application's message's when it could not share their
			// frame), else one that takes no input (reliable.Driver takes
			// one at once, a Group when its loop next wakes).
			vr.owed = append(vr.owed, owedFrame{r, t, rr.clk.Wall(t)})
			return
		}
	default:
		return
	}
	vr.check(r)
	vr.checkOwed()
}

// settle takes the turn the owed frames went out in, before step next,
// unless next is ours at their instant and its turn sends them.
func (vr *viewsRerun) settle(next *simStep) {
	if len(vr.owed) == 0 {
		return
	}
	if next != nil && next.at.Equal(vr.owed[0].at) && vr.ours(next.r) {
		v := next.r.View
		switch {
		case v.Type() == frame.Datagram:
			return
		case v.Type() == frame.Data && !v.Retransmission() && vr.own.hasApp(next.r.N):
			// The application's message shares a Ready with them only
			// if it could not share their frame.
			if vr.own.full(vr.owed[len(vr.owed)-1].r.N) {
				return
			}
		case v.Type() != frame.Data:
			return // the same turn's other frames
		}
	}
	vr.rr.tick(vr.owed[0].t)
	vr.checkOwed()
}

// check notes how the re-run's frame differs from our captured r: it
// must have sent one of the same type, view and seq, carrying the same
// messages.
func (vr *viewsRerun) check(r *Record) {
	v := r.View
	s, ok := vr.sent.find(vr.res.Sent, v.Type(), v.ViewID(), v.Seq())
	switch {
	case !ok:
		vr.diverge("frame %d: captured our %v seq %d of view %d; the re-run had not sent it by then (diverges)", r.N, v.Type(), v.Seq(), v.ViewID())
	case !bytes.Equal(s.Body(), v.Body()):
		vr.diverge("frame %d: captured our %v seq %d of view %d; the re-run's carries other messages (diverges)", r.N, v.Type(), v.Seq(), v.ViewID())
	}
}

func (vr *viewsRerun) checkOwed() {
	for _, o := range vr.owed {
		vr.check(o.r)
	}
	vr.owed = vr.owed[:0]
}

// viewInstalled prints a ViewInstalled event with its members.
type viewInstalled struct{ core.Event }

func (e viewInstalled) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "view %d installed, this process member %d:", e.View.ID, e.Member)
	for _, m := range e.View.Members {
		fmt.Fprintf(&b, " %d=%v@%d", m.ID, net.HardwareAddr(m.MAC[:]), m.Incarnation)
	}
	return b.String()
}

// writeViewsHeader prints the first line of a re-run of a process of a
// group with views.
func (r *SimResult) writeViewsHeader(ew *errWriter, c *Capture) {
	v := r.Views
	cfg := v.Config
	ew.printf("# simulate member %d (%v incarnation %d) of group %d on interface %d (%s), views, level %v, max-members %d, found %d, MTU %d, join retry %v\n",
		v.Member, net.HardwareAddr(v.Process.MAC[:]), v.Process.Incarnation, cfg.Group, r.Iface, c.Interfaces[r.Iface].Label(), v.Order,
		cfg.MaxMembers, cfg.Size, v.Process.MTU, durationOr(cfg.JoinRetry, reliable.DefaultJoinRetry))
}

func durationOr(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}
