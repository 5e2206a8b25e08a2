package reliable

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
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
	// PCODE runs an SPMD program's multicasts and requests (reliable/pcode;
	// its collectives are in package collective): Send takes encoded
	// program calls, and each request's delivery is its matched message.
	PCODE
)

// Method selects how Order Total's sequencer learns of a message; see
// seq.Method.
type Method = seq.Method

const (
	// Hybrid: Method1 below Config.Threshold bytes, Method2 from it on
	// (the default).
	Hybrid = seq.Hybrid
	// Method1: the sender sends its message to the sequencer, which
	// numbers it and broadcasts it.
	Method1 = seq.Method1
	// Method2: the sender broadcasts its message; the sequencer
	// broadcasts a short Accept carrying its number.
	Method2 = seq.Method2
)

// Resilience says when Order Total delivers a numbered message: an alias
// of seq.Resilience.
type Resilience = seq.Resilience

const (
	// SafeMajority (the default): once ⌈n/2⌉ members (with the default
	// Quorum) hold it, so that a message a sender was told is sequenced
	// (delivered back to it) is never lost while a majority survives.
	// Costs members' acknowledgements and the sequencer's announcement
	// of the safe point: about one more round trip before delivery.
	SafeMajority = seq.SafeMajority
	// SafeSequencer: as soon as the sequencer numbered it (faster; lost
	// if the sequencer and every member holding it crash).
	SafeSequencer = seq.SafeSequencer
)

