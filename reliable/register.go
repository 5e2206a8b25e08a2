package reliable

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/member"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// registration is a finished registration, whose registrar keeps running
// inside the group's event loop: the server repeats Start until every
// member acknowledged it, members acknowledge every Start they get.
type registration struct {
	r       *member.Registrar
	l       link.Link
	s       *settings
	epoch   time.Time
	self    frame.MemberID
	members []frame.MemberInfo
	// rest are the frames that came after the one that started the group
	// in registration's last batch: views into the link, valid until its
	// next Recv, for the event loop's first turn (Group.first).
	rest []link.Frame
}

// register runs registration (package member) over l until this member
// has the group's member list, the server refuses us, or ctx ends.
func register(ctx context.Context, l link.Link, s *settings) (*registration, error) {
	inc := s.Incarnation
	for inc == 0 {
		inc = rand.Uint32()
	}
	mac := [6]byte(l.HardwareAddr())
	r, err := member.New(member.Config{
		Group: s.Group, Size: s.Size, Server: s.Server, MAC: mac, Incarnation: inc, Nonce: rand.Uint64(), Requested: s.RequestID,
		Window: uint16(min(s.window(), 0xffff)), MTU: uint32(l.MTU()), ConfigHash: configHash(s, l.MTU()),
		Retry: pbp.Duration(s.JoinRetry), EtherType: s.EtherType,
	})
	if err != nil {
		return nil, fmt.Errorf("reliable: registration: %w", err)
	}
	reg := &registration{r: r, l: l, s: s, epoch: time.Now()}
	rx := make([]link.Frame, 16)
	role := "a joiner"
	if s.Server {
		role = "the server"
	}
	for {
		now := reg.now(time.Now())
		r.Tick(now)
		if err := reg.flush(); err != nil {
			return nil, fmt.Errorf("reliable: registration in group %d: %w", s.Group, err)
		}
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("reliable: joining group %d: %w", s.Group, err)
		}
		if self, members, ok := r.Started(); ok {
			reg.self, reg.members = self, members
			s.Logger.Info("rbcast: registered", "group", s.Group, "member", self, "members", len(members))
			return reg, nil
		}
		if err := ctx.Err(); err != nil {
			if s.Server {
				return nil, fmt.Errorf("reliable: registering group %d as the server: %d of %d members joined: %w", s.Group, r.Registered(), s.Size, err)
			}
			if r.Welcomed() {
				return nil, fmt.Errorf("reliable: joining group %d: welcomed, but no Start from the server yet: %w", s.Group, err)
			}
			return nil, fmt.Errorf("reliable: joining group %d: no Welcome from a server after %d Joins (is a server running with this group id and EtherType on the segment?): %w", s.Group, r.Joins(), err)
		}
		// Wake at least every 10 ms to notice ctx: Recv cannot be
		// interrupted.
		wait := time.Now().Add(10 * time.Millisecond)
		if d := r.Deadline(); d != 0 && reg.wall(d).Before(wait) {
			wait = reg.wall(d)
		}
		n, err := l.Recv(wait, rx)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("reliable: registration in group %d as %s: link receive failed: %w", s.Group, role, err)
		}
		now = reg.now(time.Now())
	batch:
		for i := range rx[:n] {
			eth, body, err := frame.SplitEthernet(rx[i].Data, s.EtherType)
			if err != nil {
				continue
			}
			v, err := frame.ParseGroup(body, s.Group)
			if err != nil {
				continue
			}
			switch v.Type() {
			case frame.Join, frame.Welcome, frame.Start:
				r.Step(now, eth.Src(), v)
				if _, _, ok := r.Started(); ok {
					// What follows belongs to the started group: the first
					// Data of members that had the Start before us, often in
					// the same batch. The event loop steps it first, as
					// pcap-replay simulate does, instead of it being dropped
					// here and repaired later (which also made a re-run
					// deliver in another order than the live run).
					reg.rest = rx[i+1 : n]
					break batch
				}
			}
		}
	}
}

