package reliable

import (
	"fmt"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// protocol is one protocol core the runtime can drive: the one table a
// new core is named in (see protocols). The runtime itself never asks
// which core it drives; it speaks core.Core.
type protocol struct {
	// check refuses settings that do not apply to this protocol and
	// checks its own (before any member list is known).
	check func(c *Config) error
	// shared is the protocol's configuration for link MTU mtu with the
	// defaults resolved and only what every member must share set (the
	// core's Shared): registration hashes it, the runtime reads its
	// window and failure timeout from it.
	shared func(s *settings, mtu int) sharedConfig
	// start returns the core of member self.
	start func(s *settings, self frame.MemberID, members []frame.MemberInfo, mtu int) (core.Core, error)
}

// sharedConfig is a protocol's Shared configuration.
type sharedConfig struct {
	cfg            any // hashed by configHash: every field not at zero counts
	window         int
	failureTimeout core.Duration
}

// protocols maps each Order to its core.
var protocols = map[Order]protocol{
	FIFO: {
		check: func(c *Config) error { return c.fifoOnly() },
		shared: func(s *settings, mtu int) sharedConfig {
			c := s.pbpConfig(frame.NoMember, nil, mtu).Shared()
			return sharedConfig{cfg: c, window: c.Window, failureTimeout: c.FailureTimeout}
		},
		start: func(s *settings, self frame.MemberID, members []frame.MemberInfo, mtu int) (core.Core, error) {
			return pbp.New(s.pbpConfig(self, members, mtu))
		},
	},
	Total: {
		check: func(c *Config) error { return c.totalOnly() },
		shared: func(s *settings, mtu int) sharedConfig {
			c := s.seqConfig(frame.NoMember, nil, mtu).Shared()
			return sharedConfig{cfg: c, window: c.Window, failureTimeout: c.FailureTimeout}
		},
		start: func(s *settings, self frame.MemberID, members []frame.MemberInfo, mtu int) (core.Core, error) {
			c, err := seq.New(s.seqConfig(self, members, mtu))
			if err != nil {
				return nil, fmt.Errorf("%w: Order Total: %w", ErrConfig, err)
			}
			return c, nil
		},
	},
}

// pbpConfig is PBP's configuration for members and a link MTU.
func (s *settings) pbpConfig(self frame.MemberID, members []frame.MemberInfo, mtu int) pbp.Config {
	return pbp.Config{
		Group: s.Group, Self: self, Members: members, Mode: s.Mode, Window: s.Window,
		MTU: mtu, MaxPayload: s.MaxPayload, EtherType: s.EtherType,
		AckDelay: pbp.Duration(s.AckDelay), ResendTimeout: pbp.Duration(s.ResendTimeout),
		NackTimeout: pbp.Duration(s.NackTimeout), HeartbeatInterval: pbp.Duration(s.HeartbeatInterval),
		FailureTimeout: pbp.Duration(s.FailureTimeout), BundleDelay: pbp.Duration(s.BundleDelay),
		Relay: s.Relay, Unicast: s.Unicast,
	}
}

// seqConfig is the sequencer core's configuration.
func (s *settings) seqConfig(self frame.MemberID, members []frame.MemberInfo, mtu int) seq.Config {
	return seq.Config{
		Group: s.Group, Self: self, Members: members, Method: s.Method, Threshold: s.Threshold,
		Window: s.Window, History: s.History, MTU: mtu, MaxPayload: s.MaxPayload, EtherType: s.EtherType,
		ResendTimeout: seq.Duration(s.ResendTimeout), NackTimeout: seq.Duration(s.NackTimeout),
		HeartbeatInterval: seq.Duration(s.HeartbeatInterval), FailureTimeout: seq.Duration(s.FailureTimeout),
		ElectionRetry: seq.Duration(s.ElectionRetry), Quorum: s.Quorum, Resilience: s.Resilience,
	}
}

// newCore starts the core of the configured order for member self.
func (s *settings) newCore(self frame.MemberID, members []frame.MemberInfo, mtu int) (core.Core, error) {
	return s.protocol.start(s, self, members, mtu)
}
