// Package simdemo is the scenario behind `make demo`: a group of members
// broadcasting rbcast Data frames over testnet's simulated lossy segment,
// in virtual time, then checking what arrived.
//
// Until the PBP core lands (reliable/, issue 3) the members send raw,
// unrepaired frames: the demo shows the segment the protocol must repair
// and verifies the layers beneath it — the wire format's integrity checks
// reject every corrupted copy, every accepted frame carries exactly the
// bytes its sender encoded, nothing that reached a member's queue is lost
// inside the stack, and the same seed gives the same run, frame for frame.
package simdemo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// Config is the demo's scenario.
type Config struct {
	Seed    uint64
	Members int
	Frames  int // frames each member sends
	Payload int // bytes of payload per frame
	MTU     int
	// Interval is the virtual time between a member's batches, Batch the
	// frames per batch.
	Interval time.Duration
	Batch    int
	Impairments
	// Progress lines are printed this many times over the run (0: none).
	Progress int
}

// Default is the embedded default of `make demo`.
func Default() Config {
	return Config{
		Seed: 1, Members: 8, Frames: 2000, Payload: 1000, MTU: 1500,
		Interval: 200 * time.Microsecond, Batch: 4,
		Impairments: Impairments{Loss: 0.02, BurstMember: 3, SlowMember: 7, SlowEvery: 2500 * time.Microsecond,
			Duplicate: 0.005, Reorder: 0.01, Corrupt: 0.002, Jitter: 20 * time.Microsecond},
		Progress: 10,
	}
}

// Impairments are what both scenarios do to the segment: independent
// receive loss at every member, Gilbert–Elliott bursts on top at
// BurstMember, a slow reader at SlowMember that runs only every SlowEvery
// (the thesis's main cause of loss: full buffers), duplication,
// reordering, corruption and jitter. Member indexes count from 0; -1
// disables that member's special treatment.
type Impairments struct {
	Loss        float64
	BurstMember int
	SlowMember  int
	SlowEvery   time.Duration
	Duplicate   float64
	Reorder     float64
	Corrupt     float64
	Jitter      time.Duration
}

// Bounds of the raw scenario: every member keeps a flag per frame of
// every sender (members² × frames bytes), and a frame buffer per frame of
// a batch.
const (
	maxRawBookkeeping = 1 << 28
	maxBatch          = 1024
)

func (c Config) validate() error {
	switch {
	case c.Members < 2 || c.Members > 1000:
		return fmt.Errorf("members = %d, want 2..1000", c.Members)
	case c.Frames < 1:
		return fmt.Errorf("frames = %d, want at least 1", c.Frames)
	case c.Frames > maxRawBookkeeping/(c.Members*c.Members):
		return fmt.Errorf("frames = %d, want at most %d with %d members (each member keeps a flag per frame of every sender)", c.Frames, maxRawBookkeeping/(c.Members*c.Members), c.Members)
	case c.Batch < 1 || c.Batch > maxBatch:
		return fmt.Errorf("batch = %d, want 1..%d", c.Batch, maxBatch)
	case c.Interval <= 0:
		return fmt.Errorf("interval = %v, want > 0", c.Interval)
	case c.Payload < 8:
		return fmt.Errorf("payload = %d bytes, want at least 8", c.Payload)
	}
	if err := validMTU(c.MTU); err != nil {
		return err
	}
	if err := c.Impairments.validate(c.Members); err != nil {
		return err
	}
	max := frame.MaxPayload(c.MTU, c.Members, 0)
	if max < 8 {
		return fmt.Errorf("MTU %d with %d members leaves no room for a payload (the ack vector fills the frame): fewer members or a larger MTU", c.MTU, c.Members)
	}
	if c.Payload > max {
		return fmt.Errorf("payload of %d bytes does not fit one frame: MTU %d with %d members carries at most %d", c.Payload, c.MTU, c.Members, max)
	}
	return nil
}

func validMTU(mtu int) error {
	if mtu < frame.MinMTU || mtu > testnet.MaxMTU {
		return fmt.Errorf("mtu = %d, want %d..%d", mtu, frame.MinMTU, testnet.MaxMTU)
	}
	return nil
}

// Check reports what Run would refuse in c, naming rbcast-sim's flags,
// so that the command refuses it before it prints anything.
func (c Config) Check() error { return c.validate() }

// validate checks the member indexes against the group's size, the
// probabilities and the jitter, naming rbcast-sim's flags.
func (im Impairments) validate(members int) error {
	for _, p := range []struct {
		name string
		p    float64
	}{{"loss", im.Loss}, {"dup", im.Duplicate}, {"reorder", im.Reorder}, {"corrupt", im.Corrupt}} {
		if !(p.p >= 0 && p.p <= 1) {
			return fmt.Errorf("%s = %v, want a probability 0..1", p.name, p.p)
		}
	}
	switch {
	case im.Jitter < 0:
		return fmt.Errorf("jitter = %v, want >= 0", im.Jitter)
	case im.BurstMember < -1 || im.BurstMember >= members:
		return fmt.Errorf("burst-member = %d, want -1 (none) or 0..%d", im.BurstMember, members-1)
	case im.SlowMember < -1 || im.SlowMember >= members:
		return fmt.Errorf("slow-member = %d, want -1 (none) or 0..%d", im.SlowMember, members-1)
	case im.SlowEvery < 0:
		return fmt.Errorf("slow-every = %v, want >= 0 (0: the slow member reads as often as the others)", im.SlowEvery)
	}
	return nil
}