func (g *registration) now(t time.Time) pbp.Time { return pbp.Time(t.Sub(g.epoch)) + 1 }

func (g *registration) wall(t pbp.Time) time.Time { return g.epoch.Add(time.Duration(t - 1)) }

// flush sends the registrar's frames and logs refusals.
func (g *registration) flush() error {
	var err error
	if fs := g.r.Ready(); len(fs) > 0 {
		_, err = g.l.Send(fs)
	}
	g.r.Advance()
	for _, x := range g.r.Refusals() {
		g.s.Logger.Warn("rbcast: "+x.String(), "group", g.s.Group)
	}
	return err
}

// attach keeps the registrar running in the group's event loop, which
// shares this registration's epoch.
func (g *registration) attach(e *engine) {
	e.control = func(now pbp.Time, src [6]byte, v frame.View) {
		g.r.Step(now, src, v)
		g.flush()
	}
	if g.s.Server {
		e.heard = g.r.Heard
		e.tick = func(now pbp.Time) {
			if !g.r.Done() {
				g.r.Tick(now)
				g.flush()
			}
		}
		// The Start repeats (every JoinRetry until each member has
		// answered) are timers of the loop like the core's: a loop that
		// sleeps until its next timer would otherwise repeat a lost Start
		// only at a heartbeat or MaxWait (1 s).
		e.tickDeadline = g.r.Deadline
	}
}

// window is the window the core will use.
func (s *settings) window() int {
	switch {
	case s.Window != 0:
		return s.Window
	case s.Order == Total:
		return seq.DefaultWindow
	case s.Mode == PBP1:
		return pbp.DefaultWindowPBP1
	}
	return pbp.DefaultWindowPBP2
}

// configHash hashes (FNV-1a) every setting members must share, defaults
// resolved, so that a joiner configured differently is refused at once
// rather than failing later in obscure ways.
func configHash(s *settings, mtu int) uint64 {
	h := fnv.New64a()
	put := func(v uint64) { h.Write(binary.BigEndian.AppendUint64(nil, v)) }
	dur := func(d time.Duration, def pbp.Duration) {
		if d == 0 {
			d = time.Duration(def)
		}
		put(uint64(d))
	}
	resend := pbp.DefaultResendTimeoutPBP2
	if s.Mode == PBP1 {
		resend = pbp.DefaultResendTimeoutPBP1
	}
	put(uint64(s.Group))
	if s.Order == Total {
		put(uint64(Total))
		put(uint64(s.Method))
		put(uint64(s.window()))
		put(uint64(cmp.Or(s.Threshold, seq.DefaultThreshold)))
		put(uint64(cmp.Or(s.History, seq.DefaultHistory)))
		put(uint64(s.Quorum))
		put(uint64(s.Resilience))
		put(uint64(mtu))
		put(uint64(s.MaxPayload))
		put(uint64(s.EtherType))
		dur(s.ResendTimeout, seq.DefaultResendTimeout)
		dur(s.NackTimeout, seq.DefaultNackTimeout)
		dur(s.HeartbeatInterval, seq.DefaultHeartbeatInterval)
		dur(s.FailureTimeout, seq.DefaultFailureTimeout)
		dur(s.ElectionRetry, seq.DefaultElectionRetry)
		return h.Sum64()
	}
	put(uint64(s.Mode))
	put(uint64(s.window()))
	put(uint64(mtu))
	put(uint64(s.MaxPayload))
	put(uint64(s.EtherType))
	dur(s.AckDelay, pbp.DefaultAckDelay)
	dur(s.ResendTimeout, resend)
	dur(s.NackTimeout, pbp.DefaultNackTimeout)
	dur(s.HeartbeatInterval, pbp.DefaultHeartbeatInterval)
	dur(s.FailureTimeout, pbp.DefaultFailureTimeout)
	return h.Sum64()
}
