package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
)

// Member states in Status.
const (
	StateAlive     = "alive"     // heard from within half the failure timeout
	StateSuspected = "suspected" // live, but silent for half the failure timeout or more
	StateDead      = "dead"      // removed: failed, stalled or left (Reason says which)
)

// Reasons of a dead member in Status besides the event kinds (failed,
// stalled, left, self removed): not live here before an event says why,
// which only a total-order group shows.
const (
	reasonLeaving         = "leaving"                  // its Leave arrived; MemberLeft waits for its last messages
	reasonSequencerSilent = "sequencer silent or left" // silent past the failure timeout, or its Leave arrived; not removed yet
)

// Status is what `rbcastd status -json` prints and the local API's
// StatusJSON carries.
type Status struct {
	Group   uint32 `json:"group"`
	Self    int    `json:"self"` // -1 until the group has started
	Ready   bool   `json:"ready"`
	Order   string `json:"order"`
	Mode    string `json:"mode"`
	Size    int    `json:"members_expected"`
	Uptime  string `json:"uptime"`
	JoinErr string `json:"join_error,omitempty"`
	// Membership is static (a fixed member list), registered (fixed
	// when it started) or views (it changes: View).
	Membership string `json:"membership"`

	Members []MemberStatus `json:"members"`

	// AckLag is the acknowledgement matrix (under FIFO and over views):
	// per live sender, how far each live member holds its stream as
	// this daemon last heard it, and how many frames that is behind the
	// sender's last (reliable.Stats.Acks). Who lags behind whom.
	AckLag []SenderLag `json:"ack_lag,omitempty"`

	// A group whose membership changes (-membership views): the view
	// installed, its members, and the last changes; and how many views
	// this daemon installed since it started, in every membership (its
	// rejoins' included), the first included.
	View           *ViewStatus `json:"view,omitempty"`
	ViewsInstalled int         `json:"views_installed,omitempty"`

	// An authenticated group (-key-file): the keys and the frames
	// dropped, by reason (docs/auth.md).
	Auth *AuthStatus `json:"auth,omitempty"`

	// Order total only: the sequencer this member follows and its epoch.
	Sequencer *int   `json:"sequencer,omitempty"`
	Epoch     uint32 `json:"epoch,omitempty"`

	// Rates over the last second.
	SentPerSec           float64 `json:"sent_msgs_per_sec"`
	DeliveredPerSec      float64 `json:"delivered_msgs_per_sec"`
	DeliveredBytesPerSec float64 `json:"delivered_bytes_per_sec"`

	Accepted        uint64  `json:"accepted"`        // local Sends accepted
	Unreliable      uint64  `json:"unreliable_sent"` // local SendUnreliables handed to the group
	Sent            uint64  `json:"sent"`            // messages proposed
	Delivered       uint64  `json:"delivered"`
	DataFrames      uint64  `json:"data_frames_sent"`
	Retransmissions uint64  `json:"retransmissions"`
	NacksSent       uint64  `json:"nacks_sent"`
	NacksReceived   uint64  `json:"nacks_received"`
	InFlight        int     `json:"in_flight"`
	Pending         int     `json:"pending"`
	Window          int     `json:"window"`
	Queued          int     `json:"queued"`
	HeldData        uint64  `json:"held_data_frames"`
	RepairP50ms     float64 `json:"repair_p50_ms"`
	RepairP99ms     float64 `json:"repair_p99_ms"`
	KernelDrops     uint64  `json:"kernel_drops"`
	SendRetries     uint64  `json:"link_send_retries"`
	BadFrames       uint64  `json:"bad_frames"`
	// The link's view of the segment: frames the kernel queued for the
	// daemon (with the group filter, its own group's only), frames the
	// link took, and frames it dropped itself (Filtered); and frames of
	// other groups that reached the protocol (none with the kernel
	// filter: docs/groups.md).
	KernelPackets uint64 `json:"kernel_packets"`
	LinkFrames    uint64 `json:"link_frames_received"`
	LinkFiltered  uint64 `json:"link_filtered"`
	// The ring's receive spin (link.Stats): waits it ended with a frame,
	// spins that ended empty, waits that slept at once.
	LinkSpinHits       uint64 `json:"link_spin_hits"`
	LinkSpinMisses     uint64 `json:"link_spin_misses"`
	LinkSpinSkips      uint64 `json:"link_spin_skips"`
	ForeignGroupFrames uint64 `json:"foreign_group_frames"`

	ForeignVersions []ForeignVersion `json:"foreign_versions,omitempty"`
	Clients         int              `json:"clients"`
	Subscribers     int              `json:"subscribers"`

	// A group whose membership changes: how many times the group went
	// on without this daemon and it joined again as a new incarnation,
	// whether it is joining now (Ready is false then), and the last
	// time. The group's counters above (sent, delivered, ...) count
	// from the start of the current membership.
	Rejoins    int           `json:"rejoins"`
	Rejoining  bool          `json:"rejoining,omitempty"`
	LastRejoin *RejoinStatus `json:"last_rejoin,omitempty"`

	// Files: the file dissemination (rbcastd sendfile, recvfile, run
	// -inbox); nil with files off.
	Files *FilesStatus `json:"files,omitempty"`
}

