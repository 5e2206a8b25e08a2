package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet"
)

// simWorld is what the simulated deployments (sim, thesisSim) share with
// their clients: virtual time, the scenario's randomness, the clients'
// lossy "UDP" to the replicas, and the history the checks judge.
type simWorld struct {
	t       testing.TB
	net     *testnet.Network
	rng     *rand.Rand
	start   time.Time
	end     time.Time // clients start no op after it
	history []HistoryOp
	failed  []string
	clients []*simClient

	// replicas is how many there are; loss each client datagram's;
	// timeout how long a client waits before it tries the next replica.
	replicas int
	loss     float64
	timeout  time.Duration
	// request hands a client's datagram to replica i, unless it is down;
	// its answers go to reply.
	request func(i int, data []byte, reply func([]byte))
	// expiredOK: a session may expire, so an op answered StatusExpired
	// has an unknown outcome (counted in expired); otherwise that answer
	// is a failure.
	expiredOK bool
	expired   int
}

func (s *simWorld) fail(format string, args ...any) {
	s.failed = append(s.failed, fmt.Sprintf(format, args...))
}

// runClients starts n clients, the first oneShot of them opening a
// session for every op, a millisecond apart, and runs the network until
// they have stopped (the end passed, nothing waiting; at most 4 s past
// the end) and then a second more; an op still waiting then goes into
// the history unanswered.
func (s *simWorld) runClients(n, oneShot int) {
	for i := range n {
		c := &simClient{s: s, idx: i + 1, target: i % s.replicas, seen: map[string][]byte{}, oneShot: i < oneShot}
		s.clients = append(s.clients, c)
		s.net.AfterFunc(time.Duration(i)*time.Millisecond, c.next)
	}
	deadline := s.end.Add(4 * time.Second)
	for s.net.Now().Before(deadline) {
		busy := false
		for _, c := range s.clients {
			busy = busy || c.waiting
		}
		if !busy && s.net.Now().After(s.end) {
			break
		}
		s.net.RunFor(10 * time.Millisecond)
	}
	s.net.RunFor(time.Second) // every live replica catches up
	for _, c := range s.clients {
		if c.waiting {
			s.history = append(s.history, HistoryOp{Client: c.id, Seq: c.seq, Op: c.op, Call: c.call})
		}
	}
}

// simClient runs one op at a time against one replica, failing over to
// the next on a timeout or an unavailable answer. It opens a session
// first, and again after its session expired; a one-shot client opens
// one for every op (as the CLI does).
type simClient struct {
	s       *simWorld
	idx     int
	id      uint64 // the session (0: none)
	seq     uint64
	opens   uint64
	oneShot bool
	target  int
	req     Request
	op      Op // the op req carries, or the one an open is for
	call    int64
	waiting bool
	attempt int
	timer   *testnet.Timer
	seen    map[string][]byte // the last value seen per key (cas)
	values  int
}

// hop is a client datagram's way to a replica or back.
const hop = 200 * time.Microsecond

var simKeys = []string{"x", "y", "z"}

func (c *simClient) next() {
	s := c.s
	if s.net.Now().After(s.end) {
		return
	}
	key := simKeys[s.rng.IntN(len(simKeys))]
	op := Op{Key: key}
	switch k := s.rng.IntN(10); {
	case k < 3:
		op.Kind = OpGet
	case k < 7:
		c.values++
		op.Kind, op.Value = OpPut, fmt.Appendf(nil, "c%d-%d", c.idx, c.values)
	case k < 8:
		op.Kind = OpDelete
	default:
		c.values++
		op.Kind, op.Value, op.Expect = OpCAS, fmt.Appendf(nil, "c%d-%d", c.idx, c.values), c.seen[key]
	}
	c.op = op
	c.call = s.net.Now().Sub(s.start).Nanoseconds()
	c.waiting = true
	c.request()
}

// request sends the op, or first opens a session for it.
func (c *simClient) request() {
	if c.id == 0 {
		c.opens++
		c.req = Request{Open: true, Seq: uint64(c.idx)<<32 | c.opens}
	} else {
		c.seq++
		c.req = Request{Client: c.id, Seq: c.seq, Op: c.op}
	}
	c.send()
}

func (c *simClient) send() {
	s := c.s
	data := AppendRequest(nil, c.req)
	target := c.target
	c.attempt++
	attempt := c.attempt
	if s.rng.Float64() >= s.loss {
		s.net.AfterFunc(hop, func() {
			s.request(target, data, func(reply []byte) {
				if s.rng.Float64() < s.loss {
					return
				}
				s.net.AfterFunc(hop, func() { c.onReply(reply) })
			})
		})
	}
	c.timer = s.net.AfterFunc(s.timeout, func() {
		if c.waiting && c.attempt == attempt {
			c.target = (c.target + 1) % s.replicas
			c.send()
		}
	})
}

func (c *simClient) onReply(data []byte) {
	s := c.s
	p, err := ParseReply(data)
	if err != nil {
		s.fail("client %d: %v", c.idx, err)
		return
	}
	if !c.waiting || p.Client != c.req.Client || p.Seq != c.req.Seq {
		return // a late answer to a retry
	}
	c.timer.Stop()
	switch p.Result.Status {
	case StatusUnavailable:
		c.target = (c.target + 1) % s.replicas
		c.attempt++
		attempt := c.attempt
		s.net.AfterFunc(5*time.Millisecond, func() {
			if c.waiting && c.attempt == attempt {
				c.send()
			}
		})
		return
	case StatusStale, StatusBadRequest:
		s.fail("client %d: %v answered %v", c.idx, c.req, p.Result)
	case StatusExpired:
		if !s.expiredOK {
			s.fail("client %d: %v answered %v", c.idx, c.req, p.Result)
		}
	}
	if c.req.Open {
		if p.Result.Status != StatusOK || len(p.Result.Value) != 8 {
			s.fail("client %d: %v answered %v", c.idx, c.req, p.Result)
			return
		}
		c.id, c.seq = binary.BigEndian.Uint64(p.Result.Value), 0
		c.request()
		return
	}
	c.waiting = false
	h := HistoryOp{Client: c.id, Seq: c.seq, Op: c.op, Call: c.call, Answered: true, Result: p.Result, Return: s.net.Now().Sub(s.start).Nanoseconds()}
	if p.Result.Status == StatusExpired {
		// The op may have been applied by an earlier attempt: its outcome
		// is unknown, and the client opens a new session for the next.
		s.expired++
		h.Answered, h.Return, h.Result = false, 0, Result{}
		c.id = 0
	} else if c.op.Kind == OpGet || p.Result.Status == StatusMismatch {
		c.seen[c.op.Key] = p.Result.Value
	}
	if c.oneShot {
		c.id = 0
	}
	s.history = append(s.history, h)
	s.net.AfterFunc(time.Duration(s.rng.IntN(3000))*time.Microsecond, c.next)
}
