package pcode

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
)

// Time and Duration are the cores' clock (package clock).
type (
	Time     = clock.Time
	Duration = clock.Duration
)

// Units of Duration.
const (
	Microsecond = clock.Microsecond
	Millisecond = clock.Millisecond
	Second      = clock.Second
)

// Defaults for zero Config fields.
const (
	DefaultMTU = 1500
	// DefaultSendBuffer is P1's buffer of sent messages (§4): a member
	// keeps each message it multicast until every member reported it
	// (their pcv), and Multicast waits while the buffer is full.
	DefaultSendBuffer = 256
	// DefaultEarlyBuffer is §5.4's buffer of messages that arrived too
	// early (after a gap, or while their sender's ready slot was full).
	DefaultEarlyBuffer = 64
	// DefaultFlowWindow is §5.2's FLOW_WINDOW: a member stops sending
	// while its GlobalCounter runs more than this ahead of the lowest it
	// has seen from another member.
	DefaultFlowWindow = 64
	// DefaultInitialRTT is the round trip assumed until one is measured.
	DefaultInitialRTT = 500 * Microsecond
	// DefaultMinTimer and DefaultMaxTimer bound every NACK timer.
	DefaultMinTimer = 50 * Microsecond
	DefaultMaxTimer = 50 * Millisecond
	// DefaultFailureTimeout: a member this member waits on and has not
	// heard from for this long has failed, and the program stops.
	DefaultFailureTimeout = 2 * Second
	// MaxBuffer bounds SendBuffer and EarlyBuffer.
	MaxBuffer = 1 << 16
)

// NoEarlyBuffer as Config.EarlyBuffer keeps no early messages: every
// message that arrives too early is dropped, as in P0 and P1.
const NoEarlyBuffer = -1

// Config is one member's view of its program's processors.
type Config struct {
	Group uint32
	Self  frame.MemberID
	// Members is every processor of the program, Self included.
	Members []frame.MemberInfo
	// MTU is the link's; 0 means DefaultMTU. MaxPayload lowers the largest
	// message below what one frame carries; 0: no lower.
	MTU, MaxPayload int
	// EtherType of the frames built; 0 means frame.EtherType.
	EtherType uint16
	// Dst is the destination of group frames; zero means broadcast.
	Dst [6]byte

	// SendBuffer, EarlyBuffer, FlowWindow: see the defaults. EarlyBuffer
	// NoEarlyBuffer keeps none. StatusWindow is §5.5's STATUS_WINDOW: a
	// member sends a STATUS when its GlobalCounter grew by more than it
	// since its last; 0 means FlowWindow/2 (at least 1).
	SendBuffer, EarlyBuffer, FlowWindow, StatusWindow int

	// InitialRTT is the round trip until one is measured (from status
	// probes and from the answers to first NACKs). MinTimer and MaxTimer
	// bound the NACK timers derived from it (§5.7): a request waits half
	// a round trip before its NACK, a gap likewise, and a NACK is
	// repeated each srtt + 4·rttvar, doubling while unanswered.
	InitialRTT, MinTimer, MaxTimer Duration
	// FailureTimeout: one failure stops the program (§1's fault model):
	// a member waited on and silent this long stops it at every member,
	// with an error.
	FailureTimeout Duration
}