// ViewStatus is the installed view of a group whose membership changes.
type ViewStatus struct {
	ID      uint32             `json:"id"`
	Members []ViewMember       `json:"members"`
	Changes []ViewChange       `json:"changes"` // the last views installed here, oldest first
	Counts  reliable.ViewStats `json:"counters"`
}

// ViewMember is one member of a view: its id, MAC and incarnation (a
// restarted daemon comes back with a new incarnation).
type ViewMember struct {
	ID          int    `json:"id"`
	MAC         string `json:"mac"`
	Addr        string `json:"addr,omitempty"` // over UDP (link/udp): the member's address
	Incarnation uint32 `json:"incarnation"`
}

// addrOf is a link that knows its members' addresses beside their MACs
// (link/udp).
type addrOf interface {
	AddrOf(mac [6]byte) (netip.AddrPort, bool)
}

// memberAddr is the address the link knows for mac, or "".
func memberAddr(l link.Link, mac [6]byte) string {
	for l != nil {
		if a, ok := l.(addrOf); ok {
			if ap, ok := a.AddrOf(mac); ok {
				return ap.String()
			}
			return ""
		}
		w, ok := l.(link.Wrapper)
		if !ok {
			return ""
		}
		l = w.Unwrap()
	}
	return ""
}

// ViewChange is a view installed here: when, and how many members.
type ViewChange struct {
	ID      uint32 `json:"id"`
	At      string `json:"at"`
	Members int    `json:"members"`
}

// SenderLag is one sender's column of the acknowledgement matrix.
type SenderLag struct {
	Sender int `json:"sender"`
	// Last is the sender's next frame as far as known here, Stable the
	// lowest any live member holds (every live member holds the frames
	// before it).
	Last    uint32      `json:"last"`
	Stable  uint32      `json:"stable"`
	Members []MemberLag `json:"members"`
}

// MemberLag is how far one member holds a sender's stream (the next
// frame it expects) and how many frames that is behind the sender's last.
type MemberLag struct {
	Member int    `json:"member"`
	Holds  uint32 `json:"holds"`
	Behind uint32 `json:"behind"`
}

// ackLag is Stats.Acks as Status shows it.
func ackLag(acks []reliable.SenderAcks) []SenderLag {
	var out []SenderLag
	for _, a := range acks {
		l := SenderLag{Sender: int(a.Sender), Last: a.Last, Stable: a.Stable}
		for _, h := range a.Holds {
			l.Members = append(l.Members, MemberLag{Member: int(h.Member), Holds: h.Next, Behind: h.Behind})
		}
		out = append(out, l)
	}
	return out
}

// maxViewChanges is how many view changes Status lists.
const maxViewChanges = 8

// MemberStatus is one member in Status.
type MemberStatus struct {
	ID          int     `json:"id"`
	Self        bool    `json:"self,omitempty"`
	Sequencer   bool    `json:"sequencer,omitempty"`
	State       string  `json:"state"`
	Reason      string  `json:"reason,omitempty"`            // why dead: failed, stalled, left, self removed, leaving, sequencer silent or left
	LastHeardMs float64 `json:"last_heard_ms_ago,omitempty"` // live members only
	// Dead members: when they were removed (wall clock, RFC 3339), and how
	// long they had been silent then; both stay as they were.
	DiedAt              string  `json:"died_at,omitempty"`
	SilentBeforeDeathMs float64 `json:"silent_before_death_ms,omitempty"`
	Delivered           uint64  `json:"delivered"`
	DeliveredBytes      uint64  `json:"delivered_bytes"`
	Repairs             uint64  `json:"repairs"`
	RepairP50ms         float64 `json:"repair_p50_ms"`
	RepairP99ms         float64 `json:"repair_p99_ms"`
}

