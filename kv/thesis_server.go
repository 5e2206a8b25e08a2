package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rbcast/rbcast/dsm"
	dsmcore "github.com/rbcast/rbcast/dsm/core"
)

// ThesisServerConfig configures a live thesis-mode replica.
type ThesisServerConfig struct {
	// DSM configures the BDSM node (its Group: the replicas' group,
	// registration with one Server or static Members). ServeThesis sets
	// Unbuffered, Timed and Trace (thesisDSM).
	DSM dsm.Config
	// Thesis is the replica's configuration; Replicas and Self are set
	// from the group (its size and this member's rank).
	Thesis ThesisConfig
	// Clock is the replica's clock (nil: time.Now). Timestamps are
	// compared across replicas: the clocks must agree within Thesis.Eps.
	Clock func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// DSMJoinFunc joins the replicas' BDSM group: dsm.Join over the link the
// program owns (kv touches no link).
type DSMJoinFunc func(ctx context.Context, cfg dsm.Config) (*dsm.Node, error)

// ServeThesis runs one thesis-mode replica: it joins the BDSM group,
// creates its segment (key rank+1: Q, D and a heartbeat, written
// unbuffered), and answers the clients' requests arriving on conn. The
// group's members are the replicas, all started together; one that
// stops is not replaced (thesis mode has no state transfer: a replica
// started again finds the registration group full, and ServeThesis
// returns the error saying so). Updates that arrive before the replica
// serves (the others may start first) wait for it. It returns when ctx
// ends (nil) or the node fails.
func ServeThesis(ctx context.Context, join DSMJoinFunc, conn net.PacketConn, cfg ThesisServerConfig) error {
	defer conn.Close()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &thesisServer{cfg: cfg, conn: conn, wake: make(chan struct{}, 1), reqs: make(chan thesisReq, 1024)}
	dn, err := join(ctx, thesisDSM(cfg.DSM, s.trace))
	if err != nil {
		return fmt.Errorf("kv: thesis mode: joining the group (a replica cannot rejoin a running group: thesis mode has no state transfer): %w", err)
	}
	defer dn.Exit()
	tc := cfg.Thesis
	tc.Replicas, tc.Self = dn.Size(), dn.Rank()
	if tc.OnRefused == nil {
		tc.OnRefused = func(what string) {
			cfg.Logger.Warn("kv: thesis mode: a late copy (the timing assumptions do not hold, unless its writer crashed)", "copy", what)
		}
	}
	node, err := NewThesisNode(tc)
	if err != nil {
		return err
	}
	tc = node.Config()
	if tc.SlotSize > dn.MaxMessage()-dsmcore.UpdateOverhead {
		return fmt.Errorf("kv: thesis mode: slot size %d, but a location carries at most %d bytes here", tc.SlotSize, dn.MaxMessage()-dsmcore.UpdateOverhead)
	}
	seg, err := dn.CreateSegment(uint32(tc.Self+1), tc.Locations(), tc.SlotSize)
	if err != nil {
		return fmt.Errorf("kv: thesis mode: creating this replica's segment %d: %w", tc.Self+1, err)
	}
	s.mu.Lock()
	s.node = node
	s.mu.Unlock()
	cfg.Logger.Info("kv: thesis replica serving", "rank", tc.Self, "replicas", tc.Replicas, "delta", tc.Delta(), "tr", tc.Tr, "eps", tc.Eps, "tc", tc.Tc)
	go s.read()
	bad := malformedLog{log: cfg.Logger, every: malformedEvery}
	defer func() { bad.flush(cfg.Clock()) }()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case q := <-s.reqs:
			node.Request(cfg.Clock(), q.data, q.reply)
		case <-s.wake:
		case <-timer.C:
		}
		s.mu.Lock()
		ups := s.updates
		s.updates = nil
		s.mu.Unlock()
		now := cfg.Clock()
		for _, u := range ups {
			if err := node.Remote(u.at, u.from, u.loc, u.data); err != nil {
				bad.note(now, u.from, err)
			}
		}
		bad.tick(now)
		node.Tick(now)
		for _, w := range node.Writes() {
			if err := seg.Write(w.Loc, w.Data); err != nil {
				return fmt.Errorf("kv: thesis mode: writing location %d: %w", w.Loc, err)
			}
		}
		timer.Reset(max(0, time.Until(node.NextDeadline()), 200*time.Microsecond))
	}
}

