package pbp

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
)

// Time and Duration are the cores' shared clock types (package clock):
// a monotonic instant and a span in nanoseconds, supplied by the caller.
type (
	Time     = clock.Time
	Duration = clock.Duration
)

// Units of Duration.
const (
	Nanosecond  = clock.Nanosecond
	Microsecond = clock.Microsecond
	Millisecond = clock.Millisecond
	Second      = clock.Second
)

// Mode selects how lost frames are repaired.
type Mode uint8

const (
	// PBP2 is the negative-acknowledgement protocol (thesis §3.2, figs.
	// 3.8–3.10): receivers that see a gap ask the sender for the missing
	// frames with a Nack. The default.
	PBP2 Mode = iota
	// PBP1 is the positive-acknowledgement protocol (thesis §3.1, figs.
	// 3.1–3.6): a sender that is not acknowledged in time retransmits its
	// whole outstanding window.
	PBP1
)

func (m Mode) String() string {
	switch m {
	case PBP2:
		return "PBP2"
	case PBP1:
		return "PBP1"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Defaults for zero Config fields. The thesis used 150 ms ack and 300 ms
// resend timeouts on 10 Mb/s Ethernet (§3.1.3); a switched gigabit segment
// has round trips near 100 µs, so ours are scaled down but stay one to two
// orders of magnitude above a round trip, so a busy receiver is not
// mistaken for a lossy one.
const (
	// DefaultWindowPBP2 is PBP2's send window. The thesis measured its best
	// throughput with 128 (fig. 4.3: 1.105 MB/s of 1.25 at one receiver,
	// 10 Mb/s); on a segment 1000× faster a repair round trip is a larger
	// share of a window, and 256 carries PBP2 through it (docs/protocols.md,
	// "The default window is 256 frames"). On a 1 Gbit/s port a window of
	// full frames is 3.1 ms of queue that repairs wait behind, and 128
	// does better there (same place); set Window 128 on such links.
	DefaultWindowPBP2 = 256
	// DefaultWindowPBP1 is PBP1's: the thesis's usual 16 (§3.1.1). PBP1
	// retransmits the whole window on a timeout, so a large one costs a
	// burst of duplicates per loss.
	DefaultWindowPBP1 = 16
	// MaxWindow bounds Window: receivers keep a reorder ring of the
	// window's size (rounded up to a power of two) per member.
	MaxWindow = 1 << 15

	DefaultMTU               = 1500
	DefaultAckDelay          = 1 * Millisecond
	DefaultResendTimeoutPBP1 = 5 * Millisecond
	DefaultResendTimeoutPBP2 = 10 * Millisecond
	DefaultNackTimeout       = 4 * Millisecond
	DefaultHeartbeatInterval = 100 * Millisecond
	DefaultFailureTimeout    = 2 * Second
)

// Config is one member's view of its group.
type Config struct {
	Group uint32
	Self  frame.MemberID
	// Members is the static member list, Self included: id, unicast MAC
	// and incarnation of each (registration fills it later; its Start
	// frame carries exactly these). Frames whose sender id, incarnation or
	// source MAC disagree with it are dropped and counted.
	Members []frame.MemberInfo
	Mode    Mode
	// Window is the most frames a member may have sent and not
	// yet seen acknowledged by every live member. Every member must use
	// the same value. 0 means DefaultWindowPBP2 or DefaultWindowPBP1.
	Window int
	// MTU is the link's MTU; 0 means DefaultMTU. Frames never exceed it.
	MTU int
	// MaxPayload lowers the largest message (or bundle) below what the MTU
	// allows; 0 means frame.MaxPayload(MTU, ack vector length, 0).
	MaxPayload int
	// InitialSeq is the sequence number of every member's first message.
	// All members must agree on it; no frame carries it (registration's
	// Start does not). The runtime (package reliable) always uses 0, with
	// static members and after registration alike; the thesis starts at 1
	// after a handshake message 0. Other values serve tests of the wrap.
	InitialSeq uint32
	// EtherType of the frames built; 0 means frame.EtherType.
	EtherType uint16
	// Dst is the destination of group frames: zero means broadcast, or a
	// group multicast address.
	Dst [6]byte
	// Unicast: in a group of exactly two members, the group's frames
	// (Data, Ack, Heartbeat, Leave, Datagram, ViewRelay) go to the other
	// member's MAC instead of Dst, so a switch forwards each to one port
	// instead of flooding it. With one member or more than two it does
	// nothing (Dst is used): a view of three members under the same
	// setting broadcasts again. Receivers take a frame either way (the
	// destination tells no frame from a repair; recv.go, accept).
	Unicast bool
	// ViewID is the view this core runs (reliable/view): its frames carry
	// it, and frames of another view are refused. 0 for a group that never
	// changes.
	ViewID uint32
	// Retain keeps a copy of the last Window frames delivered from each
	// member, so that a view change can relay what a departing member sent
	// to the members that did not get it (Retained). It costs one copy of
	// every delivered message.
	Retain bool
	// Relay (a group of fixed membership, ViewID 0): a member silent for
	// half the failure timeout has the frames it sent relayed by the
	// members that delivered them to those that lack them, before they
	// remove it (relay.go), so that every survivor delivers what any
	// survivor delivered of a member that dies with frames on the wire.
	// It keeps copies as Retain does, and the largest message leaves room
	// for the relay's wrapping (4 bytes and a frame header without an ack
	// vector). Every member of a group sets it alike.
	Relay bool
	// PromptAcks: a layer above waits for every member to hold each
	// frame (Safe, from the acknowledgement matrix), so the members
	// acknowledge at once what this member asks for (FlagAckRequest),
	// and it asks for it where a wait would show: on a Data frame sent
	// with nothing else in flight (a lone message), every half window
	// of a stream, on its retransmissions, and with a
	// probe (an Ack asking for acks) once it stops sending with frames
	// after the last one it asked for and none waiting for window room
	// (acks.go, promptTail). Every
	// member of a group sets it alike.
	PromptAcks bool
	// AnswerAckRequests: the members acknowledge at once what a sender
	// asks for, as under PromptAcks, but a sender asks only for the
	// messages proposed with ProposePrompt (a Safe message in an Agreed
	// group, and the order message that places it): a group whose layer
	// above waits for some messages to be held by every member, and not
	// for the others. A frame that does not ask costs nothing more. Every
	// member of a group sets it alike (one that does not only answers
	// later, after AckDelay).
	AnswerAckRequests bool

	// AckDelay: a plain Ack goes out this long after the first receipt not
	// yet acknowledged, unless a frame of ours carried the ack first.
	AckDelay Duration
	// ResendTimeout: with messages outstanding and no progress of the
	// window for this long, PBP1 retransmits the outstanding window and
	// PBP2 sends an Ack naming its last sequence number, so receivers see
	// a lost tail (thesis fig. 3.9).
	ResendTimeout Duration
	// NackTimeout (PBP2): the nack timer's scale. A receiver still
	// missing frames one repair timeout after asking (srtt + 4·rttvar of
	// its repair round trips with that sender, within [NackTimeout/16,
	// min(max(NackTimeout, 2·srtt), 8·NackTimeout)]; NackTimeout until
	// measured; doubled, up to 8×, while the sender is silent) asks again
	// for the frames it last asked for at least half a repair timeout
	// ago; a frame whose retransmission to us was overtaken is asked for
	// again at once. A sender answers one member's Nack at its MAC, and a
	// second member's within NackTimeout/2 by broadcast, holding further
	// ones.
	NackTimeout Duration
	// HeartbeatInterval: a member that has sent nothing for this long
	// sends a Heartbeat.
	HeartbeatInterval Duration
	// FailureTimeout: a member heard from not at all for this long is
	// removed; from then on it counts as having acknowledged everything.
	FailureTimeout Duration
	// BundleDelay: how long a lone queued message may wait for others to
	// share its frame. 0 (the default) never delays: what Propose queued
	// before the next Ready travels together, nothing waits longer.
	BundleDelay Duration
}

// ErrConfig is wrapped by every error New returns about a bad Config.
var ErrConfig = errors.New("pbp: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// settings is a validated Config with defaults filled in, plus what is
// derived from it.
type settings struct {
	Config
	ackBase    frame.MemberID
	span       int    // ack vector entries: max id - min id + 1
	selfOff    uint   // where our entry starts in an ack vector, in bytes
	ackShape   uint32 // frame.View.AckShape of our ack vectors: ackBase, span
	linkMax    int    // largest body a frame can carry at this MTU
	maxPayload int    // largest message or bundle
	ringSize   uint32 // reorder rings: a power of two >= Window
	histSize   uint32 // history: a power of two >= 2*Window: Window frames
	// outstanding and Window more waiting for room
	etherType uint16
	dst       [6]byte // where group frames go: Dst, or the peer's MAC (Unicast)
	selfMAC   [6]byte
	selfInc   uint32
}

// answerAsks: a frame that asks for a prompt acknowledgement gets one
// in the next Ready.
func (c Config) answerAsks() bool { return c.PromptAcks || c.AnswerAckRequests }

// withDefaults returns c with every zero field that has a default set to
// it: the one place PBP's defaults are resolved.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindowPBP2
		if c.Mode == PBP1 {
			c.Window = DefaultWindowPBP1
		}
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.EtherType == 0 {
		c.EtherType = frame.EtherType
	}
	if c.Dst == [6]byte{} {
		c.Dst = frame.Broadcast
	}
	resend := DefaultResendTimeoutPBP2
	if c.Mode == PBP1 {
		resend = DefaultResendTimeoutPBP1
	}
	for _, d := range []struct {
		d   *Duration
		def Duration
	}{
		{&c.AckDelay, DefaultAckDelay}, {&c.ResendTimeout, resend}, {&c.NackTimeout, DefaultNackTimeout},
		{&c.HeartbeatInterval, DefaultHeartbeatInterval}, {&c.FailureTimeout, DefaultFailureTimeout},
	} {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	return c
}

// Shared returns the settings every member of a group must share, with
// the defaults resolved: Mode, Window, MTU, MaxPayload, InitialSeq,
// EtherType, Dst and the timers but BundleDelay (each member's own).
// Registration hashes it, so a joiner configured otherwise is refused.
func (c Config) Shared() Config {
	c = c.withDefaults()
	c.Self, c.Members, c.BundleDelay, c.ViewID, c.Retain, c.Relay = 0, nil, 0, 0, false, false
	return c
}

func (c Config) validate() (settings, error) {
	s := settings{Config: c.withDefaults()}
	if c.Mode != PBP1 && c.Mode != PBP2 {
		return s, configErr("Mode is %v, want PBP1 or PBP2", c.Mode)
	}
	if len(c.Members) < 1 {
		return s, configErr("Members is empty; it must list every member, Self (%d) included", c.Self)
	}
	lo, hi := c.Members[0].ID, c.Members[0].ID
	self := -1
	for i, m := range c.Members {
		if m.ID == frame.NoMember {
			return s, configErr("Members[%d] has id 0x%04x, reserved for 'no member'", i, uint16(m.ID))
		}
		if m.MAC[0]&1 != 0 || m.MAC == [6]byte{} {
			return s, configErr("Members[%d] (id %d) has MAC %x, want a unicast address", i, m.ID, m.MAC)
		}
		for j := range i {
			if c.Members[j].ID == m.ID {
				return s, configErr("Members[%d] and Members[%d] both have id %d", j, i, m.ID)
			}
			if c.Members[j].MAC == m.MAC {
				return s, configErr("Members[%d] and Members[%d] both have MAC %x", j, i, m.MAC)
			}
		}
		lo, hi = min(lo, m.ID), max(hi, m.ID)
		if m.ID == c.Self {
			self = i
		}
	}
	if self < 0 {
		return s, configErr("Self (%d) is not in Members", c.Self)
	}
	s.selfMAC, s.selfInc = c.Members[self].MAC, c.Members[self].Incarnation
	s.ackBase, s.span = lo, int(hi)-int(lo)+1
	s.selfOff = uint(int(c.Self)-int(lo)) * frame.AckEntryLen
	// A span of 0x10000 entries (ids 0 to 0xffff) wraps into the base
	// here, but no frame holds a vector that long (noteAcks' length test).
	s.ackShape = uint32(lo)<<16 | uint32(s.span)&0xffff

	if s.Window < 1 || s.Window > MaxWindow {
		return s, configErr("Window is %d, want 1..%d", c.Window, MaxWindow)
	}
	s.ringSize = uint32(1) << bits.Len32(uint32(s.Window-1))
	s.histSize = uint32(1) << bits.Len32(uint32(2*s.Window-1))

	if s.MTU < frame.MinMTU {
		return s, configErr("MTU is %d, want at least %d", c.MTU, frame.MinMTU)
	}
	s.linkMax = frame.MaxPayload(s.MTU, s.span, 0)
	// A Nack must hold at least one range: target (2), count (2), range (8).
	if s.linkMax < 12 {
		return s, configErr("MTU %d leaves %d payload bytes with an ack vector of %d entries (member ids %d..%d)", s.MTU, s.linkMax, s.span, lo, hi)
	}
	s.maxPayload = s.linkMax
	if c.MaxPayload < 0 || c.MaxPayload > s.linkMax {
		return s, configErr("MaxPayload is %d, but MTU %d with %d ack entries carries at most %d", c.MaxPayload, s.MTU, s.span, s.linkMax)
	}
	if c.Relay {
		if c.ViewID != 0 {
			return s, configErr("Relay is for a group of fixed membership, not view %d (the view change relays)", c.ViewID)
		}
		// A relay carries a whole frame of the sender's: its base (4),
		// header without acks and CRC around the payload.
		s.maxPayload = s.linkMax - RelayOverhead
		if c.MaxPayload > s.maxPayload {
			return s, configErr("MaxPayload is %d, but with Relay MTU %d with %d ack entries carries at most %d", c.MaxPayload, s.MTU, s.span, s.maxPayload)
		}
	}
	if c.MaxPayload > 0 {
		s.maxPayload = c.MaxPayload
	}

	s.etherType, s.dst = s.EtherType, s.Dst
	if s.dst[0]&1 == 0 {
		return s, configErr("Dst %x is a unicast address; group frames go to broadcast or a multicast group (Unicast sends a group of two to the peer's MAC)", c.Dst)
	}
	if c.Unicast && len(c.Members) == 2 {
		s.dst = c.Members[1-self].MAC
	}

	def := Config{Mode: c.Mode}.withDefaults()
	durations := []struct {
		name   string
		d, def Duration
	}{
		{"AckDelay", s.AckDelay, def.AckDelay},
		{"ResendTimeout", s.ResendTimeout, def.ResendTimeout},
		{"NackTimeout", s.NackTimeout, def.NackTimeout},
		{"HeartbeatInterval", s.HeartbeatInterval, def.HeartbeatInterval},
		{"FailureTimeout", s.FailureTimeout, def.FailureTimeout},
	}
	for _, d := range durations {
		if d.d < 0 {
			return s, configErr("%s is %d ns, want > 0 (0 means %d ns)", d.name, int64(d.d), int64(d.def))
		}
	}
	if s.BundleDelay < 0 {
		return s, configErr("BundleDelay is %d ns, want >= 0", int64(s.BundleDelay))
	}
	if s.FailureTimeout <= s.HeartbeatInterval {
		return s, configErr("FailureTimeout (%d ns) must exceed HeartbeatInterval (%d ns), or idle members are removed", int64(s.FailureTimeout), int64(s.HeartbeatInterval))
	}
	return s, nil
}