func membership(c reliable.Config) string {
	switch {
	case c.Views:
		return "views"
	case len(c.Members) > 0:
		return "static"
	}
	return "registered"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Status returns the daemon's status now.
func (d *Daemon) Status() Status {
	s, _, _ := d.status()
	s.Files = d.files.status()
	return s
}

// status is Status, with the group it was made of (nil before the group
// starts and while the daemon joins again) and its Stats.
func (d *Daemon) status() (s Status, st reliable.Stats, g *reliable.Group) {
	s = Status{Group: d.cfg.Group.Group, Self: -1, Order: d.cfg.Group.Order.String(), Mode: modeName(d.cfg.Group),
		Size: d.members(), Uptime: time.Since(d.start).Round(time.Millisecond).String(), Accepted: d.accepted.Load(), Unreliable: d.datagrams.Load(),
		Membership: membership(d.cfg.Group)}
	if d.watch != nil {
		s.ForeignVersions = d.watch.foreignVersions()
	}
	d.mu.Lock()
	s.Clients, s.Subscribers = len(d.conns), len(d.subs)
	if d.joinErr != nil {
		s.JoinErr = d.joinErr.Error()
	}
	s.Rejoining, s.Rejoins = d.rejoining, d.rejoins
	if d.lastGone != nil {
		last := *d.lastGone
		s.LastRejoin = &last
	}
	g = d.g.Load()
	since := d.since
	s.ViewsInstalled = d.viewsBefore
	d.mu.Unlock()
	if g == nil {
		return s, st, nil
	}
	// Members before Stats: a removal changes the member's liveness and
	// records its event in the same turn of the event loop, and a removal
	// stays in Stats.Removals until the member returns, so every member
	// Members shows dead has its event (reason, time) in the Stats taken
	// after. The other way round a removal
	// between the two calls showed a dead member with neither.
	members := g.Members()
	st = g.Stats()
	s.Ready, s.Self = true, int(g.Self())
	// Under Order Total: requests in flight, repair requests as NACKs,
	// answers to them as retransmissions.
	p := st.Protocol
	s.Sent, s.Delivered, s.DataFrames, s.Retransmissions = p.Proposed, p.Delivered, p.Sent, p.Retransmitted
	s.NacksSent, s.NacksReceived, s.InFlight, s.Pending = p.RepairRequests, p.RepairRequestsReceived, p.InFlight, p.Pending
	if st.Order == reliable.Total {
		s.Epoch = p.Epoch
		for _, m := range members {
			if m.Sequencer {
				seqID := int(m.ID)
				s.Sequencer = &seqID
			}
		}
	} else {
		s.Window = p.Window
	}
	s.Queued, s.HeldData = st.Queued, st.HeldData
	s.AckLag = ackLag(st.Acks)
	s.RepairP50ms, s.RepairP99ms = ms(st.RepairP50), ms(st.RepairP99)
	s.KernelDrops, s.SendRetries = st.Link.KernelDrops, st.Link.SendRetries
	s.KernelPackets, s.LinkFrames, s.LinkFiltered = st.Link.KernelPackets, st.Link.FramesReceived, st.Link.Filtered
	s.LinkSpinHits, s.LinkSpinMisses, s.LinkSpinSkips = st.Link.SpinHits, st.Link.SpinMisses, st.Link.SpinSkips
	s.ForeignGroupFrames = st.BadFrames.Group
	b := st.BadFrames
	s.BadFrames = b.NotRbcast + b.Short + b.Length + b.Version + b.Type + b.Flags + b.Group + b.Checksum + b.AckVector + b.Auth + b.Body + b.Other
	s.SentPerSec, s.DeliveredPerSec, s.DeliveredBytesPerSec = d.rates.get()
	if a := st.Auth; a != nil {
		s.Auth = authStatus(a)
		d.rekeyMu.Lock()
		s.Auth.Changes = append([]KeyChange(nil), d.keyChanges...)
		d.rekeyMu.Unlock()
	}
	s.ViewsInstalled += viewsInstalled(st)
	if st.View != nil {
		v := &ViewStatus{ID: st.View.ID, Counts: st.Views}
		for _, m := range st.View.Members {
			v.Members = append(v.Members, ViewMember{ID: int(m.ID), MAC: net.HardwareAddr(m.MAC[:]).String(), Addr: memberAddr(d.watch.Link, m.MAC), Incarnation: m.Incarnation})
		}
		for _, ev := range st.RecentViews[max(len(st.RecentViews)-maxViewChanges, 0):] {
			v.Changes = append(v.Changes, ViewChange{ID: ev.View.ID, At: ev.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Members: len(ev.View.Members)})
		}
		s.View = v
	}

	why, died := removals(st.Removals)
	per := map[frame.MemberID]reliable.MemberStats{}
	for _, m := range st.Members {
		per[m.ID] = m
	}
	now := time.Now()
	half := d.failureTimeout() / 2
	// Under Order Total members talk to the sequencer, not to each other:
	// silence means something only between a member and its sequencer.
	amSequencer := false
	for _, m := range members {
		amSequencer = amSequencer || m.Self && m.Sequencer
	}
	for _, m := range members {
		mst := MemberStatus{ID: int(m.ID), Self: m.Self, Sequencer: m.Sequencer, State: StateAlive}
		watched := st.Order != reliable.Total || amSequencer || m.Sequencer
		if m.Self {
			if !m.Live {
				mst.State, mst.Reason = StateDead, selfReason(st)
			}
			s.Members = append(s.Members, mst)
			continue
		}
		x := per[m.ID]
		mst.Delivered, mst.DeliveredBytes, mst.Repairs = x.Delivered, x.DeliveredBytes, x.Repairs
		mst.RepairP50ms, mst.RepairP99ms = ms(x.RepairP50), ms(x.RepairP99)
		heard := d.watch.lastHeard(m.ID)
		if !heard.IsZero() {
			mst.LastHeardMs = ms(now.Sub(heard))
		}
		switch {
		case !m.Live:
			mst.State, mst.Reason = StateDead, deadReason(why, m)
			if at, ok := died[m.ID]; ok {
				// Frozen at the removal: a dead member's silence since is
				// no news.
				mst.DiedAt, mst.LastHeardMs = at.UTC().Format("2006-01-02T15:04:05.000Z07:00"), 0
				if !heard.IsZero() && heard.Before(at) {
					mst.SilentBeforeDeathMs = ms(at.Sub(heard))
				}
			}
		case !watched:
		case heard.IsZero() && now.Sub(since) > half, !heard.IsZero() && now.Sub(heard) >= half:
			mst.State = StateSuspected
		}
		s.Members = append(s.Members, mst)
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].ID < s.Members[j].ID })
	return s, st, g
}