// MemberResult is what one member saw.
type MemberResult struct {
	ID        int
	Sent      int
	Unique    int // distinct frames accepted
	Expected  int // frames the others sent
	Dups      int // copies of frames already accepted
	Rejected  int // frames the decoder refused (all should be corrupted copies)
	Mismatch  int // accepted frames whose bytes differ from what was sent: must be 0
	Arrived   int // frames the segment put in this member's queue
	Corrupted int // of those, copies whose CRC no longer matches
	Dropped   testnet.Counters
	Stats     link.Stats
}

// Missing is the frames this member never got.
func (m MemberResult) Missing() int { return m.Expected - m.Unique }

// Result is the outcome of one run.
type Result struct {
	Members   []MemberResult
	TraceHash uint64
	Events    uint64
	Duration  time.Duration // virtual
}

// group is the demo's group id.
const group = 0x00de0001

// payloadFor writes the deterministic content of sender's frame seq: every
// receiver can regenerate it and compare byte for byte.
func payloadFor(dst []byte, sender, seq uint32) {
	x := uint64(sender)<<32 | uint64(seq) | 1
	for i := range dst {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		dst[i] = byte(x)
	}
	dst[0], dst[1], dst[2], dst[3] = byte(sender>>8), byte(sender), byte(seq>>8), byte(seq)
}

type member struct {
	cfg      *Config
	id       int
	ep       *testnet.Endpoint
	mac      [6]byte
	next     uint32   // next sequence number to send
	expected []uint32 // expected[j]: next in-order seq from j (the ack vector)
	got      [][]bool // got[j][seq]
	nextSend time.Time
	nextRead time.Time
	res      MemberResult

	header  frame.Header
	data    frame.Payload
	bufs    [][]byte
	frames  []link.Frame
	payload []byte
	scratch [][]byte
	want    []byte
}

func (m *member) Step(now time.Time) time.Time {
	slow := m.id == m.cfg.SlowMember && m.cfg.SlowEvery > 0
	if !slow || !now.Before(m.nextRead) {
		m.receive()
		if slow {
			m.nextRead = now.Add(m.cfg.SlowEvery)
		}
	}
	if int(m.next) < m.cfg.Frames && !now.Before(m.nextSend) {
		m.send()
		m.nextSend = now.Add(m.cfg.Interval)
	}
	var wake time.Time
	if int(m.next) < m.cfg.Frames {
		wake = m.nextSend
	}
	if slow && m.ep.Queued() > 0 && (wake.IsZero() || m.nextRead.Before(wake)) {
		wake = m.nextRead
	}
	return wake
}

func (m *member) send() {
	m.bufs = m.bufs[:0]
	for i := 0; i < m.cfg.Batch && int(m.next) < m.cfg.Frames; i++ {
		m.header.Seq = m.next
		copy(m.header.Acks, m.expected)
		payloadFor(m.payload, uint32(m.id), m.next)
		b := frame.AppendEthernet(m.scratch[i][:0], frame.Broadcast, m.mac, frame.EtherType)
		b, err := frame.Append(b, &m.header, &m.data)
		if err != nil {
			panic(err) // validate() guarantees the frame fits
		}
		m.scratch[i] = b
		m.bufs = append(m.bufs, b)
		m.next++
	}
	n, err := m.ep.Send(m.bufs)
	m.res.Sent += n
	if err != nil && !errors.Is(err, testnet.ErrCrashed) {
		panic(err)
	}
}

func (m *member) receive() {
	want := m.want
	for {
		n, _ := m.ep.Recv(time.Time{}, m.frames)
		if n == 0 {
			return
		}
		for _, f := range m.frames[:n] {
			m.accept(f.Data, want)
		}
	}
}

func (m *member) accept(b, want []byte) {
	_, rb, err := frame.SplitEthernet(b, frame.EtherType)
	if err != nil {
		m.res.Rejected++
		return
	}
	v, err := frame.ParseGroup(rb, group)
	if err != nil {
		m.res.Rejected++
		return
	}
	s, seq := int(v.Sender()), v.Seq()
	if v.Type() != frame.Data || s >= len(m.got) || s == m.id || int(seq) >= m.cfg.Frames {
		m.res.Rejected++
		return
	}
	payloadFor(want, uint32(s), seq)
	if !bytes.Equal(v.Payload(), want) {
		m.res.Mismatch++
		return
	}
	if m.got[s][seq] {
		m.res.Dups++
		return
	}
	m.got[s][seq] = true
	m.res.Unique++
	for int(m.expected[s]) < m.cfg.Frames && m.got[s][m.expected[s]] {
		m.expected[s]++
	}
}

