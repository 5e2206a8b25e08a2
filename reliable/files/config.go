package files

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

// Defaults for zero Config fields (docs/protocols.md, "Files (IBRMP)",
// Defaults).
const (
	DefaultMTU = 1500
	// DefaultRate is the pacer's rate: 1 Gbit/s. The runtime sets the
	// link's.
	DefaultRate = 125_000_000
	// DefaultBurst is how many frames the pacer sends back to back.
	DefaultBurst = 32
	// DefaultWindow is how many blocks the multicast may run ahead of the
	// median receiver's reported position (§III.C, credits), counted
	// over the files sent, not per file (windowOpen).
	DefaultWindow = 4096
	// DefaultSlowPercent bounds how long the pass waits for the receivers
	// behind the median: at most this share of the pass's own time.
	DefaultSlowPercent = 20
	// DefaultCredit is how many repair frames a receiver takes per report.
	DefaultCredit = 256
	// DefaultRepairPercent is the repairs' share of the bytes sent while
	// a multicast pass runs.
	DefaultRepairPercent = 12
	// DefaultStatusEvery is a receiver's report interval in blocks.
	DefaultStatusEvery = 64
	// DefaultInitialRTT is the round trip assumed until one is measured.
	DefaultInitialRTT = 500 * Microsecond
	// DefaultMinTimer and DefaultMaxTimer bound every timer.
	DefaultMinTimer = 100 * Microsecond
	DefaultMaxTimer = 100 * Millisecond
	// DefaultFailureTimeout: a receiver of the snapshot silent this long
	// fails the file; a sender silent this long ends its transfers
	// incomplete.
	DefaultFailureTimeout = 2 * Second
	// DefaultFileTimeout: a file with its verdict out closes after this
	// long without a request (the per-file timer, §III.E).
	DefaultFileTimeout = 10 * Second
	// DefaultAnnounce is FileEnd's interval once the verdict is out.
	DefaultAnnounce = Second
	// DefaultMaxOpen is how many files a sender keeps open at once.
	DefaultMaxOpen = 64
	// DefaultMaxReceiving is how many files a receiver takes at once
	// (each holds its sink's partial copy open).
	DefaultMaxReceiving = 64
	// DefaultMaxBlocks bounds the blocks of a file a receiver accepts
	// (its bitmap: 32 MiB; 392 GB at MTU 1500).
	DefaultMaxBlocks = 1 << 28
)

// Config is one member's file core.
type Config struct {
	Group uint32
	Self  frame.MemberID
	// Members is the group, Self included: the default snapshot of a
	// file's receivers (§III.D) is every member but Self. SetMembers
	// changes it (a view change).
	Members []frame.MemberInfo
	// ViewID is put in every frame's header.
	ViewID uint32
	// MTU is the link's; 0 means DefaultMTU. BlockSize is the bytes of a
	// block; 0 fills one frame.
	MTU, BlockSize int
	// EtherType of the frames built; 0 means frame.EtherType.
	EtherType uint16
	// Dst is the destination of group frames; zero means broadcast.
	Dst [6]byte

	// Rate (bytes/s) and Burst (frames) are the pacer's; Window, Credit,
	// RepairPercent and StatusEvery: see the defaults.
	Rate                                 int64
	Burst, Window, Credit, RepairPercent int
	StatusEvery, MaxOpen                 int
	// SlowPercent: the pass runs at most Window blocks ahead of the
	// slowest receiver heard from too, as long as waiting for the
	// receivers behind the median has taken at most SlowPercent of the
	// pass's time besides (docs/protocols.md, "Files (IBRMP)": credits);
	// 0 means DefaultSlowPercent.
	SlowPercent int
	// MaxBlocks bounds the blocks of a file this member accepts: an offer
	// of more is refused before the sink is asked (a receiver keeps a
	// bit per block), and the sender told (CauseTooLarge).
	MaxBlocks int
	// MaxReceiving bounds the files this member receives at once: the
	// transfers whose partial copy its Sink holds open. An offer beyond
	// it waits, unopened, and is asked for again once one of them ends,
	// the waiting ones first in, first out; one of a file the Sink holds
	// whole (HoldingSink) is judged at once instead (docs/protocols.md,
	// "Files (IBRMP)": how many files a receiver takes at once); 0 means
	// DefaultMaxReceiving.
	MaxReceiving int
	// MaxSize, if not 0, bounds the bytes of a file this member accepts:
	// an offer of more is refused so too (CauseTooLarge), an operator's
	// limit (rbcastd run -files-max-size) where MaxBlocks is the core's.
	MaxSize                               uint64
	InitialRTT, MinTimer, MaxTimer        Duration
	FailureTimeout, FileTimeout, Announce Duration

	// Sink stores the files this member receives; nil receives none.
	Sink Sink
}