func modeName(c reliable.Config) string {
	if c.Order == reliable.Total {
		return "sequencer"
	}
	if c.Mode == reliable.PBP1 {
		return "pbp1"
	}
	return "pbp2"
}

// rateSampler turns counters into per-second rates, sampled once a
// second by Run.
type rateSampler struct {
	mu                  sync.Mutex
	at                  time.Time
	sent, deliv, dbytes uint64
	rSent, rDeliv, rB   float64
}

func totalBytes(st reliable.Stats) uint64 {
	var n uint64
	for _, m := range st.Members {
		n += m.DeliveredBytes
	}
	return n
}

func (r *rateSampler) init(st reliable.Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = time.Now()
	r.sent, r.deliv, r.dbytes = st.Protocol.Proposed, st.Protocol.Delivered, totalBytes(st)
}

func (r *rateSampler) sample(st reliable.Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	dt := now.Sub(r.at).Seconds()
	if dt <= 0 {
		return
	}
	sent, deliv, b := st.Protocol.Proposed, st.Protocol.Delivered, totalBytes(st)
	r.rSent, r.rDeliv, r.rB = float64(sent-r.sent)/dt, float64(deliv-r.deliv)/dt, float64(b-r.dbytes)/dt
	r.at, r.sent, r.deliv, r.dbytes = now, sent, deliv, b
}