// ErrConfig is wrapped by every error New returns about a bad Config.
var ErrConfig = errors.New("pcode: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// withDefaults returns c with every zero field that has a default set:
// the one place PCODE's defaults are resolved.
func (c Config) withDefaults() Config {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.EtherType == 0 {
		c.EtherType = frame.EtherType
	}
	if c.Dst == [6]byte{} {
		c.Dst = frame.Broadcast
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = DefaultSendBuffer
	}
	if c.EarlyBuffer == 0 {
		c.EarlyBuffer = DefaultEarlyBuffer
	}
	if c.FlowWindow == 0 {
		c.FlowWindow = DefaultFlowWindow
	}
	if c.StatusWindow == 0 {
		c.StatusWindow = max(1, c.FlowWindow/2)
	}
	for _, d := range []struct {
		d   *Duration
		def Duration
	}{
		{&c.InitialRTT, DefaultInitialRTT}, {&c.MinTimer, DefaultMinTimer}, {&c.MaxTimer, DefaultMaxTimer},
		{&c.FailureTimeout, DefaultFailureTimeout},
	} {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	return c
}

// Shared is the configuration every member must share, defaults
// resolved (Self and Members cleared).
func (c Config) Shared() Config {
	c = c.withDefaults()
	c.Self, c.Members = 0, nil
	return c
}

// settings is a validated Config with what is derived from it.
type settings struct {
	Config
	ackBase    frame.MemberID
	span       int // ack vector entries
	maxPayload int // largest application message
	bitmap     int // bytes of a full target bitmap
	selfMAC    [6]byte
	selfInc    uint32
}

func (c Config) validate() (settings, error) {
	c = c.withDefaults()
	s := settings{Config: c}
	if len(c.Members) < 2 {
		return s, configErr("%d members; a program needs at least 2 processors", len(c.Members))
	}
	ms := slices.Clone(c.Members)
	slices.SortFunc(ms, func(a, b frame.MemberInfo) int { return int(a.ID) - int(b.ID) })
	s.Members = ms
	found := false
	for i, m := range ms {
		if m.ID == frame.NoMember {
			return s, configErr("member %d has the reserved id 0x%04x", i, uint16(frame.NoMember))
		}
		if i > 0 && ms[i-1].ID == m.ID {
			return s, configErr("member id %d listed twice", m.ID)
		}
		if m.ID == c.Self {
			found, s.selfMAC, s.selfInc = true, m.MAC, m.Incarnation
		}
	}
	if !found {
		return s, configErr("Self %d is not among the %d Members", c.Self, len(ms))
	}
	if int(ms[len(ms)-1].ID) >= 8*frame.MaxPcodeTargets {
		return s, configErr("member id %d does not fit a target bitmap (ids below %d)", ms[len(ms)-1].ID, 8*frame.MaxPcodeTargets)
	}
	switch {
	case c.SendBuffer < 1 || c.SendBuffer > MaxBuffer:
		return s, configErr("SendBuffer is %d, want 1..%d (0 means %d)", c.SendBuffer, MaxBuffer, DefaultSendBuffer)
	case c.EarlyBuffer != NoEarlyBuffer && (c.EarlyBuffer < 1 || c.EarlyBuffer > MaxBuffer):
		return s, configErr("EarlyBuffer is %d, want 1..%d, or NoEarlyBuffer (0 means %d)", c.EarlyBuffer, MaxBuffer, DefaultEarlyBuffer)
	case c.FlowWindow < 1:
		return s, configErr("FlowWindow is %d, want >= 1 (0 means %d)", c.FlowWindow, DefaultFlowWindow)
	case c.StatusWindow < 1:
		return s, configErr("StatusWindow is %d, want >= 1 (0 means FlowWindow/2)", c.StatusWindow)
	case c.InitialRTT < 0 || c.MinTimer < 0 || c.MaxTimer < 0 || c.FailureTimeout < 0:
		return s, configErr("a negative duration (InitialRTT %v, MinTimer %v, MaxTimer %v, FailureTimeout %v)", c.InitialRTT, c.MinTimer, c.MaxTimer, c.FailureTimeout)
	case c.MinTimer > c.MaxTimer:
		return s, configErr("MinTimer %v exceeds MaxTimer %v", c.MinTimer, c.MaxTimer)
	case c.FailureTimeout <= c.MaxTimer:
		return s, configErr("FailureTimeout %v must exceed MaxTimer %v", c.FailureTimeout, c.MaxTimer)
	}
	s.ackBase = ms[0].ID
	s.span = int(ms[len(ms)-1].ID-ms[0].ID) + 1
	bitmap := int(ms[len(ms)-1].ID)/8 + 1
	s.bitmap = bitmap
	linkMax := frame.MaxPayload(c.MTU, s.span, 0) - pcodeDataHead - bitmap
	if linkMax < 1 {
		return s, configErr("MTU %d leaves no room for a message with %d members", c.MTU, len(ms))
	}
	s.maxPayload = linkMax
	if c.MaxPayload < 0 {
		return s, configErr("MaxPayload is %d, want >= 0", c.MaxPayload)
	}
	if c.MaxPayload > 0 {
		s.maxPayload = min(s.maxPayload, c.MaxPayload)
	}
	return s, nil
}

// pcodeDataHead is the fixed part of a PcodeData body (frame/pcodebody.go).
const pcodeDataHead = 16
