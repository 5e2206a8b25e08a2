package reliable

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/clock/wall"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/member"
)

// registration is a finished registration, whose registrar keeps running
// in the group's event loop (member.Attach): the server repeats Start
// until every member acknowledged it, members acknowledge every Start they
// get.
type registration struct {
	r       *member.Registrar
	clk     wall.Clock
	self    frame.MemberID
	members []frame.MemberInfo
	// rest are the frames that came after the one that started the group
	// in registration's last batch: views into the link, valid until its
	// next Recv, for the event loop's first turn (Group.first).
	rest []link.Frame
}

// register runs registration (package member) over l until this member
// has the group's member list, the server refuses us, or ctx ends. The
// registrar runs on a core.Stepper like every core.
func register(ctx context.Context, l link.Link, s *settings) (*registration, error) {
	inc := s.Incarnation
	for inc == 0 {
		inc = rand.Uint32()
	}
	mac, err := unicastMAC(l)
	if err != nil {
		return nil, fmt.Errorf("reliable: registration in group %d: %w", s.Group, err)
	}
	shared := s.protocol.shared(s, l.MTU())
	r, err := member.New(member.Config{
		Group: s.Group, Size: s.Size, Server: s.Server, MAC: mac, Incarnation: inc, Nonce: rand.Uint64(), Requested: s.RequestID,
		Window: uint16(min(shared.window, 0xffff)), MTU: uint32(l.MTU()), ConfigHash: configHash(s.Group, shared),
		Retry: clock.Duration(s.JoinRetry), EtherType: s.EtherType,
	})
	if err != nil {
		return nil, fmt.Errorf("reliable: registration: %w", err)
	}
	reg := &registration{r: r, clk: wall.Clock{Epoch: time.Now()}}
	st := core.NewStepper(r, s.Group, s.EtherType)
	if link.SealsCRC(l) {
		st.SkipCRC()
	}
	rx := make([]link.Frame, 16)
	role := "a joiner"
	if s.Server {
		role = "the server"
	}
	flush := func() error {
		rd := st.Ready()
		var err error
		if len(rd.Frames) > 0 {
			_, err = l.Send(rd.Frames)
		}
		for _, ev := range rd.Events {
			s.Logger.Warn("rbcast: "+ev.Reason, "group", s.Group)
		}
		st.Advance()
		return err
	}
	for {
		st.Tick(reg.clk.Core(time.Now()))
		if err := flush(); err != nil {
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
		if d := reg.clk.Wall(st.Deadline()); !d.IsZero() && d.Before(wait) {
			wait = d
		}
		n, err := l.Recv(wait, rx)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("reliable: registration in group %d as %s: link receive failed: %w", s.Group, role, err)
		}
		now := reg.clk.Core(time.Now())
		for i := range rx[:n] {
			if stepFrame(st, now, &rx[i]) != nil {
				continue
			}
			if _, _, ok := r.Started(); ok {
				// What follows belongs to the started group: the first
				// Data of members that had the Start before us, often in
				// the same batch. The event loop steps it first, as
				// pcap-replay simulate does, instead of it being dropped
				// here and repaired later (which also made a re-run
				// deliver in another order than the live run).
				reg.rest = rx[i+1 : n]
				break
			}
		}
	}
}

// unicastMAC is l's hardware address, which registration names this
// member by: it must be a 6-byte unicast Ethernet address.
func unicastMAC(l link.Link) ([6]byte, error) {
	hw := l.HardwareAddr()
	if len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("the link has no Ethernet address (%q, %d bytes): registration names members by their unicast MAC; use an Ethernet interface, or static Members", hw.String(), len(hw))
	}
	mac := [6]byte(hw)
	if mac[0]&1 != 0 || mac == [6]byte{} {
		return mac, fmt.Errorf("the link's address %x is not a unicast Ethernet address: registration names members by their unicast MAC", mac)
	}
	return mac, nil
}

// configHash hashes (FNV-1a) the group id and every setting members must
// share, defaults resolved (the core's Shared configuration), so that a
// joiner configured differently is refused at once rather than failing
// later in obscure ways.
func configHash(group uint32, shared sharedConfig) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "group %d: %T %+v", group, shared.cfg, shared.cfg)
	return h.Sum64()
}
