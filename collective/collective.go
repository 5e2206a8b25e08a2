// Package collective is PCODE's programming interface: the global
// program's calls, multicast and request (Bruck, Dolev, Ho, Orni &
// Strong, §2.1), and the collectives built on them — Bcast, Allgather,
// Alltoall, Barrier — over a reliable.Group of Order PCODE
// (reliable/pcode).
//
// Every process of the program calls the same sequence of Comm methods
// (SPMD). Each call is one program step; the step index travels in every
// multicast, and a request that matches a message of another step or
// target set — a program that breaks A1 — stops the program at every
// member with an error naming both steps. One failure stops the program
// (the paper's fault model): a member silent past the failure timeout
// while another waits on it ends every member's calls with an error,
// never a hang.
//
// A Comm is for one goroutine at a time: the program's calls are issued
// in order, each after the last returned (A2). docs/pcode.md has a guide.
package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/reliable"
)

// Comm is this process's place in the program.
type Comm struct {
	g    *reliable.Group
	self frame.MemberID
	ids  []frame.MemberID
	max  int

	mu     sync.Mutex
	step   uint64
	broken error // an abandoned call: the program cannot go on
	op     []byte
	others [][]byte // per member index: the target set of everyone but that member
}

// ErrProgram is wrapped by the errors of calls no correct program makes
// (a target set naming the caller or a stranger, a request from itself),
// and of every call after one was abandoned.
var ErrProgram = errors.New("collective: incorrect program")

// Join joins the program's group over l (cfg.Order is set to PCODE) and
// returns its Comm.
func Join(ctx context.Context, l link.Link, cfg reliable.Config) (*Comm, error) {
	cfg.Order = reliable.PCODE
	g, err := reliable.Join(ctx, l, cfg)
	if err != nil {
		return nil, err
	}
	return New(g), nil
}

// New returns the Comm of a group joined with Order PCODE.
func New(g *reliable.Group) *Comm {
	c := &Comm{g: g, self: g.Self()}
	for _, m := range g.Members() {
		c.ids = append(c.ids, m.ID)
	}
	slices.Sort(c.ids)
	bitmap := int(c.ids[len(c.ids)-1])/8 + 1
	c.max = g.MaxMessage() - reliable.PCODEOpHeadLen - bitmap
	for _, q := range c.ids {
		var ts []frame.MemberID
		for _, o := range c.ids {
			if o != q {
				ts = append(ts, o)
			}
		}
		c.others = append(c.others, frame.AppendTargets(nil, ts...))
	}
	return c
}

// Self is this process's member id; Members every member's, in order.
func (c *Comm) Self() frame.MemberID      { return c.self }
func (c *Comm) Members() []frame.MemberID { return slices.Clone(c.ids) }

// MaxMessage is the largest message a multicast carries.
func (c *Comm) MaxMessage() int { return c.max }

// Step is the number of program steps taken so far.
func (c *Comm) Step() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.step
}

// Group is the group underneath (status, statistics).
func (c *Comm) Group() *reliable.Group { return c.g }

// Close ends this process's part: once everything it multicast is held
// by every member it leaves the group.
func (c *Comm) Close() error { return c.g.Close() }

func (c *Comm) index(id frame.MemberID) int {
	i, ok := slices.BinarySearch(c.ids, id)
	if !ok {
		return -1
	}
	return i
}

// begin starts step c.step+1 (c.mu held).
func (c *Comm) begin() (uint64, error) {
	if c.broken != nil {
		return 0, c.broken
	}
	c.step++
	return c.step, nil
}

// abandon marks the Comm unusable after a call ended midway: its
// requests' messages would be taken for the next call's.
func (c *Comm) abandon(step uint64, err error) error {
	if c.broken == nil && !errors.Is(err, ErrProgram) {
		c.broken = fmt.Errorf("%w: the call of step %d ended midway (%v); the program cannot go on", ErrProgram, step, err)
	}
	return fmt.Errorf("collective: step %d: %w", step, err)
}

func (c *Comm) targets(step uint64, ids []frame.MemberID) (frame.Targets, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: step %d: empty target set", ErrProgram, step)
	}
	for _, id := range ids {
		if c.index(id) < 0 {
			return nil, fmt.Errorf("%w: step %d: target %d is not a member (members %v)", ErrProgram, step, id, c.ids)
		}
	}
	return frame.AppendTargets(nil, ids...), nil
}

// multicast sends msg to ts at step (c.mu held).
func (c *Comm) multicast(ctx context.Context, step uint64, ts frame.Targets, msg []byte) error {
	if len(msg) > c.max {
		return fmt.Errorf("%w: step %d: message of %d bytes exceeds the %d bytes one frame carries", ErrProgram, step, len(msg), c.max)
	}
	c.op = reliable.AppendPCODEOp(c.op[:0], reliable.PCODEOp{Kind: reliable.PCODEMulticast, Step: step, Targets: ts, Data: msg})
	return c.g.Send(ctx, c.op)
}

// request posts a request (c.mu held); its message is the next Recv.
func (c *Comm) request(ctx context.Context, step uint64, from frame.MemberID, ts frame.Targets) error {
	c.op = reliable.AppendPCODEOp(c.op[:0], reliable.PCODEOp{Kind: reliable.PCODERequest, Step: step, Peer: from, Targets: ts})
	return c.g.Send(ctx, c.op)
}