// thesisDSM is the BDSM configuration of a thesis-mode replica: c with
// every write sent at once (Unbuffered), trace, room to queue writes,
// and Timed. Thesis mode's correctness rests on bounds on how late a
// replica's writes reach the others (t_r, ε): a copy adopted late is
// refused. So no WC hold may stop a replica's window (it would delay
// its writes to every replica, up to the hold's bound): dsm.Config.Timed.
// Thesis mode crosses no barrier today, so WC never holds anything of it
// either way; Timed keeps that true if it ever does.
func thesisDSM(c dsm.Config, trace func(dsm.TraceEvent)) dsm.Config {
	c.Unbuffered = true
	c.Timed = true
	c.Trace = trace
	if c.OutboxLimit == 0 {
		// The serving loop must not block in a write while updates wait
		// for it: their adoption has a deadline.
		c.OutboxLimit = 1 << 16
	}
	return c
}

type thesisReq struct {
	data  []byte
	reply func([]byte)
}

type thesisUpdate struct {
	from, loc int
	data      []byte
	at        time.Time // when dsm applied it
}

type thesisServer struct {
	cfg     ThesisServerConfig
	conn    net.PacketConn
	wake    chan struct{}
	reqs    chan thesisReq
	mu      sync.Mutex
	node    *ThesisNode // set once serving
	updates []thesisUpdate
}

// trace takes the updates dsm applies (with the dsm node's lock held:
// it only queues them for the serving loop).
func (s *thesisServer) trace(ev dsm.TraceEvent) {
	if ev.Kind != dsmcore.EvUpdate || ev.Key == 0 {
		return
	}
	s.mu.Lock()
	s.updates = append(s.updates, thesisUpdate{from: int(ev.Key) - 1, loc: ev.Location, data: append([]byte(nil), ev.Data...), at: s.cfg.Clock()})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// read passes the clients' datagrams to the serving loop.
func (s *thesisServer) read() {
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
		s.reqs <- thesisReq{data: data, reply: func(b []byte) { s.conn.WriteTo(b, addr) }}
	}
}

// malformedEvery is how often malformedLog logs a replica's malformed
// entries after its first.
const malformedEvery = 10 * time.Second

// malformedLog logs the entries of other replicas that Remote refused:
// each replica's first in full, then at most one line per replica every
// `every` counting the others and naming the last. A replica configured
// with other slots has every update refused; logged one by one, they
// filled the log at the group's update rate. A count waits for the next
// entry, the serving loop's next tick (tick) or the server's end (flush),
// whichever comes first: a replica that stops sending bad entries has its
// last ones counted still.
type malformedLog struct {
	log   *slog.Logger
	every time.Duration
	peers map[int]*malformedPeer
}

type malformedPeer struct {
	since   int       // refused since the last line
	lastErr error     // the last one refused
	last    time.Time // when the last line was logged
}

func (m *malformedLog) note(now time.Time, from int, err error) {
	p := m.peers[from]
	if p == nil {
		if m.peers == nil {
			m.peers = map[int]*malformedPeer{}
		}
		m.peers[from] = &malformedPeer{last: now}
		m.log.Warn("kv: thesis mode: a malformed entry (further ones from this replica are counted, a line every "+m.every.String()+")", "replica", from, "err", err)
		return
	}
	p.since++
	p.lastErr = err
	if now.Sub(p.last) >= m.every {
		m.line(now, from, p)
	}
}

// tick logs the counts whose replica's last line is an interval old.
func (m *malformedLog) tick(now time.Time) {
	for _, from := range slices.Sorted(maps.Keys(m.peers)) {
		if p := m.peers[from]; p.since > 0 && now.Sub(p.last) >= m.every {
			m.line(now, from, p)
		}
	}
}

// flush logs every count not logged yet.
func (m *malformedLog) flush(now time.Time) {
	for _, from := range slices.Sorted(maps.Keys(m.peers)) {
		if p := m.peers[from]; p.since > 0 {
			m.line(now, from, p)
		}
	}
}

func (m *malformedLog) line(now time.Time, from int, p *malformedPeer) {
	m.log.Warn("kv: thesis mode: malformed entries", "replica", from, "count", p.since, "last", p.lastErr)
	p.since, p.lastErr, p.last = 0, nil, now
}
