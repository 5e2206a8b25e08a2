package reliable

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
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
//
// The settings are written by appendSetting, which leaves out every
// field at its zero value: a field added to a core's Config whose zero
// value keeps the old behaviour (as pbp.Config.Unicast did) leaves the
// hash of a group that does not set it as it was, so daemons built
// before and after the field was added still admit each other.
func configHash(group uint32, shared sharedConfig) uint64 {
	h := fnv.New64a()
	b := fmt.Appendf(nil, "group %d: ", group)
	h.Write(appendSetting(b, reflect.ValueOf(shared.cfg)))
	return h.Sum64()
}

// appendSetting appends a canonical text of v: a struct as its type's
// name (none for an unnamed one) and its non-zero fields by name, what
// an interface holds with its type (but a named struct), numbers in
// decimal, and never a String method's text, so renaming a constant
// changes no hash.
func appendSetting(b []byte, v reflect.Value) []byte {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return append(b, "nil"...)
		}
		// What an interface holds is written with its type unless that
		// is a named struct (whose name is written): otherwise a Mode
		// and an int of one value, a slice and an array of the same
		// elements, or nil pointers of two types would write alike.
		e := v.Elem()
		if e.Kind() != reflect.Struct || e.Type().Name() == "" {
			b = append(append(append(b, '('), e.Type().String()...), ')')
		}
		return appendSetting(b, e)
	case reflect.Pointer:
		if v.IsNil() {
			return append(b, "nil"...)
		}
		return appendSetting(b, v.Elem())
	case reflect.Struct:
		t := v.Type()
		if t.Name() != "" {
			b = append(b, t.PkgPath()+"."+t.Name()...)
		}
		b = append(b, '{')
		for i := range v.NumField() {
			if f := v.Field(i); !f.IsZero() {
				b = append(b, t.Field(i).Name+":"...)
				b = appendSetting(b, f)
				b = append(b, ' ')
			}
		}
		return append(b, '}')
	case reflect.Array, reflect.Slice:
		b = append(b, '[')
		for i := range v.Len() {
			b = appendSetting(b, v.Index(i))
			b = append(b, ' ')
		}
		return append(b, ']')
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.String:
		return strconv.AppendQuote(b, v.String())
	default:
		// Floats and maps (fmt sorts a map's keys); no core's Config has
		// one today.
		return fmt.Appendf(b, "%v", v)
	}
}
