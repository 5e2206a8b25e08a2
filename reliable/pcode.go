package reliable

import (
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pcode"
)

// PCODEConfig is Order PCODE's own settings (see pcode.Config); zero
// fields mean pcode's defaults. Config.Window is P1's buffer of sent
// messages (pcode.Config.SendBuffer) and Config.FailureTimeout the
// failure timeout; every member must use the same values.
type PCODEConfig struct {
	// EarlyBuffer: messages that arrived too early, kept (pcode.
	// NoEarlyBuffer: none). FlowWindow and StatusWindow: §5.2, §5.5.
	EarlyBuffer, FlowWindow, StatusWindow int
	// InitialRTT, MinTimer, MaxTimer: the NACK timers (§5.7).
	InitialRTT, MinTimer, MaxTimer time.Duration
}

func init() {
	protocols[PCODE] = protocol{
		check: func(c *Config) error { return c.pcodeOnly() },
		shared: func(s *settings, mtu int) sharedConfig {
			c := s.pcodeConfig(frame.NoMember, nil, mtu).Shared()
			return sharedConfig{cfg: c, window: c.SendBuffer, failureTimeout: c.FailureTimeout}
		},
		start: func(s *settings, self frame.MemberID, members []frame.MemberInfo, mtu int) (core.Core, error) {
			c, err := pcode.New(s.pcodeConfig(self, members, mtu))
			if err != nil {
				return nil, configErr("Order PCODE: %v", err)
			}
			return c, nil
		},
	}
}

// pcodeOnly refuses the settings of the other orders under PCODE.
func (c *Config) pcodeOnly() error {
	switch {
	case c.Mode != PBP2:
		return configErr("Mode is %v, but Order PCODE has no PBP mode (leave Mode zero)", c.Mode)
	case c.Method != Hybrid || c.Threshold != 0 || c.History != 0 || c.Quorum != 0 || c.ElectionRetry != 0 || c.Resilience != SafeMajority:
		return configErr("Method, Threshold, History, Quorum, ElectionRetry and Resilience apply to Order Total only (Order is PCODE)")
	case c.AckDelay != 0 || c.BundleDelay != 0 || c.ResendTimeout != 0 || c.NackTimeout != 0 || c.HeartbeatInterval != 0:
		return configErr("AckDelay, BundleDelay, ResendTimeout, NackTimeout and HeartbeatInterval do not apply to Order PCODE: its timers follow the measured round trip (PCODE.InitialRTT, MinTimer, MaxTimer)")
	case c.Unicast:
		return configErr("Unicast applies to Order FIFO only (Order is PCODE)")
	case c.Window < 0 || c.Window > pcode.MaxBuffer:
		return configErr("Window is %d, want 0..%d under Order PCODE (0 means %d)", c.Window, pcode.MaxBuffer, pcode.DefaultSendBuffer)
	case c.PCODE.InitialRTT < 0 || c.PCODE.MinTimer < 0 || c.PCODE.MaxTimer < 0:
		return configErr("PCODE's durations must be >= 0 (InitialRTT %v, MinTimer %v, MaxTimer %v)", c.PCODE.InitialRTT, c.PCODE.MinTimer, c.PCODE.MaxTimer)
	}
	return nil
}

// pcodeConfig is the PCODE core's configuration.
func (s *settings) pcodeConfig(self frame.MemberID, members []frame.MemberInfo, mtu int) pcode.Config {
	p := s.PCODE
	return pcode.Config{
		Group: s.Group, Self: self, Members: members, MTU: mtu, MaxPayload: s.MaxPayload, EtherType: s.EtherType,
		SendBuffer: s.Window, EarlyBuffer: p.EarlyBuffer, FlowWindow: p.FlowWindow, StatusWindow: p.StatusWindow,
		InitialRTT: pcode.Duration(p.InitialRTT), MinTimer: pcode.Duration(p.MinTimer), MaxTimer: pcode.Duration(p.MaxTimer),
		FailureTimeout: pcode.Duration(s.FailureTimeout),
	}
}

// What package collective needs of the PCODE core, re-exported so that
// programs above reliable import reliable only.

// PCODEOp is one program call under Order PCODE: Send takes its encoding
// (AppendPCODEOp), and a request's delivery is its matched message.
type PCODEOp = pcode.Op

const (
	PCODEMulticast = pcode.OpMulticast
	PCODERequest   = pcode.OpRequest
	// PCODEOpHeadLen is an op's fixed part; a multicast's largest message
	// is MaxMessage less it and the target bitmap.
	PCODEOpHeadLen = pcode.OpHeadLen
)

// AppendPCODEOp appends the encoding of op to b.
func AppendPCODEOp(b []byte, op PCODEOp) []byte { return pcode.AppendOp(b, op) }
