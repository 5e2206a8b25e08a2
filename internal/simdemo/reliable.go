package simdemo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
)

// GroupConfig is the reliable-broadcast scenario: a PBP group on the
// simulated lossy segment, every member broadcasting Messages messages.
type GroupConfig struct {
	Seed     uint64
	Members  int
	Messages int // messages each member broadcasts
	MinSize  int // message sizes vary from MinSize to the largest one frame carries
	MTU      int
	Mode     reliable.Mode
	// Impairments as in Config; the slow member is stepped only every
	// SlowEvery, as a process that is often descheduled, and has a
	// receive queue of SmallQueue frames.
	Impairments
	SmallQueue int
	Progress   int
}

// maxMessages bounds GroupConfig.Messages: the run counts every member's
// deliveries from every other in an int, and a run 60 virtual seconds
// long (RunGroup's limit) delivers far fewer.
const maxMessages = 10_000_000

// DefaultGroup is the embedded default of `make demo`.
func DefaultGroup() GroupConfig {
	return GroupConfig{
		Seed: 1, Members: 8, Messages: 2000, MinSize: 16, MTU: 1500, Mode: reliable.PBP2,
		Impairments: Impairments{Loss: 0.02, BurstMember: 3, SlowMember: 7, SlowEvery: 500 * time.Microsecond,
			Duplicate: 0.005, Reorder: 0.01, Corrupt: 0.002, Jitter: 20 * time.Microsecond},
		SmallQueue: 64,
		Progress:   10,
	}
}

// GroupMember is what one member of the group did and saw.
type GroupMember struct {
	ID        frame.MemberID
	Proposed  int
	Delivered int // messages from the others
	Expected  int
	Wrong     int // messages out of FIFO order, duplicated or with other bytes: must be 0
	Stats     reliable.Stats
	Segment   testnet.Counters // what the segment did to frames on their way in
	Events    []reliable.Event
	Completed time.Duration // virtual time when it had everything
}

// GroupResult is the outcome of one run.
type GroupResult struct {
	Members   []GroupMember
	TraceHash uint64
	Events    uint64
	Duration  time.Duration // virtual time until every member had every message
	Finished  bool
}

// groupMessage writes the deterministic content of message idx from
// sender, with a size between minSize and max.
func groupMessage(dst []byte, from frame.MemberID, idx, minSize, max int) []byte {
	x := uint64(from)<<40 | uint64(idx)<<1 | 1
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	size := minSize + int(next()%uint64(max-minSize+1))
	dst = dst[:0]
	for range size {
		dst = append(dst, byte(next()))
	}
	return dst
}

// Check reports what RunGroup would refuse in cfg, naming rbcast-sim's
// flags, so that the command refuses it before it prints anything.
func (cfg GroupConfig) Check() error {
	switch {
	case cfg.Members < 2 || cfg.Members > 64:
		return fmt.Errorf("members = %d, want 2..64", cfg.Members)
	case cfg.Messages < 1:
		return fmt.Errorf("messages = %d, want at least 1", cfg.Messages)
	case cfg.Messages > maxMessages:
		return fmt.Errorf("messages = %d, want at most %d", cfg.Messages, maxMessages)
	case cfg.MinSize < 1:
		return fmt.Errorf("min-size = %d, want at least 1", cfg.MinSize)
	}
	if err := validMTU(cfg.MTU); err != nil {
		return err
	}
	return cfg.Impairments.validate(cfg.Members)
}

