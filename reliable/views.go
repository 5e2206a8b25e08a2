package reliable

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/view"
	"github.com/rbcast/rbcast/reliable/vtotal"
)

// ErrRefused is wrapped by Join's error when a running group refused
// this process (its configuration differs, or the group is full).
var ErrRefused = errors.New("reliable: admission refused")

// ErrMinority is wrapped (beside ErrRemoved) by the error a Group stops
// with under Order Total with Views when it could reach no majority of its
// view: only a primary component goes on.
var ErrMinority = view.ErrMinority

// ErrGroupRemoved is wrapped by the error a Group stops with when a
// member removed the group (Group.RemoveGroup).
var ErrGroupRemoved = errors.New("reliable: the group was removed")

// ViewStats are the membership layer's counters (Config.Views): views
// installed, changes coordinated, frames relayed, joiners refused.
type ViewStats = view.Stats

// newViewCore returns this process's membership core (Config.Views):
// every view runs a fresh PBP core built for its members.
func newViewCore(s *settings, l link.Link) (*view.Core, error) {
	mac, err := unicastMAC(l)
	if err != nil {
		return nil, fmt.Errorf("reliable: group %d: %w", s.Group, err)
	}
	inc, nonce := s.Incarnation, uint64(0)
	for inc == 0 {
		inc = rand.Uint32()
	}
	if s.Incarnation != 0 {
		// An incarnation given (the simulator gives one) makes the Joins'
		// nonce a function of the process, so a run repeats exactly.
		nonce = uint64(binary.BigEndian.Uint32(mac[2:]))<<32 | uint64(inc)
	}
	for nonce == 0 {
		nonce = rand.Uint64()
	}
	return s.viewCore(ViewProcess{MAC: mac, MTU: l.MTU(), Incarnation: inc, Nonce: nonce})
}

// ViewProcess is what identifies one process of a group with views
// beyond its Config: its link's MAC and MTU, its incarnation and the
// nonce of its ViewJoins (Join draws both at random when
// Config.Incarnation is 0; a capture holds them in the process's
// ViewJoin frames).
type ViewProcess struct {
	MAC         [6]byte
	MTU         int
	Incarnation uint32
	Nonce       uint64
	// ConfigHash, when not 0, replaces the hash of the Config
	// (ViewConfigHash) in the process's Joins and in its comparison with
	// joiners': pcap-replay gives the captured one.
	ConfigHash uint64
}

// NewViewCore returns the membership core (reliable/view) of process p
// of a group with views, built as Join and NewDriver build it: a PBP core
// per view, the same settings, the same configuration hash (unless p
// gives one). Incarnation and Nonce must be given: the core is then a
// function of cfg and p, so pcap-replay re-runs a captured process
// exactly. ViewLevel puts the group's level above it.
func NewViewCore(cfg Config, p ViewProcess) (*view.Core, error) {
	if !cfg.Views {
		return nil, configErr("NewViewCore needs Views")
	}
	if p.Incarnation == 0 || p.Nonce == 0 {
		return nil, configErr("NewViewCore needs the process's incarnation and Join nonce (they are %d and %d)", p.Incarnation, p.Nonce)
	}
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	return s.viewCore(p)
}

// ViewLevel returns the core a process of cfg (Config.Views) runs over
// its membership core in: in itself under FIFO, and under Order Total
// the Agreed layer reliable/vtotal above it (Config.Safe: Safe), as Join
// and NewDriver build it. in is the membership core, or (pcap-replay) a
// wrapper of it.
func ViewLevel(cfg Config, in vtotal.Inner) core.Core {
	switch {
	case cfg.Order != Total:
		return in
	case cfg.Safe:
		return vtotal.NewSafe(in)
	}
	return vtotal.New(in)
}

// ViewConfigHash is the configuration hash the ViewJoins of cfg's
// processes carry at link MTU mtu (Config.Views): the group and every
// setting members must share, defaults resolved.
func ViewConfigHash(cfg Config, mtu int) (uint64, error) {
	if !cfg.Views {
		return 0, configErr("ViewConfigHash needs Views")
	}
	s, err := cfg.settings()
	if err != nil {
		return 0, err
	}
	return s.viewConfigHash(mtu), nil
}

func (s *settings) viewConfigHash(mtu int) uint64 {
	shared := s.protocol.shared(s, mtu)
	// The level, with the revision of its layer's rules: Agreed and Safe
	// members in one group would deliver at different times, vtotal's
	// revision 2 (the sequencer's own data messages in place, named by
	// no order message) orders differently from 1, and Safe's revision 3
	// reads stability from the acknowledgement matrix where 2 waited for
	// held reports (a revision-2 member would wait for ever for those of
	// a revision-3 one). Revision 4 of both names each data message's
	// level in its kind byte (Safe's are kind 4, which revision 3 cannot
	// decode), so that a message may go at either in a group of either.
	level := "fifo"
	if s.Order == Total {
		level = "agreed/4"
		if s.Safe {
			level = "safe/4"
		}
	}
	// The membership's revision: 2 is the ViewCommit that carries its
	// base's count (the acceptance every member, joiners too, waits
	// for); a member of revision 1 cannot decode its commits, so it is
	// refused at its ViewJoin ("configuration differs") rather than left
	// waiting for a view it can never install.
	return configHash(s.Group, sharedConfig{cfg: struct {
		PBP        any
		MaxMembers int
		Level      string
		Membership string
	}{shared.cfg, s.MaxMembers, level, "views/2"}})
}

