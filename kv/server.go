package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// ServerConfig configures a live replica.
type ServerConfig struct {
	// Group is the replicas' group config; Serve sets Views, Order Total,
	// Safe, Deliver and OnEvent. Incarnation 0 derives one from the clock
	// (each rejoin takes a new one).
	Group reliable.Config
	// Machine returns a fresh state machine for each run of the replica
	// (nil: NewStore).
	Machine func() StateMachine
	// MaxSessions is NodeConfig.MaxSessions: the session table's size
	// (0: DefaultMaxSessions), the same at every replica.
	MaxSessions int
	// OnApply is NodeConfig.OnApply (called with the server's lock held).
	OnApply func(q Request, result []byte, fresh bool)
	// OnRestore is NodeConfig.OnRestore (called with the server's lock
	// held).
	OnRestore func(applied, ordered uint64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// JoinFunc joins a group: reliable.Join over the replica's link, which
// the program that owns the link binds (kv itself touches no link:
// DESIGN.md, only the runtime does).
type JoinFunc func(ctx context.Context, cfg reliable.Config) (*reliable.Group, error)

// Serve runs one replica: it joins the group with join, answers the
// clients' requests arriving on conn, and, when the group goes on without
// it (ErrRemoved, ErrMinority), joins again as a new incarnation that
// receives a snapshot. The state it held is kept as its candidate
// (NodeConfig.Candidate): if the whole group stopped, the replicas
// re-form it from the most advanced candidate. It returns when ctx ends
// (nil) or a join fails.
func Serve(ctx context.Context, join JoinFunc, conn net.PacketConn, cfg ServerConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Machine == nil {
		cfg.Machine = func() StateMachine { return NewStore() }
	}
	s := &server{cfg: cfg, conn: conn, kick: make(chan struct{}, 1)}
	go s.read()
	defer conn.Close()
	for {
		err := s.run(ctx, join)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, reliable.ErrRemoved) && !errors.Is(err, reliable.ErrMinority) {
			return err
		}
		cfg.Logger.Warn("kv: the group went on without this replica; joining again", "err", err)
		if cfg.Group.Incarnation != 0 {
			cfg.Group.Incarnation++
			s.cfg.Group.Incarnation = cfg.Group.Incarnation
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type server struct {
	cfg  ServerConfig
	conn net.PacketConn
	mu   sync.Mutex
	node *Node // nil between runs
	kick chan struct{}
	// candidate is the state the last run held when it stopped (nil:
	// none), for the next run.
	candidate []byte
}

// run is one membership of the group, from Join until it stops.
func (s *server) run(ctx context.Context, join JoinFunc) error {
	var node *Node
	gcfg := s.cfg.Group
	gcfg.Views, gcfg.Order, gcfg.Safe = true, reliable.Total, true
	gcfg.Deliver = func(from frame.MemberID, data []byte) {
		s.mu.Lock()
		node.Deliver(from, data)
		s.mu.Unlock()
		s.wake()
	}
	gcfg.OnEvent = func(ev reliable.Event) {
		s.mu.Lock()
		node.OnEvent(ev)
		s.mu.Unlock()
		s.wake()
	}
	// The node exists before Join: deliveries may start before it returns.
	// Its MaxMessage is fixed below, once the group knows it.
	n, err := NewNode(NodeConfig{Machine: s.cfg.Machine(), MaxMessage: max(chunkHeader, announceSize) + 1, Replicas: gcfg.Size,
		MaxSessions: s.cfg.MaxSessions, Candidate: s.candidate, OnApply: s.cfg.OnApply, OnRestore: s.cfg.OnRestore})
	if err != nil {
		return err
	}
	node = n
	g, err := join(ctx, gcfg)
	if err != nil {
		return fmt.Errorf("kv: joining group %d: %w", gcfg.Group, err)
	}
	s.mu.Lock()
	node.cfg.MaxMessage = g.MaxMessage()
	s.node = node
	s.mu.Unlock()
	s.cfg.Logger.Info("kv: replica joined", "member", g.Self(), "view", g.Stats().View)
	sendErr := make(chan error, 1)
	go func() { sendErr <- s.send(ctx, g, node) }()
	select {
	case <-ctx.Done():
		g.Close()
	case <-g.Done():
	case err := <-sendErr:
		s.cfg.Logger.Warn("kv: sending to the group failed", "err", err)
		g.Close()
	}
	<-g.Done()
	s.mu.Lock()
	node.Stop()
	s.node = nil
	s.candidate = node.Candidate()
	s.mu.Unlock()
	return g.Err()
}

func (s *server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// send passes what the node wants sent to the group, in order.
func (s *server) send(ctx context.Context, g *reliable.Group, node *Node) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.Done():
			return nil
		case <-s.kick:
		}
		s.mu.Lock()
		out := node.Outbox()
		s.mu.Unlock()
		for _, m := range out {
			if err := g.Send(ctx, m); err != nil {
				if ctx.Err() != nil || errors.Is(err, reliable.ErrClosed) {
					return nil
				}
				return err
			}
		}
	}
}

// read answers the clients' datagrams.
func (s *server) read() {
	buf := make([]byte, 65536)
	for {
		n, addr, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		data := append([]byte(nil), buf[:n]...)
		reply := func(b []byte) { s.conn.WriteTo(b, addr) }
		s.mu.Lock()
		if s.node == nil {
			s.mu.Unlock()
			q, err := ParseRequest(data)
			if err == nil {
				reply(AppendReply(nil, Reply{Client: q.Client, Seq: q.Seq, Result: Result{Status: StatusUnavailable}}))
			}
			continue
		}
		s.node.Request(data, reply)
		s.mu.Unlock()
		s.wake()
	}
}
