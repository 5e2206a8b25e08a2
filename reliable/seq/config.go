package seq

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

// Method selects how a request reaches the group (the paper's two
// methods, Tanenbaum, Kaashoek & Bal, "Reliable Broadcasting").
type Method uint8

const (
	// Hybrid uses Method1 for requests whose payload is shorter than
	// Config.Threshold and Method2 for the others, as the paper proposes.
	// The default.
	Hybrid Method = iota
	// Method1: the sender sends its request point-to-point to the
	// sequencer, which numbers it and broadcasts it as SeqData. The
	// payload crosses the wire twice, but members receive one frame.
	Method1
	// Method2: the sender broadcasts its request with its unique id; the
	// sequencer broadcasts a short Accept (several share one frame). The
	// payload crosses the wire once, but members receive two frames.
	Method2
)

func (m Method) String() string {
	switch m {
	case Hybrid:
		return "hybrid"
	case Method1:
		return "method1"
	case Method2:
		return "method2"
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// Defaults for zero Config fields; docs/protocols.md ("Sequencer") says
// why each was chosen.
const (
	// DefaultWindow bounds a member's requests proposed and not yet
	// delivered back to it.
	DefaultWindow = 64
	// MaxWindow bounds Window: every member keeps a ring of requests per
	// origin of the window's size (rounded up to a power of two).
	MaxWindow = 1 << 12
	// DefaultHistory is the history buffer: globally numbered messages
	// kept by every member until stable. The sequencer never runs more
	// than History numbers ahead of the slowest live member.
	DefaultHistory = 1024
	// MaxHistory bounds History.
	MaxHistory = 1 << 16
	// DefaultThreshold is the Hybrid switch: payloads of this many bytes
	// or more go by method 2.
	DefaultThreshold = 512

	DefaultMTU               = 1500
	DefaultResendTimeout     = 10 * Millisecond
	DefaultNackTimeout       = 4 * Millisecond
	DefaultHeartbeatInterval = 100 * Millisecond
	DefaultFailureTimeout    = 2 * Second
	DefaultElectionRetry     = 20 * Millisecond
	DefaultInitialEpoch      = 1
)

// Config is one member's view of its group.
type Config struct {
	Group uint32
	Self  frame.MemberID
	// Members is the static member list, Self included (id, unicast MAC,
	// incarnation). The first sequencer is the lowest id. Frames whose
	// sender id, incarnation or source MAC disagree with it are dropped.
	Members []frame.MemberInfo
	// Method and Threshold must be the same at every member: the
	// sequencer answers a request with an Accept when its payload is
	// Threshold bytes or more (0 means DefaultThreshold), else with
	// SeqData. Method1 and Method2 force one method.
	Method    Method
	Threshold int
	// Window is the most requests a member may have proposed and not yet
	// seen delivered; more is ErrWindowFull. 0 means DefaultWindow.
	Window int
	// History is the number of globally numbered messages kept for
	// retransmission, a power of two; all members must agree. 0 means
	// DefaultHistory.
	History int
	// MTU is the link's MTU; 0 means DefaultMTU.
	MTU int
	// MaxPayload lowers the largest message (or bundle) below what the
	// MTU allows; 0 means the most a SeqData frame carries.
	MaxPayload int
	// InitialGlobal is the global number of the first message, and
	// InitialEpoch the first sequencer's epoch (0 means 1). All members
	// must agree on both.
	InitialGlobal uint32
	InitialEpoch  uint32
	// EtherType of the frames built; 0 means frame.EtherType.
	EtherType uint16
	// Dst is the destination of group frames: zero means broadcast, or a
	// group multicast address.
	Dst [6]byte

	// ResendTimeout: a request not seen sequenced this long is sent
	// again (doubling without progress, up to 16×).
	ResendTimeout Duration
	// NackTimeout: a member still missing global numbers this long after
	// asking asks again (doubling without progress, up to 8×); a payload
	// whose Accept arrived without its broadcast request is asked for
	// after this long.
	NackTimeout Duration
	// HeartbeatInterval: the sequencer broadcasts a status request when
	// it has broadcast nothing for this long; a member sends the
	// sequencer a status reply when it has sent it nothing for this long.
	HeartbeatInterval Duration
	// FailureTimeout: the sequencer removes a member silent this long
	// (after probing it with status requests, four per heartbeat, from
	// half of it on); members start an election when the sequencer is
	// silent this long.
	FailureTimeout Duration
	// ElectionRetry: election frames are repeated this often until the
	// election ends.
	ElectionRetry Duration
	// Quorum is the number of votes (the candidate's own included) an
	// election needs besides those of every member not silent: 0 means a
	// majority of Members, so that of two sides of a partition at most
	// one elects a sequencer. 1 trusts the failure detector (crash-stop,
	// no partitions): any survivor can carry on, a 2-member group
	// survives a crash. Members whose Leave arrived are not counted: the
	// majority is of the others, and a Quorum set higher than their
	// number is lowered to it.
	Quorum int
	// Resilience says when a numbered message may be delivered (the
	// group must agree on it). SafeMajority, the default: once enough
	// members hold it that every election completing with Quorum votes
	// includes a holder (⌈n/2⌉ members with the default quorum, the
	// sequencer included): a message a sender was told is sequenced is
	// never lost while a majority survives. It costs a round of
	// acknowledgements to the sequencer and its announcement of the safe
	// point. SafeSequencer: at once, as the sequencer numbers it (lost
	// if every holder crashes). Groups of one member, and of two with the
	// default Quorum, behave the same under both (with Quorum 1, two
	// members need n - Quorum + 1 = 2 holders).
	Resilience Resilience
}

// Resilience: see Config.Resilience.
type Resilience uint8

const (
	SafeMajority  Resilience = iota // deliver what enough members hold (default)
	SafeSequencer                   // deliver as soon as the sequencer numbered it
)

func (r Resilience) String() string {
	switch r {
	case SafeMajority:
		return "majority"
	case SafeSequencer:
		return "sequencer"
	}
	return fmt.Sprintf("Resilience(%d)", uint8(r))
}

// ErrConfig is wrapped by every error New returns about a bad Config.
var ErrConfig = errors.New("seq: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// settings is a validated Config with defaults filled in.
type settings struct {
	Config
	linkMax    int // largest SeqData body payload at this MTU
	maxPayload int
	ringSize   uint32 // per-origin request rings
	etherType  uint16
	dst        [6]byte
	selfMAC    [6]byte
	selfInc    uint32
	majority   bool // Quorum was 0: a majority of the members that have not left
}

// ackEntries is the ack vector length of every sequencer frame: two
// entries, the sender's delivered cursor and its received cursor (see
// header in send.go).
const ackEntries = 2

// withDefaults returns c with every zero field that has a default set to
// it: the one place the sequencer's defaults are resolved. (Quorum 0, a
// majority of the members, depends on the member list: validate resolves
// it.)
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.InitialEpoch == 0 {
		c.InitialEpoch = DefaultInitialEpoch
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
	for _, d := range []struct {
		d   *Duration
		def Duration
	}{
		{&c.ResendTimeout, DefaultResendTimeout}, {&c.NackTimeout, DefaultNackTimeout},
		{&c.HeartbeatInterval, DefaultHeartbeatInterval}, {&c.FailureTimeout, DefaultFailureTimeout},
		{&c.ElectionRetry, DefaultElectionRetry},
	} {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	return c
}

// Shared returns the settings every member of a group must share, with
// the defaults resolved: everything but Self and Members. Registration
// hashes it, so a joiner configured otherwise is refused.
func (c Config) Shared() Config {
	c = c.withDefaults()
	c.Self, c.Members = 0, nil
	return c
}

func (c Config) validate() (settings, error) {
	s := settings{Config: c.withDefaults()}
	if c.Method > Method2 {
		return s, configErr("Method is %v, want Hybrid, Method1 or Method2", c.Method)
	}
	if len(c.Members) < 1 {
		return s, configErr("Members is empty; it must list every member, Self (%d) included", c.Self)
	}
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
		if m.ID == c.Self {
			self = i
		}
	}
	if self < 0 {
		return s, configErr("Self (%d) is not in Members", c.Self)
	}
	s.selfMAC, s.selfInc = c.Members[self].MAC, c.Members[self].Incarnation

	if s.Window < 1 || s.Window > MaxWindow {
		return s, configErr("Window is %d, want 1..%d", c.Window, MaxWindow)
	}
	s.ringSize = uint32(1) << bits.Len32(uint32(2*s.Window-1))
	if s.History < 2 || s.History > MaxHistory || s.History&(s.History-1) != 0 {
		return s, configErr("History is %d, want a power of two in 2..%d", c.History, MaxHistory)
	}
	if s.Threshold < 0 {
		return s, configErr("Threshold is %d bytes, want >= 0 (0 means %d)", c.Threshold, DefaultThreshold)
	}
	if s.Quorum == 0 {
		s.Quorum = len(c.Members)/2 + 1
		s.majority = true
	}
	if s.Quorum < 1 || s.Quorum > len(c.Members) {
		return s, configErr("Quorum is %d, want 1..%d (0 means a majority, %d)", c.Quorum, len(c.Members), len(c.Members)/2+1)
	}
	if s.Resilience > SafeSequencer {
		return s, configErr("Resilience is %d, want SafeMajority (0) or SafeSequencer (1)", c.Resilience)
	}

	if s.MTU < frame.MinMTU {
		return s, configErr("MTU is %d, want at least %d", c.MTU, frame.MinMTU)
	}
	// The largest message travels in a SeqData body after its 22-byte
	// epoch, safe and all-held cursors and unique id.
	s.linkMax = frame.MaxPayload(s.MTU, ackEntries, 0) - seqDataFixed
	s.maxPayload = s.linkMax
	if c.MaxPayload < 0 || c.MaxPayload > s.linkMax {
		return s, configErr("MaxPayload is %d, but MTU %d carries at most %d in a SeqData frame", c.MaxPayload, s.MTU, s.linkMax)
	}
	if c.MaxPayload > 0 {
		s.maxPayload = c.MaxPayload
	}

	s.etherType, s.dst = s.EtherType, s.Dst
	if s.dst[0]&1 == 0 {
		return s, configErr("Dst %x is a unicast address; group frames go to broadcast or a multicast group", c.Dst)
	}

	def := Config{}.withDefaults()
	durations := []struct {
		name   string
		d, def Duration
	}{
		{"ResendTimeout", s.ResendTimeout, def.ResendTimeout},
		{"NackTimeout", s.NackTimeout, def.NackTimeout},
		{"HeartbeatInterval", s.HeartbeatInterval, def.HeartbeatInterval},
		{"FailureTimeout", s.FailureTimeout, def.FailureTimeout},
		{"ElectionRetry", s.ElectionRetry, def.ElectionRetry},
	}
	for _, d := range durations {
		if d.d < 0 {
			return s, configErr("%s is %d ns, want > 0 (0 means %d ns)", d.name, int64(d.d), int64(d.def))
		}
	}
	if s.FailureTimeout <= 2*s.HeartbeatInterval {
		return s, configErr("FailureTimeout (%d ns) must exceed twice HeartbeatInterval (%d ns), or idle members are removed", int64(s.FailureTimeout), int64(s.HeartbeatInterval))
	}
	if s.FailureTimeout <= 2*s.ElectionRetry {
		return s, configErr("FailureTimeout (%d ns) must exceed twice ElectionRetry (%d ns), or electing members suspect each other", int64(s.FailureTimeout), int64(s.ElectionRetry))
	}
	return s, nil
}

// seqDataFixed is the SeqData body before the payload: epoch (4), safe
// and all-held cursors (4 each) and the unique id (origin 2, incarnation
// 4, seq 4). acceptHead is the SeqAccept body before its entries: epoch,
// safe, all-held (4 each) and the count (2).
const (
	seqDataFixed = 22
	acceptHead   = 14
)