func (o Order) String() string {
	switch o {
	case FIFO:
		return "fifo"
	case Total:
		return "total"
	case PCODE:
		return "pcode"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// Defaults of the runtime's own settings. The protocol's (Window and the
// timers) are pbp's: see pbp.Config.
const (
	// DefaultRecvQueue is how many delivered messages wait for Recv before
	// the event loop stops taking Data frames off the link.
	DefaultRecvQueue = 4096
	// DefaultMaxWait bounds one wait of the event loop on the link while
	// frames arrive, and every wait on a link that cannot be woken (not a
	// link.Waker). Send transmits on the caller's goroutine and may start
	// a timer earlier than the deadline the loop sleeps towards; on such
	// a link that timer fires at most this late. On a link that can be
	// woken (link/ring, link/afpacket), once a wait read nothing the loop
	// sleeps until the core's next timer (a heartbeat, 100 ms, on an idle
	// group; at most a second), and Send, Leave and Close wake it when
	// they change what it must do.
	DefaultMaxWait = time.Millisecond
	// DefaultCloseTimeout bounds Close's wait for everything sent to be
	// acknowledged.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultJoinRetry is how often registration frames (Join, Start) are
	// repeated until answered.
	DefaultJoinRetry = 20 * time.Millisecond
)

// TooLargeError is Send's refusal of a payload larger than MaxMessage
// (the one every core returns).
type TooLargeError = core.TooLargeError

// ErrWindowFull is TrySend's refusal while the send window is full (the
// one every core returns).
var ErrWindowFull = core.ErrWindowFull

// ErrNoUnreliable is SendUnreliable's refusal in a registered group under
// Order Total: the view core and PBP have the Unreliable level, the
// sequencer does not.
var ErrNoUnreliable = core.ErrNoUnreliable

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
	// names this member; Join returns at once, so members must start
	// within FailureTimeout of each other (see Join for one that starts
	// later), and none may restart while the group runs: with the same
	// list its new run is taken for the old one, and with a new
	// incarnation the others drop it (and report the old run failed); in
	// both cases its first messages are lost without its knowing
	// (docs/protocols.md, "Static member lists and a late start"). When it
	// is empty, the group registers at Join time (thesis ch. 3): Size
	// members, the server among them.
	Members []frame.MemberInfo
	Self    frame.MemberID

	// Size is the number of members to register (registration only);
	// with Views, the number of processes (this one included) to wait
	// for before founding the group when none runs (0 means 1).
	Size int
	// Views makes the membership change (docs/membership.md): a process
	// joins a running group (or founds one with Size processes when none
	// runs) and Join returns once it is in a view; members leave, fail,
	// restart and come back, each change an agreed view (ViewInstalled)
	// with virtual synchrony. Order FIFO only for now; Members and
	// Server do not apply.
	Views bool
	// MaxMembers bounds a view's members (ids 0..MaxMembers-1; Views
	// only; 0 means DefaultMaxMembers). Every Data frame has room for the
	// acknowledgement vector of this many members, so MaxMessage shrinks
	// by 4 bytes for each.
	MaxMembers int
	// Server makes this process the registration server, member 0
	// (registration only). Exactly one member of a group is the server.
	Server bool
	// Incarnation distinguishes this run of a member from earlier ones
	// (registration only); 0 derives one from the clock.
	Incarnation uint32
	// RequestID is the member id a joiner asks the server for
	// (registration), or the group (Views); it gets it if no other member
	// has it, else the lowest free one. 0 means no wish under
	// registration. With Views, frame.NoMember is no wish and 0 asks for
	// 0: a process asking for an id gets it before those without a wish.
	RequestID frame.MemberID

	// Order is FIFO (the default) or Total.
	Order Order
	// Mode is FIFO's repair mode (PBP2, the default, or PBP1).
	Mode Mode
	// Window bounds what this member has in flight: FIFO frames not yet
	// acknowledged (see pbp.Config.Window; 0 means the mode's default),
	// Total requests not yet delivered back (see seq.Config.Window; 0
	// means seq.DefaultWindow).
	Window int
	// MaxPayload lowers the largest message below what the link MTU allows;
	// 0 means as large as one frame carries.
	MaxPayload int
	// EtherType of the group's frames; 0 means frame.EtherType. It must
	// match the EtherType the link receives.
	EtherType uint16

	// Order Total only (see seq.Config): how requests reach the
	// sequencer, the Hybrid switch in payload bytes (0 means
	// seq.DefaultThreshold), the history buffer (a power of two; 0 means
	// seq.DefaultHistory), the votes an election needs (0 means a
	// majority of the members) and the election's retransmission
	// interval (0 means seq.DefaultElectionRetry). Every member must use
	// the same values.
	Method        Method
	Threshold     int
	History       int
	Quorum        int
	ElectionRetry time.Duration
	// Resilience (Order Total): when a numbered message is delivered;
	// SafeMajority by default. Groups of one member, and of two with the
	// default Quorum, behave the same under both.
	Resilience Resilience
	// Safe (Order Total with Views): deliver a message only once every
	// member of the view holds it and its place (the Safe level), so that
	// what any member delivered, even one that then fails, every member
	// that completes the view delivers at the same place. Without it,
	// Order Total with Views is Agreed.
	Safe bool
	// Relay (Order FIFO without Views: a static or registered group):
	// a member silent for half FailureTimeout has the frames it sent
	// relayed by the members that delivered them to those that lack
	// them, before they remove it (pbp.Config.Relay), so that every
	// survivor delivers what any survivor delivered of a member that dies
	// with frames on the wire. It costs a copy of every delivered message
	// and a slightly smaller largest message. Every member sets it alike.
	Relay bool
	// Unicast (Order FIFO): a group, or a view, of exactly two members
	// sends its frames to the other member's MAC instead of broadcast
	// (pbp.Config.Unicast), so a switch or bridge forwards each frame to
	// one port instead of flooding every port. A view of more members
	// broadcasts. Every member sets it alike (registration compares it).
	Unicast bool

	// PCODE is Order PCODE's own settings (reliable/pcode.Config).
	PCODE PCODEConfig

	// Protocol timers; zero means the core's defaults (see pbp.Config
	// and seq.Config). AckDelay and BundleDelay are FIFO's only.
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
	// MaxWait bounds one wait of the event loop on the link while frames
	// arrive (on a link that cannot be woken: every wait); 0 means
	// DefaultMaxWait, or BundleDelay if that is shorter.
	MaxWait time.Duration
	// CloseTimeout bounds Close; 0 means DefaultCloseTimeout.
	CloseTimeout time.Duration
	// JoinRetry is the registration retransmission interval; 0 means
	// DefaultJoinRetry.
	JoinRetry time.Duration

	// Deliver, when set, receives every message on the event loop's
	// goroutine instead of Recv's queue. data is a view into the received
	// frame, valid only during the call: no copy is made. Deliver must not
	// call the Group's methods (the loop holds the group's lock). Under a
	// Driver it may call the Driver's Propose or Leave: the message (or
	// the Leave) goes out once the deliveries of the same turn are
	// handed over.
	Deliver func(from frame.MemberID, data []byte)
	// OnEvent, when set, is called on the event loop's goroutine for every
	// membership (and sequencer) event, under the same rules as Deliver.
	OnEvent func(Event)

	// Auth, when set, authenticates every frame of the group (and, with
	// Auth.Encrypt, encrypts its body): Join and NewDriver wrap the link
	// with link/auth, which drops every frame that does not verify before
	// the core sees it. Group and EtherType are taken from this Config.
	// docs/auth.md.
	Auth *auth.Config

	// Logger receives membership changes and dropped-frame warnings; nil
	// means slog.Default().
	Logger *slog.Logger
}

// quietMaxWait bounds one wait of the event loop on a quiet link that
// can be woken (DefaultMaxWait); Join copies it (a variable for tests).
var quietMaxWait = time.Second

// quietAfter: an event loop that read nothing from a link that can be
// woken for this long sleeps until its next timer (Group.lastRead).
const quietAfter = 10 * time.Millisecond

// settings is a Config with the runtime's defaults applied (the core's
// are its own: see protocol.shared).
type settings struct {
	Config
	protocol  protocol
	maxWait   time.Duration
	quietWait time.Duration // quietMaxWait, when Join ran
}

// Check reports what Join would refuse in c before it touches a link:
// a setting out of range, or settings that exclude each other (the
// protocol core's own checks included). Programs check their flags with
// it before they open sockets (rbcastd run).
func (c Config) Check() error {
	s, err := c.settings()
	if err != nil {
		return err
	}
	// The core's own checks: a trial core for member 0 of a group as
	// large as c allows, on a 1500-byte link or one that carries MaxPayload
	// (Join checks the real MTU).
	n := max(s.Size, 2)
	if c.Views {
		n = s.MaxMembers
	}
	if len(c.Members) > 0 {
		n = len(c.Members)
	}
	members := make([]frame.MemberInfo, n)
	for i := range members {
		members[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte{2, 0, 0, 0, byte(i >> 8), byte(i)}, Incarnation: 1}
	}
	// A MaxPayload beyond what 1500 bytes carry is for a jumbo-frame
	// link: the trial link is made large enough for it (1500 bytes more
	// cover a frame's header, ack vector and sequencer fields), and Join
	// checks it against the real MTU.
	mtu := 1500
	if c.MaxPayload > 0 {
		mtu = max(mtu, c.MaxPayload+1500)
	}
	_, err = s.newCore(0, members, mtu)
	return err
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	p, ok := protocols[c.Order]
	if !ok {
		return s, configErr("Order is %v, want FIFO or Total", c.Order)
	}
	s.protocol = p
	if err := p.check(&c); err != nil {
		return s, err
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
		{"JoinRetry", c.JoinRetry}, {"ElectionRetry", c.ElectionRetry},
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
	s.maxWait, s.quietWait = c.MaxWait, quietMaxWait
	if s.maxWait == 0 {
		s.maxWait = DefaultMaxWait
	}
	if c.BundleDelay > 0 {
		s.maxWait = min(s.maxWait, c.BundleDelay)
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if c.Safe && !c.Views {
		return s, configErr("Safe applies to groups with Views; the registered total order has Resilience")
	}
	if c.Relay && (c.Views || c.Order != FIFO) {
		return s, configErr("Relay applies to Order FIFO without Views (a view change relays by itself)")
	}
	if c.Views {
		switch {
		case len(c.Members) > 0:
			return s, configErr("Views and static Members exclude each other: a static list never changes")
		case c.Server:
			return s, configErr("Server applies to registration; with Views any member admits joiners")
		case c.Safe && c.Order != Total:
			return s, configErr("Safe applies to Order Total (with Views)")
		case c.Order == Total && c.Resilience == SafeSequencer:
			return s, configErr("Resilience applies to the registered total order; with Views, Order Total is Agreed (one order, the same at every member)")
		case c.Size < 0:
			return s, configErr("Size is %d, want >= 0 (with Views: processes to wait for before founding; 0 means 1)", c.Size)
		case c.MaxMembers < 0 || c.MaxMembers > MaxViewMembers:
			return s, configErr("MaxMembers is %d, want 0..%d (0 means %d)", c.MaxMembers, MaxViewMembers, DefaultMaxMembers)
		}
		if s.Size == 0 {
			s.Size = 1
		}
		if s.MaxMembers == 0 {
			s.MaxMembers = DefaultMaxMembers
		}
		if c.Size > s.MaxMembers {
			return s, configErr("Size is %d, but MaxMembers is %d", c.Size, s.MaxMembers)
		}
		if c.RequestID != frame.NoMember && int(c.RequestID) >= s.MaxMembers {
			return s, configErr("RequestID is %d, but a view's ids are 0..%d (MaxMembers %d)", c.RequestID, s.MaxMembers-1, s.MaxMembers)
		}
	} else if c.MaxMembers != 0 {
		return s, configErr("MaxMembers is %d, but it applies to Views only", c.MaxMembers)
	} else if len(c.Members) == 0 {
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

// fifoOnly refuses Order Total's settings under FIFO.
func (c *Config) fifoOnly() error {
	for _, f := range []struct {
		name string
		set  bool
		v    any
	}{
		{"Method", c.Method != Hybrid, c.Method}, {"Threshold", c.Threshold != 0, c.Threshold},
		{"History", c.History != 0, c.History}, {"Quorum", c.Quorum != 0, c.Quorum},
		{"ElectionRetry", c.ElectionRetry != 0, c.ElectionRetry},
		{"Resilience", c.Resilience != SafeMajority, c.Resilience},
	} {
		if f.set {
			return configErr("%s is %v, but it applies to Order Total only (Order is FIFO)", f.name, f.v)
		}
	}
	return nil
}

// totalOnly checks Order Total's settings and refuses FIFO's.
func (c *Config) totalOnly() error {
	switch {
	case c.Views && c.Mode != PBP2:
		return configErr("Mode is %v, but Order Total with Views (Agreed, Safe) runs over PBP2 only (leave Mode zero)", c.Mode)
	case c.Views && c.BundleDelay != 0:
		return configErr("BundleDelay is %v, but it applies to Order FIFO only: Order Total with Views bundles what is proposed before each transmission", c.BundleDelay)
	case c.Mode != PBP2:
		return configErr("Mode is %v, but Order Total has no PBP mode: the sequencer repairs by its own protocol (leave Mode zero; choose Method)", c.Mode)
	case c.AckDelay != 0:
		return configErr("AckDelay is %v, but it applies to Order FIFO only: Order Total acknowledges in every frame and in status replies", c.AckDelay)
	case c.BundleDelay != 0:
		return configErr("BundleDelay is %v, but it applies to Order FIFO only: Order Total bundles what is proposed before each transmission", c.BundleDelay)
	case c.Unicast:
		return configErr("Unicast applies to Order FIFO only: Order Total's sequencer and members broadcast")
	case c.Method > Method2:
		return configErr("Method is %v, want Hybrid, Method1 or Method2", c.Method)
	case c.Threshold < 0:
		return configErr("Threshold is %d bytes, want >= 0 (0 means %d)", c.Threshold, seq.DefaultThreshold)
	case c.Window < 0 || c.Window > seq.MaxWindow:
		return configErr("Window is %d, want 0..%d under Order Total (0 means %d)", c.Window, seq.MaxWindow, seq.DefaultWindow)
	case c.History != 0 && (c.History < 2 || c.History > seq.MaxHistory || c.History&(c.History-1) != 0):
		return configErr("History is %d, want a power of two in 2..%d (0 means %d)", c.History, seq.MaxHistory, seq.DefaultHistory)
	case c.Resilience > SafeSequencer:
		return configErr("Resilience is %v, want SafeMajority or SafeSequencer", c.Resilience)
	case c.Quorum < 0:
		return configErr("Quorum is %d, want >= 0 (0 means a majority of the members)", c.Quorum)
	case len(c.Members) > 0 && c.Quorum > len(c.Members):
		return configErr("Quorum is %d, but Members lists only %d members", c.Quorum, len(c.Members))
	case len(c.Members) == 0 && c.Size > 0 && c.Quorum > c.Size:
		return configErr("Quorum is %d, but Size is only %d members", c.Quorum, c.Size)
	}
	return nil
}

// DefaultMaxMembers bounds a view's members when Config.MaxMembers is 0;
// MaxViewMembers is the most it may be: a ViewCommit lists every member
// and its cut in one frame, which at a 1500-byte MTU holds 60
// (frame.MaxViewMembers; Join checks the link's MTU).
const (
	DefaultMaxMembers = 16
	MaxViewMembers    = 60
)

// maxRegistered bounds registration's group size: a Start frame must fit
// a 576-byte MTU (12 bytes per member).
const maxRegistered = 40