// ErrConfig is wrapped by every error New returns about a bad Config.
var ErrConfig = errors.New("files: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// withDefaults returns c with every zero field that has a default set:
// the one place the file core's defaults are resolved.
func (c Config) withDefaults() Config {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.BlockSize == 0 {
		c.BlockSize = frame.MaxPayload(c.MTU, 0, 0) - frame.FileDataHead
	}
	if c.EtherType == 0 {
		c.EtherType = frame.EtherType
	}
	if c.Dst == [6]byte{} {
		c.Dst = frame.Broadcast
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	for _, d := range []struct {
		v   *int
		def int
	}{
		{&c.Burst, DefaultBurst}, {&c.Window, DefaultWindow}, {&c.Credit, DefaultCredit},
		{&c.RepairPercent, DefaultRepairPercent}, {&c.SlowPercent, DefaultSlowPercent}, {&c.StatusEvery, DefaultStatusEvery}, {&c.MaxOpen, DefaultMaxOpen},
		{&c.MaxBlocks, DefaultMaxBlocks}, {&c.MaxReceiving, DefaultMaxReceiving},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	for _, d := range []struct {
		d   *Duration
		def Duration
	}{
		{&c.InitialRTT, DefaultInitialRTT}, {&c.MinTimer, DefaultMinTimer}, {&c.MaxTimer, DefaultMaxTimer},
		{&c.FailureTimeout, DefaultFailureTimeout}, {&c.FileTimeout, DefaultFileTimeout}, {&c.Announce, DefaultAnnounce},
	} {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	return c
}

// Shared is the configuration every member must share, defaults
// resolved (Self, Members and Sink cleared).
func (c Config) Shared() Config {
	c = c.withDefaults()
	c.Self, c.Members, c.Sink = 0, nil, nil
	return c
}

// settings is a validated Config with what is derived from it.
type settings struct {
	Config
	selfMAC   [6]byte
	selfInc   uint32
	maxRanges int // missing ranges one report carries
}

func (c Config) validate() (settings, error) {
	c = c.withDefaults()
	s := settings{Config: c}
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
	maxBlock := frame.MaxPayload(c.MTU, 0, 0) - frame.FileDataHead
	switch {
	case maxBlock < 1:
		return s, configErr("MTU %d leaves no room for a block", c.MTU)
	case c.BlockSize < 1 || c.BlockSize > maxBlock:
		return s, configErr("BlockSize is %d, want 1..%d at MTU %d (0 fills a frame)", c.BlockSize, maxBlock, c.MTU)
	case c.Rate < 1000:
		return s, configErr("Rate is %d bytes/s, want at least 1000 (0 means %d)", c.Rate, DefaultRate)
	case c.Burst < 1 || c.Window < 1 || c.StatusEvery < 1 || c.MaxOpen < 1 || c.MaxBlocks < 1:
		return s, configErr("Burst %d, Window %d, StatusEvery %d, MaxOpen %d, MaxBlocks %d: each must be at least 1", c.Burst, c.Window, c.StatusEvery, c.MaxOpen, c.MaxBlocks)
	case c.MaxReceiving < 1:
		return s, configErr("MaxReceiving is %d, want at least 1 (0 means %d)", c.MaxReceiving, DefaultMaxReceiving)
	case c.Credit < 1 || c.Credit > 0xffff:
		return s, configErr("Credit is %d, want 1..65535 (0 means %d)", c.Credit, DefaultCredit)
	case c.RepairPercent < 1 || c.RepairPercent > 100:
		return s, configErr("RepairPercent is %d, want 1..100 (0 means %d)", c.RepairPercent, DefaultRepairPercent)
	case c.SlowPercent < 1 || c.SlowPercent > 1000:
		return s, configErr("SlowPercent is %d, want 1..1000 (0 means %d)", c.SlowPercent, DefaultSlowPercent)
	case c.InitialRTT < 0 || c.MinTimer < 0 || c.MaxTimer < 0 || c.FailureTimeout < 0 || c.FileTimeout < 0 || c.Announce < 0:
		return s, configErr("a negative duration (InitialRTT %v, MinTimer %v, MaxTimer %v, FailureTimeout %v, FileTimeout %v, Announce %v)",
			c.InitialRTT, c.MinTimer, c.MaxTimer, c.FailureTimeout, c.FileTimeout, c.Announce)
	case c.MinTimer > c.MaxTimer:
		return s, configErr("MinTimer %v exceeds MaxTimer %v", c.MinTimer, c.MaxTimer)
	case c.FailureTimeout <= 4*c.MaxTimer:
		return s, configErr("FailureTimeout %v must exceed 4 × MaxTimer %v", c.FailureTimeout, c.MaxTimer)
	}
	room := frame.MaxPayload(c.MTU, 0, 0) - fileStatusHead
	s.maxRanges = min(room/8, 0xffff)
	if s.maxRanges < 1 {
		return s, configErr("MTU %d leaves no room for a report", c.MTU)
	}
	return s, nil
}

// fileStatusHead is the fixed part of a FileStatus body (frame/filesbody.go).
const fileStatusHead = 30