func (r *rateSampler) get() (sent, deliv, bytes float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rSent, r.rDeliv, r.rB
}

// removals reads each member's removal in force (Stats.Removals, kept
// exact by the runtime however many events it no longer lists): why it
// was removed (the event kind) and when. A MemberReturned forgets an
// earlier removal. SequencerFailed is no removal: a follower that hears
// its sequencer again follows it on without an event, and the sequencer
// is removed, if at all, by a later MemberFailed or MemberLeft.
func removals(rs []reliable.Event) (why map[frame.MemberID]string, died map[frame.MemberID]time.Time) {
	why, died = make(map[frame.MemberID]string, len(rs)), make(map[frame.MemberID]time.Time, len(rs))
	for _, ev := range rs {
		why[ev.Member], died[ev.Member] = ev.Kind.String(), ev.At
	}
	return why, died
}

// deadReason is the Reason of a member Members shows not live. Without
// an event, which only a total-order group shows: a follower stops
// counting a silent sequencer before an election removes it, and a member
// whose Leave arrived is gone before the MemberLeft that waits for its
// last messages to be delivered here.
func deadReason(why map[frame.MemberID]string, m reliable.MemberStatus) string {
	switch r := why[m.ID]; {
	case r != "":
		return r
	case m.Sequencer:
		return reasonSequencerSilent
	default:
		return reasonLeaving
	}
}

// selfReason is the Reason of this member once Members shows it not
// live: it left, or (Total) an election left it out and it halted.
func selfReason(st reliable.Stats) string {
	if st.SelfRemoved != nil {
		return st.SelfRemoved.Kind.String()
	}
	return "left"
}

// AuthReasons are the reasons of AuthStatus.Dropped, as status and the
// metrics list them.
var AuthReasons = []string{"unauthenticated", "algorithm", "unknown_key", "bad_tag", "replay", "too_old", "earlier_incarnation", "own"}

// authStatus is a's keys and counters, without the key changes.
func authStatus(a *auth.Stats) *AuthStatus {
	s := &AuthStatus{Active: fmt.Sprintf("%016x", a.Active), ActiveID: uint8(a.Active >> 56), Rotating: len(a.Accepted) > 1,
		Encrypt: a.Encrypt, Sent: a.Sent, Verified: a.Verified,
		Dropped: map[string]uint64{"unauthenticated": a.Unauthenticated, "algorithm": a.Algorithm, "unknown_key": a.UnknownKey,
			"bad_tag": a.BadTag, "replay": a.Replay, "too_old": a.TooOld, "earlier_incarnation": a.EarlierIncarnation, "own": a.Own},
		MismatchesSent: a.MismatchesSent, MismatchesReceived: a.MismatchesReceived}
	for _, fp := range a.Accepted {
		s.Accepted = append(s.Accepted, fmt.Sprintf("%016x", fp))
	}
	return s
}

// AuthStatus is an authenticated group's keys and counters.
type AuthStatus struct {
	Active             string            `json:"active_key"`    // fingerprint of the key frames are sent with
	ActiveID           uint8             `json:"active_key_id"` // the key id frames carry (the fingerprint's first byte)
	Accepted           []string          `json:"accepted_keys"` // fingerprints frames are verified with (two during a rotation)
	Rotating           bool              `json:"rotating"`      // two keys are accepted: a rotation is under way
	Changes            []KeyChange       `json:"key_changes"`   // the last steps of rotations (rbcastd rekey), oldest first
	Encrypt            bool              `json:"encrypt"`
	Sent               uint64            `json:"sent"`
	Verified           uint64            `json:"verified"`
	Dropped            map[string]uint64 `json:"dropped"` // by reason
	MismatchesSent     uint64            `json:"key_mismatches_sent"`
	MismatchesReceived uint64            `json:"key_mismatches_received"`
}

// ViewName shows a view id with its parts: the number of the view in the
// group's sequence and the member that proposed it (reliable/view).
func ViewName(id uint32) string {
	return fmt.Sprintf("%d (number %d, by member %d)", id, reliable.ViewNumber(id), reliable.ViewProposer(id))
}