// viewCore is the membership core of process p.
func (s *settings) viewCore(p ViewProcess) (*view.Core, error) {
	mtu := p.MTU
	if most := frame.MaxViewMembers(mtu); s.MaxMembers > most {
		return nil, configErr("MaxMembers is %d, but a view's frames hold at most %d members at the link's MTU of %d bytes", s.MaxMembers, most, mtu)
	}
	shared := s.protocol.shared(s, mtu)
	// The largest message is what a Data frame carries beside the
	// acknowledgements of MaxMembers members: the same in every view,
	// so that what Send accepted fits whatever view it goes out in.
	most := make([]frame.MemberInfo, s.MaxMembers)
	for i := range most {
		most[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte{2, 0, 0, 0, byte(i >> 8), byte(i)}, Incarnation: 1}
	}
	t, err := pbp.New(s.pbpConfig(0, most, mtu))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	info := t.Info()
	// A wish for id 0 and no wish come to the same: the lowest free id.
	requested := s.RequestID
	hash := p.ConfigHash
	if hash == 0 {
		hash = s.viewConfigHash(mtu)
	}
	c, err := view.New(view.Config{
		Group: s.Group, MAC: p.MAC, Incarnation: p.Incarnation, Nonce: p.Nonce, Requested: requested,
		ConfigHash: hash, MTU: mtu, EtherType: s.EtherType,
		Found: s.Size, MaxMembers: s.MaxMembers, Window: shared.window,
		Retry: clock.Duration(s.JoinRetry), FailureTimeout: shared.failureTimeout,
		MaxMessage: info.MaxMessage, MaxQueue: max(shared.window, 64), Primary: s.Order == Total,
		Delivers: info.Delivers, InFlight: info.InFlight,
		Start: func(v view.View, self frame.MemberID) (view.Inner, error) {
			cfg := s.pbpConfig(self, v.Members, mtu)
			cfg.ViewID, cfg.Retain, cfg.MaxPayload = v.ID, true, info.MaxMessage
			// Safe delivers a frame once every member holds it: the
			// members acknowledge at once what the sender asks for. In
			// an Agreed group only the Safe messages ask (and the order
			// messages that place them: vtotal, pbp.Core.ProposePrompt),
			// and the members answer those at once too.
			cfg.PromptAcks = s.Safe
			cfg.AnswerAckRequests = s.Order == Total
			return pbp.New(cfg)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return c, nil
}

// viewErr maps the membership core's reason for stopping to the
// runtime's errors.
func (g *Group) viewErr(err error) error {
	switch {
	case errors.Is(err, view.ErrRefused):
		return fmt.Errorf("%w: group %d: %w", ErrRefused, g.cfg.Group, err)
	case errors.Is(err, view.ErrRemoved):
		return fmt.Errorf("%w: group %d member %d: %w", ErrRemoved, g.cfg.Group, g.self, err)
	case errors.Is(err, view.ErrMinority):
		return fmt.Errorf("%w: group %d member %d: %w", ErrRemoved, g.cfg.Group, g.self, err)
	case errors.Is(err, view.ErrGroupRemoved):
		return fmt.Errorf("%w: group %d: %w", ErrGroupRemoved, g.cfg.Group, err)
	}
	return fmt.Errorf("reliable: group %d: %w", g.cfg.Group, err)
}

// RemoveGroup removes the group (Config.Views): every member that hears
// it stops, its Group ending with an error that wraps ErrGroupRemoved,
// and so does this one; processes joining at that moment are refused.
// It returns once this member's loop has ended, or when ctx ends.
func (g *Group) RemoveGroup(ctx context.Context) error {
	g.mu.Lock()
	switch {
	case g.views == nil:
		g.mu.Unlock()
		return fmt.Errorf("reliable: group %d: RemoveGroup needs Config.Views (a static or registered group ends when its members leave)", g.cfg.Group)
	case g.err != nil:
		err := g.err
		g.mu.Unlock()
		return err
	}
	g.views.RemoveGroup()
	g.due = true
	g.wakeLoop()
	g.mu.Unlock()
	select {
	case <-g.done:
	case <-ctx.Done():
		return fmt.Errorf("reliable: group %d: removing: %w", g.cfg.Group, ctx.Err())
	}
	if err := g.Err(); !errors.Is(err, ErrGroupRemoved) {
		return err
	}
	return nil
}

// ProposeUnreliable sends msg at the Unreliable level (Config.Views; see
// Group.SendUnreliable) and, outside a turn (not from Deliver or
// OnEvent), transmits it at once.
func (d *Driver) ProposeUnreliable(now time.Time, msg []byte) error {
	t := d.n.clk.Core(now)
	err := d.n.st.ProposeUnreliable(t, msg)
	if d.inTurn {
		d.due = true
		return err
	}
	if oerr := d.turn(t, nil, false); oerr != nil {
		return oerr
	}
	return err
}