// Run plays the scenario once and returns what every member saw.
func Run(cfg Config, progress io.Writer) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	net, err := testnet.New(cfg.Seed, testnet.Config{})
	if err != nil {
		return nil, err
	}
	hash := testnet.NewTraceHash()
	net.Trace(hash.Add)
	members := make([]*member, cfg.Members)
	for i := range members {
		in := testnet.Impairment{Loss: cfg.Loss, Duplicate: cfg.Duplicate, Reorder: cfg.Reorder,
			ReorderDelay: 5 * cfg.Interval, Jitter: cfg.Jitter, Corrupt: cfg.Corrupt}
		if i == cfg.BurstMember {
			in.Burst = testnet.GilbertElliott{GoodToBad: 0.005, BadToGood: 0.2, LossBad: 1}
		}
		ep, err := net.Attach(testnet.EndpointConfig{MTU: cfg.MTU, In: in})
		if err != nil {
			return nil, err
		}
		m := &member{cfg: &cfg, id: i, ep: ep, expected: make([]uint32, cfg.Members), got: make([][]bool, cfg.Members),
			frames: make([]link.Frame, 64), payload: make([]byte, cfg.Payload), want: make([]byte, cfg.Payload), scratch: make([][]byte, cfg.Batch)}
		copy(m.mac[:], ep.HardwareAddr())
		for j := range m.got {
			m.got[j] = make([]bool, cfg.Frames)
		}
		for j := range m.scratch {
			m.scratch[j] = make([]byte, 0, frame.EthernetHeaderLen+cfg.MTU)
		}
		m.header = frame.Header{Group: group, Sender: frame.MemberID(i), Incarnation: 1, Acks: make([]uint32, cfg.Members)}
		m.data = frame.Payload{T: frame.Data, Data: m.payload}
		m.res = MemberResult{ID: i, Expected: (cfg.Members - 1) * cfg.Frames}
		members[i] = m
	}
	// What reached each queue, and which of those copies were corrupted.
	net.Trace(func(ev testnet.Event) {
		if ev.Kind != testnet.EventDeliver || ev.To < 0 {
			return
		}
		r := &members[ev.To].res
		r.Arrived++
		if _, rb, err := frame.SplitEthernet(ev.Frame, frame.EtherType); err != nil {
			r.Corrupted++
		} else if _, err := frame.Parse(rb); err != nil {
			r.Corrupted++
		}
	})
	for _, m := range members {
		m.ep.Bind(m)
	}
	start := net.Now()
	sendTime := time.Duration(cfg.Frames/cfg.Batch+1) * cfg.Interval
	end := start.Add(sendTime + 50*time.Millisecond)
	steps := max(cfg.Progress, 1)
	for i := 1; i <= steps; i++ {
		net.RunUntil(start.Add(time.Duration(i) * (end.Sub(start)) / time.Duration(steps)))
		if cfg.Progress > 0 && progress != nil {
			var sent, got, exp int
			for _, m := range members {
				sent += int(m.next)
				got += m.res.Unique
				exp += int(m.next)
			}
			exp *= cfg.Members - 1
			fmt.Fprintf(progress, "  t=%8.3fms  sent %6d/%d frames  accepted %7d of %7d sent to others so far (%.2f%% not yet accepted)\n",
				float64(net.Now().Sub(start))/1e6, sent, cfg.Frames*cfg.Members, got, exp, 100*float64(exp-got)/float64(max(exp, 1)))
		}
	}
	for net.Step() {
	}
	res := &Result{TraceHash: hash.Sum(), Events: hash.Events(), Duration: net.Now().Sub(start)}
	for _, m := range members {
		m.res.Dropped = m.ep.Counters(testnet.In)
		m.res.Stats, _ = m.ep.Stats()
		res.Members = append(res.Members, m.res)
	}
	return res, nil
}

// Verify checks the guarantees the layers below the protocol give, and
// returns one line per check.
func Verify(r *Result) (lines []string, err error) {
	var errs []error
	var accepted, rejected, corrupted, arrived int
	for _, m := range r.Members {
		accepted += m.Unique
		rejected += m.Rejected
		corrupted += m.Corrupted
		arrived += m.Arrived
		if m.Mismatch != 0 {
			errs = append(errs, fmt.Errorf("member %d accepted %d frames whose bytes differ from what was sent", m.ID, m.Mismatch))
		}
		if m.Rejected != m.Corrupted {
			errs = append(errs, fmt.Errorf("member %d rejected %d frames but %d corrupted copies reached it", m.ID, m.Rejected, m.Corrupted))
		}
		if got := m.Unique + m.Dups + m.Rejected + m.Mismatch; got != m.Arrived {
			errs = append(errs, fmt.Errorf("member %d: %d frames reached its queue but it accounted for %d", m.ID, m.Arrived, got))
		}
	}
	lines = append(lines,
		fmt.Sprintf("integrity:   %d accepted frames carried exactly the bytes their senders encoded", accepted),
		fmt.Sprintf("corruption:  %d corrupted copies reached members, %d rejected by the decoder, 0 accepted", corrupted, rejected),
		fmt.Sprintf("accounting:  %d frames reached member queues; every one accepted, counted as duplicate, or rejected", arrived))
	return lines, errors.Join(errs...)
}