// receive takes the matched message of the oldest posted request.
func (c *Comm) receive(ctx context.Context, from frame.MemberID) ([]byte, error) {
	m, err := c.g.Recv(ctx)
	if err != nil {
		if errors.Is(err, reliable.ErrClosed) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if m.From != from {
		return nil, fmt.Errorf("collective: a request from %d got a message from %d", from, m.From)
	}
	return m.Data, nil
}

// Multicast is multicast(msg, targets) (§2.1): it returns once PCODE
// holds the message (it waits while the buffer of sent messages or the
// flow window is full). Every target must Request it at the same step;
// every other member must Skip.
func (c *Comm) Multicast(ctx context.Context, targets []frame.MemberID, msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	step, err := c.begin()
	if err != nil {
		return err
	}
	if slices.Contains(targets, c.self) {
		return fmt.Errorf("%w: step %d: member %d multicasts to itself", ErrProgram, step, c.self)
	}
	ts, err := c.targets(step, targets)
	if err != nil {
		return err
	}
	if err := c.multicast(ctx, step, ts, msg); err != nil {
		return c.abandon(step, err)
	}
	return nil
}

// Request is request(from, targets) (§2.1): it returns exactly the
// message from multicast at this step to targets (which hold this
// member and not from).
func (c *Comm) Request(ctx context.Context, from frame.MemberID, targets []frame.MemberID) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	step, err := c.begin()
	if err != nil {
		return nil, err
	}
	if from == c.self || c.index(from) < 0 || !slices.Contains(targets, c.self) || slices.Contains(targets, from) {
		return nil, fmt.Errorf("%w: step %d: member %d requests from %d for %v (want another member, and a target set holding the requester and not the source)", ErrProgram, step, c.self, from, targets)
	}
	ts, err := c.targets(step, targets)
	if err != nil {
		return nil, err
	}
	if err := c.request(ctx, step, from, ts); err != nil {
		return nil, c.abandon(step, err)
	}
	m, err := c.receive(ctx, from)
	if err != nil {
		return nil, c.abandon(step, err)
	}
	return m, nil
}

// Skip is skip (§2.1): this member takes no part in this step's
// multicast.
func (c *Comm) Skip() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.begin()
	return err
}

// Bcast sends root's msg to every member: root returns msg, the others
// the message received. One step.
func (c *Comm) Bcast(ctx context.Context, root frame.MemberID, msg []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	step, err := c.begin()
	if err != nil {
		return nil, err
	}
	r := c.index(root)
	if r < 0 {
		return nil, fmt.Errorf("%w: step %d: root %d is not a member", ErrProgram, step, root)
	}
	if root == c.self {
		if err := c.multicast(ctx, step, c.others[r], msg); err != nil {
			return nil, c.abandon(step, err)
		}
		return msg, nil
	}
	if err := c.request(ctx, step, root, c.others[r]); err != nil {
		return nil, c.abandon(step, err)
	}
	m, err := c.receive(ctx, root)
	if err != nil {
		return nil, c.abandon(step, err)
	}
	return m, nil
}

// Allgather gives every member every member's msg, indexed like
// Members(). One step, in the paper's faster order for PCODE (§6.2): the
// multicast first, then a request for each other member.
func (c *Comm) Allgather(ctx context.Context, msg []byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	step, err := c.begin()
	if err != nil {
		return nil, err
	}
	me := c.index(c.self)
	if err := c.multicast(ctx, step, c.others[me], msg); err != nil {
		return nil, c.abandon(step, err)
	}
	out := make([][]byte, len(c.ids))
	out[me] = msg
	for i, q := range c.ids {
		if q == c.self {
			continue
		}
		if err := c.request(ctx, step, q, c.others[i]); err != nil {
			return nil, c.abandon(step, err)
		}
	}
	for i, q := range c.ids {
		if q == c.self {
			continue
		}
		if out[i], err = c.receive(ctx, q); err != nil {
			return nil, c.abandon(step, err)
		}
	}
	return out, nil
}

// Alltoall sends msgs[i] to member Members()[i] and returns what each
// member sent this one, indexed the same way (msgs[self] is returned as
// is). Each message travels point to point (§5.6). One step.
func (c *Comm) Alltoall(ctx context.Context, msgs [][]byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	step, err := c.begin()
	if err != nil {
		return nil, err
	}
	if len(msgs) != len(c.ids) {
		return nil, fmt.Errorf("%w: step %d: Alltoall of %d messages for %d members", ErrProgram, step, len(msgs), len(c.ids))
	}
	me := c.index(c.self)
	mine := frame.AppendTargets(nil, c.self)
	for i, q := range c.ids {
		if q == c.self {
			continue
		}
		if err := c.multicast(ctx, step, frame.AppendTargets(nil, q), msgs[i]); err != nil {
			return nil, c.abandon(step, err)
		}
	}
	out := make([][]byte, len(c.ids))
	out[me] = msgs[me]
	for _, q := range c.ids {
		if q == c.self {
			continue
		}
		if err := c.request(ctx, step, q, mine); err != nil {
			return nil, c.abandon(step, err)
		}
	}
	for i, q := range c.ids {
		if q == c.self {
			continue
		}
		if out[i], err = c.receive(ctx, q); err != nil {
			return nil, c.abandon(step, err)
		}
	}
	return out, nil
}

// Barrier returns once every member has called it: an Allgather of
// empty messages.
func (c *Comm) Barrier(ctx context.Context) error {
	_, err := c.Allgather(ctx, nil)
	return err
}
