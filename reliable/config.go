package reliable

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/pbp"
)

// Mode selects how lost frames are repaired; see pbp.Mode.
type Mode = pbp.Mode

const (
	PBP2 = pbp.PBP2 // negative acknowledgements (the default)
	PBP1 = pbp.PBP1 // positive acknowledgements
)

// Order selects the order in which a group delivers messages.
type Order int

const (
	// FIFO delivers each sender's messages in the order it sent them
	// (PBP); different senders' messages interleave differently at
	// different members. The default.
	FIFO Order = iota
	// Total delivers one sequence, the same at every member, every
	// member's own messages included (the sequencer, reliable/seq).
	Total
)

func (o Order) String() string {
	switch o {
	case FIFO:
		return "fifo"
	case Total:
		return "total"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// Defaults of the runtime's own settings. The protocol's (Window and the
// timers) are pbp's: see pbp.Config.
const (
	// DefaultRecvQueue is how many delivered messages wait for Recv before
	// the event loop stops taking Data frames off the link.
	DefaultRecvQueue = 4096
	// DefaultMaxWait bounds one wait of the event loop on the link. Send
	// transmits on the caller's goroutine and may start a timer earlier
	// than the deadline the loop sleeps towards (the ring link has no way
	// to wake a blocked Recv); such a timer fires at most this late.
	DefaultMaxWait = time.Millisecond
	// DefaultCloseTimeout bounds Close's wait for everything sent to be
	// acknowledged.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultJoinRetry is how often registration frames (Join, Start) are
	// repeated until answered.
	DefaultJoinRetry = 20 * time.Millisecond
)

// ErrConfig is wrapped by every error about a bad Config.
var ErrConfig = errors.New("reliable: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// Config describes a member and its group.
type Config struct {
	// Group is the group id carried by every frame.
	Group uint32

	// Members is the static member list (id, MAC, incarnation of each,
	// Self included). When it is set, registration is skipped and Self
	// names this member. When it is empty, the group registers at Join
	// time (thesis ch. 3): Size members, the server among them.
	Members []frame.MemberInfo
	Self    frame.MemberID

	// Size is the number of members to register (registration only).
	Size int
	// Server makes this process the registration server, member 0
	// (registration only). Exactly one member of a group is the server.
	Server bool
	// Incarnation distinguishes this run of a member from earlier ones
	// (registration only); 0 derives one from the clock.
	Incarnation uint32

	// Order is FIFO (the default) or Total.
	Order Order
	Mode  Mode
	// Window: see pbp.Config.Window. 0 means the mode's default.
	Window int
	// MaxPayload lowers the largest message below what the link MTU allows;
	// 0 means as large as one frame carries.
	MaxPayload int
	// EtherType of the group's frames; 0 means frame.EtherType. It must
	// match the EtherType the link receives.
	EtherType uint16

	// Protocol timers; zero means pbp's defaults (see pbp.Config).
	AckDelay          time.Duration
	ResendTimeout     time.Duration
	NackTimeout       time.Duration
	HeartbeatInterval time.Duration
	FailureTimeout    time.Duration
	// BundleDelay lets a lone small message wait this long for others to
	// share its frame; 0 sends at once. It trades latency for message
	// rate when many small messages are sent.
	BundleDelay time.Duration

	// RecvQueue is how many delivered messages may wait for Recv; 0 means
	// DefaultRecvQueue. Ignored with Deliver.
	RecvQueue int
	// MaxWait bounds one wait of the event loop on the link; 0 means
	// DefaultMaxWait.
	MaxWait time.Duration
	// CloseTimeout bounds Close; 0 means DefaultCloseTimeout.
	CloseTimeout time.Duration
	// JoinRetry is the registration retransmission interval; 0 means
	// DefaultJoinRetry.
	JoinRetry time.Duration

	// Deliver, when set, receives every message on the event loop's
	// goroutine instead of Recv's queue. data is a view into the received
	// frame, valid only during the call: no copy is made. Deliver must not
	// call the Group's methods (the loop holds the group's lock).
	Deliver func(from frame.MemberID, data []byte)
	// OnEvent, when set, is called on the event loop's goroutine for every
	// membership event, under the same rules as Deliver.
	OnEvent func(pbp.Event)

	// Logger receives membership changes and dropped-frame warnings; nil
	// means slog.Default().
	Logger *slog.Logger
}

// settings is a Config with defaults applied.
type settings struct {
	Config
	maxWait time.Duration
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	switch c.Order {
	case FIFO:
	case Total:
		// TODO(issue 4): the sequencer core exists (reliable/seq) but the
		// runtime does not drive it yet.
		return s, configErr("Order is total, which the runtime does not support yet")
	default:
		return s, configErr("Order is %v, want FIFO or Total", c.Order)
	}
	if c.Mode != PBP1 && c.Mode != PBP2 {
		return s, configErr("Mode is %v, want PBP1 or PBP2", c.Mode)
	}
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"AckDelay", c.AckDelay}, {"ResendTimeout", c.ResendTimeout}, {"NackTimeout", c.NackTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"FailureTimeout", c.FailureTimeout},
		{"BundleDelay", c.BundleDelay}, {"MaxWait", c.MaxWait}, {"CloseTimeout", c.CloseTimeout},
		{"JoinRetry", c.JoinRetry},
	}
	for _, d := range durations {
		if d.d < 0 {
			return s, configErr("%s is %v, want >= 0 (0 means the default)", d.name, d.d)
		}
	}
	if c.RecvQueue < 0 {
		return s, configErr("RecvQueue is %d, want >= 0 (0 means %d)", c.RecvQueue, DefaultRecvQueue)
	}
	if s.RecvQueue == 0 {
		s.RecvQueue = DefaultRecvQueue
	}
	if s.CloseTimeout == 0 {
		s.CloseTimeout = DefaultCloseTimeout
	}
	if s.JoinRetry == 0 {
		s.JoinRetry = DefaultJoinRetry
	}
	s.maxWait = c.MaxWait
	if s.maxWait == 0 {
		s.maxWait = DefaultMaxWait
	}
	if c.BundleDelay > 0 {
		s.maxWait = min(s.maxWait, c.BundleDelay)
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if len(c.Members) == 0 {
		if c.Size < 1 || c.Size > maxRegistered {
			return s, configErr("no static Members, so registration needs Size (members to register) in 1..%d; it is %d", maxRegistered, c.Size)
		}
	} else if c.Size != 0 && c.Size != len(c.Members) {
		return s, configErr("Size is %d but Members lists %d members", c.Size, len(c.Members))
	}
	if s.EtherType == 0 {
		s.EtherType = frame.EtherType
	}
	return s, nil
}

// maxRegistered bounds registration's group size: a Start frame must fit
// a 576-byte MTU (12 bytes per member).
const maxRegistered = 40

// pbpConfig is the core's configuration for members and a link MTU.
func (s *settings) pbpConfig(self frame.MemberID, members []frame.MemberInfo, mtu int, initialSeq uint32) pbp.Config {
	return pbp.Config{
		Group: s.Group, Self: self, Members: members, Mode: s.Mode, Window: s.Window,
		MTU: mtu, MaxPayload: s.MaxPayload, InitialSeq: initialSeq, EtherType: s.EtherType,
		AckDelay: pbp.Duration(s.AckDelay), ResendTimeout: pbp.Duration(s.ResendTimeout),
		NackTimeout: pbp.Duration(s.NackTimeout), HeartbeatInterval: pbp.Duration(s.HeartbeatInterval),
		FailureTimeout: pbp.Duration(s.FailureTimeout), BundleDelay: pbp.Duration(s.BundleDelay),
	}
}