// RunGroup plays the reliable scenario and checks what every member
// delivered as it arrives.
func RunGroup(cfg GroupConfig, progress io.Writer) (*GroupResult, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	net, err := testnet.New(cfg.Seed, testnet.Config{})
	if err != nil {
		return nil, err
	}
	hash := testnet.NewTraceHash()
	net.Trace(hash.Add)
	var eps []*testnet.Endpoint
	var members []frame.MemberInfo
	for i := range cfg.Members {
		in := testnet.Impairment{Loss: cfg.Loss, Duplicate: cfg.Duplicate, Reorder: cfg.Reorder,
			ReorderDelay: 200 * time.Microsecond, Jitter: cfg.Jitter, Corrupt: cfg.Corrupt}
		if i == cfg.BurstMember {
			in.Burst = testnet.GilbertElliott{GoodToBad: 0.005, BadToGood: 0.2, LossBad: 1}
		}
		ec := testnet.EndpointConfig{MTU: cfg.MTU, In: in}
		if i == cfg.SlowMember {
			ec.QueueLen = cfg.SmallQueue
		}
		ep, err := net.Attach(ec)
		if err != nil {
			return nil, err
		}
		eps = append(eps, ep)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	res := &GroupResult{Members: make([]GroupMember, cfg.Members)}
	drivers := make([]*reliable.Driver, cfg.Members)
	// next[i][j]: the index of the next message member i expects from j.
	next := make([][]int, cfg.Members)
	start := net.Now()
	var want []byte
	remaining := cfg.Members * (cfg.Members - 1) * cfg.Messages
	for i, ep := range eps {
		i := i
		m := &res.Members[i]
		m.ID = frame.MemberID(i + 1)
		m.Expected = (cfg.Members - 1) * cfg.Messages
		next[i] = make([]int, cfg.Members+1)
		d, err := reliable.NewDriver(ep, reliable.Config{Group: 0xde0001, Members: members, Self: m.ID, Mode: cfg.Mode, Logger: quiet,
			Deliver: func(from frame.MemberID, data []byte) {
				idx := next[i][from]
				want = groupMessage(want, from, idx, cfg.MinSize, drivers[from-1].MaxMessage())
				if idx >= cfg.Messages || !bytes.Equal(data, want) {
					m.Wrong++
					return
				}
				next[i][from]++
				m.Delivered++
				remaining--
				if m.Delivered == m.Expected {
					m.Completed = net.Now().Sub(start)
				}
			},
			OnEvent: func(ev reliable.Event) { m.Events = append(m.Events, ev) },
		}, start)
		if err != nil {
			return nil, err
		}
		if max := d.MaxMessage(); cfg.MinSize > max {
			return nil, fmt.Errorf("min-size = %d, want at most %d, the largest message one frame carries at MTU %d", cfg.MinSize, max, cfg.MTU)
		}
		drivers[i] = d
		if i == cfg.SlowMember && cfg.SlowEvery > 0 {
			ep.Bind(&slowNode{d: d, every: cfg.SlowEvery})
		} else {
			ep.Bind(d)
		}
	}
	// Every member proposes as fast as its window allows; the simulator
	// advances in small steps between attempts.
	proposed := make([]int, cfg.Members)
	var msg []byte
	const tick = 100 * time.Microsecond
	limit := start.Add(60 * time.Second)
	lastReport := -1
	total := cfg.Members * (cfg.Members - 1) * cfg.Messages
	for remaining > 0 && net.Now().Before(limit) {
		for i, d := range drivers {
			for proposed[i] < cfg.Messages {
				msg = groupMessage(msg, frame.MemberID(i+1), proposed[i], cfg.MinSize, d.MaxMessage())
				if err := d.Propose(net.Now(), msg); err != nil {
					if reliable.IsWindowFull(err) {
						break
					}
					return nil, fmt.Errorf("member %d: %w", i+1, err)
				}
				proposed[i]++
				res.Members[i].Proposed++
			}
		}
		net.RunFor(tick)
		if cfg.Progress > 0 && progress != nil {
			done := total - remaining
			if step := done * cfg.Progress / total; step > lastReport {
				lastReport = step
				var sent, retx, nacks uint64
				for _, d := range drivers {
					st := d.Stats()
					sent += st.Protocol.Proposed
					retx += st.Protocol.Retransmitted
					nacks += st.Protocol.RepairRequests
				}
				fmt.Fprintf(progress, "  t=%8.3fms  proposed %6d/%d  delivered %7d/%d (%3.0f%%)  retransmitted %5d  NACKs %5d\n",
					float64(net.Now().Sub(start))/1e6, sent, cfg.Members*cfg.Messages, done, total, 100*float64(done)/float64(total), retx, nacks)
			}
		}
	}
	res.Finished = remaining == 0
	res.Duration = net.Now().Sub(start)
	res.TraceHash, res.Events = hash.Sum(), hash.Events()
	for i, d := range drivers {
		res.Members[i].Stats = d.Stats()
		res.Members[i].Segment = eps[i].Counters(testnet.In)
	}
	return res, nil
}

// VerifyGroup checks reliable broadcast's guarantees on a run: every
// member delivered every other member's messages exactly once, in each
// sender's order, with the bytes sent, and no member was removed.
func VerifyGroup(r *GroupResult) (lines []string, err error) {
	var errs []error
	var delivered, corrupt int
	var dropped uint64
	for _, m := range r.Members {
		delivered += m.Delivered
		corrupt += int(m.Stats.BadFrames.Checksum)
		dropped += m.Segment.Dropped()
		if m.Wrong != 0 {
			errs = append(errs, fmt.Errorf("member %d delivered %d messages out of order, twice or with other bytes", m.ID, m.Wrong))
		}
		if m.Delivered != m.Expected {
			errs = append(errs, fmt.Errorf("member %d delivered %d of %d messages", m.ID, m.Delivered, m.Expected))
		}
		for _, ev := range m.Events {
			errs = append(errs, fmt.Errorf("member %d: unexpected membership event %v", m.ID, ev))
		}
	}
	lines = append(lines,
		fmt.Sprintf("exactly once, in order: %d messages delivered, each once, in its sender's order, byte for byte", delivered),
		fmt.Sprintf("repaired:    the segment dropped %d frames on their way in; every message they carried arrived anyway", dropped),
		fmt.Sprintf("corruption:  %d corrupted frames rejected by the CRC32C check before the protocol saw them", corrupt),
		fmt.Sprintf("membership:  no member removed, every member finished (last at %.1f virtual ms)", float64(r.Duration)/1e6))
	if !r.Finished {
		errs = append(errs, fmt.Errorf("the group did not finish within 60 s of virtual time"))
	}
	return lines, errors.Join(errs...)
}

// slowNode steps its driver at most once every `every`, whatever arrives
// meanwhile: frames pile up in the endpoint's queue and overflow it, as at
// a receiver whose process is often descheduled — the thesis's main cause
// of loss (full buffers, Auld 2001 §6.5).
type slowNode struct {
	d     *reliable.Driver
	every time.Duration
	next  time.Time
}

func (s *slowNode) Step(now time.Time) time.Time {
	if now.Before(s.next) {
		return s.next
	}
	s.next = now.Add(s.every)
	if d := s.d.Step(now); !d.IsZero() && d.After(s.next) {
		return d
	}
	return s.next
}
