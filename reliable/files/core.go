package files

import (
	"fmt"
	"slices"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
)

// Core is one member's file dissemination: a deterministic state machine
// on the one core contract (reliable/core). It sends the files given to
// Send and receives every other member's (Config.Sink). Results come out
// of Reports, valid until Advance.
type Core struct {
	cfg     settings
	members []frame.MemberInfo // by id, Self included
	started bool
	now     Time

	// Sender (send.go).
	nextID  uint32     // the next file id; ids below it are sent or closed
	queue   []*outFile // Send order, not yet passing
	open    []*outFile // by id: passing, ending, or with their verdict out
	aborted map[uint32]frame.FileReason
	gone    map[goneKey]bool // FileGone sent once per receiver and file
	tokens  int64            // the pacer's bytes
	refill  Time
	share   int64 // bytes repairs may still take during a pass
	rotate  int   // where the repair scan starts among the receivers
	srtt    Duration
	rttvar  Duration
	sampled bool
	paceAt  Time // when the pacer has room for the work waiting (0: none)
	// passed counts the blocks of the passes before the one under way:
	// a file's blocks are numbered from it in the sender's count of
	// pass blocks (outFile.base), over which the window runs.
	passed uint64
	// The window's positions (windowOpen), counted once per pump call
	// for the pass winFor: by member while counting, then sorted.
	winFor *outFile
	winPos []memberPos
	winTop []uint64
	// Scratch space of the pacer, so a block sent allocates nothing.
	scratchTo []*receiver
	scratchPs [][]byte // a run's block buffers (read.go)
	placed    frame.Placed
	hdr       frame.Header
	skipCRC   bool // the link writes every frame's CRC (SkipCRC)

	// Receiver (recv.go).
	in []*transfer // by key
	// waiting: the transfers whose offer came while MaxReceiving files
	// were being received, oldest first (recv.go, admit).
	waiting []*transfer
	// opened counts the transfers whose file (the sink's copy) is open.
	opened   int
	reportNo uint32 // Seq of our next report
	// incs: each sender's incarnation last heard, so that a frame of a
	// new one ends the old one's transfers (senderRestarted) without a
	// scan of every transfer per frame.
	incs map[frame.MemberID]uint32

	leaving, left bool

	frames  [][]byte
	free    [][]byte
	events  []core.Event
	reports []Report
	stats   Stats
}

// Stats are the file core's own counters (core.Stats.Detail).
type Stats struct {
	// Sender.
	FilesSent, FilesAborted, BlocksSent, BlocksRepaired, RepairsToGroup uint64
	BytesSent, OffersSent, EndsSent, GoneSent, ReportsReceived          uint64
	WindowStalls, RTTSamples                                            uint64
	// RepairsAgain counts blocks sent again to a receiver they had been
	// sent to alone or in a repair, RepairsTimedOut those of them sent
	// again by the timer, not because a block sent later had arrived
	// (repair.go).
	RepairsAgain, RepairsTimedOut uint64
	SRTT                          Duration
	// Receiver.
	FilesReceived, FilesIncomplete, BlocksReceived, Duplicates, Dropped uint64
	ReportsSent, HashMismatches, Resumed                                uint64
	BadFrames                                                           uint64
	// FilesDeclined counts the files this member's sink declined
	// (ErrDeclined), each reported to its sender.
	FilesDeclined uint64
	// FilesRefused counts the offers beyond one of this member's limits
	// (Cause.Limit), each refused and the limit said to its sender.
	FilesRefused uint64
	// FilesDeferred counts the offers that came while MaxReceiving files
	// were being received here: each waited, unopened, and was taken
	// once one of them ended (an offer counts once).
	FilesDeferred uint64
	// FilesHeld counts the files received with no block received: the
	// sink held them (stored already); HeldMismatches the files stored
	// under an offer's name and size that FileEnd's hash showed to be
	// other files (fetched again). OldReceivers counts the receivers a
	// verdict names as too old for an offer without a hash, or for a
	// file not hashed with SHA-256 (sender).
	FilesHeld, HeldMismatches, OldReceivers uint64
	// PassesSkipped counts the passes that stopped sending blocks because
	// every receiver held the file, BlocksSkipped the blocks they did not
	// send (sender; held.go).
	PassesSkipped, BlocksSkipped uint64
}

var _ core.Core = (*Core)(nil)

// New returns the file core of member cfg.Self.
func New(cfg Config) (*Core, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Core{cfg: s, members: s.Members, nextID: 1, aborted: map[uint32]frame.FileReason{}, gone: map[goneKey]bool{}, incs: map[frame.MemberID]uint32{},
		srtt: s.InitialRTT, rttvar: s.InitialRTT / 2}, nil
}

// SetMembers replaces the group's member list (a view change): the
// snapshot of a file whose pass ends later is taken from it. Self must be
// among them.
func (c *Core) SetMembers(ms []frame.MemberInfo) {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b frame.MemberInfo) int { return int(a.ID) - int(b.ID) })
	c.members = ms
	if f := c.passing(); f != nil {
		c.checkHold(f) // a member that joined has not said it holds
	}
}

func (c *Core) member(id frame.MemberID) (frame.MemberInfo, bool) {
	i, ok := slices.BinarySearchFunc(c.members, id, func(m frame.MemberInfo, id frame.MemberID) int { return int(m.ID) - int(id) })
	if !ok {
		return frame.MemberInfo{}, false
	}
	return c.members[i], true
}

func (c *Core) start(now Time) {
	c.now = now
	if !c.started {
		c.started = true
		c.refill = now
		c.tokens = int64(c.cfg.Burst) * int64(c.frameBytes())
	}
}

// Info reports what does not change.
func (c *Core) Info() core.Info {
	return core.Info{Self: c.cfg.Self, Delivers: func(frame.Type) bool { return false }, InFlight: "files not yet judged"}
}

// Step handles one received frame.
func (c *Core) Step(now Time, src, dst [6]byte, v frame.View) error {
	c.start(now)
	if v.Sender() == c.cfg.Self || v.Sender() == frame.NoMember {
		return nil
	}
	switch v.Type() {
	case frame.FileOffer, frame.FileData, frame.FileEnd, frame.FileGone:
		return c.stepReceiver(now, src, v)
	case frame.FileStatus:
		return c.stepSender(now, src, v)
	}
	c.stats.BadFrames++
	return errNotFile(v.Type())
}

// Tick runs the timers due at now.
func (c *Core) Tick(now Time) {
	c.start(now)
	c.tickReceiver(now)
	c.tickSender(now)
}

// Propose refuses: a file core carries no messages (Send queues files).
func (c *Core) Propose(Time, []byte) error { return core.ErrNotAccepting }

// Leave stops taking files; files queued and not yet passing are given
// up; once every open file has its verdict, the core reports SelfLeft.
func (c *Core) Leave(now Time) {
	c.start(now)
	if c.leaving {
		return
	}
	c.leaving = true
	for _, f := range c.queue {
		c.report(Report{Kind: Verdict, At: now, Meta: f.meta, Missing: f.allMissing(c, CauseLeft)})
		f.src.Close()
	}
	c.queue = nil
	c.maybeLeft(now)
}

func (c *Core) maybeLeft(now Time) {
	if !c.leaving || c.left {
		return
	}
	for _, f := range c.open {
		if !f.judged {
			return
		}
	}
	c.left = true
	c.events = append(c.events, core.Event{Kind: core.SelfLeft, Member: c.cfg.Self, At: now})
}

// Ready returns what to send and report now.
func (c *Core) Ready() core.Ready {
	return core.Ready{Frames: c.frames, Events: c.events}
}

// Reports returns the transfers finished since the last Advance, valid
// until Advance.
func (c *Core) Reports() []Report { return c.reports }

// Advance says the last Ready was carried out.
func (c *Core) Advance() {
	c.free = append(c.free, c.frames...)
	clear(c.frames)
	c.frames = c.frames[:0]
	c.reports = c.reports[:0]
	c.events = c.events[:0]
}

// Deadline is when Tick must next run.
func (c *Core) Deadline() Time {
	d := Time(0)
	at := func(t Time) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	at(c.paceAt)
	c.senderDeadlines(at)
	c.receiverDeadlines(at)
	return d
}

// Blocked is false: Propose never waits for room.
func (c *Core) Blocked() bool { return false }

// Done reports whether the core left.
func (c *Core) Done() bool { return c.left }

// Stats returns the counters.
func (c *Core) Stats() core.Stats {
	st := c.stats
	st.SRTT = c.srtt
	return core.Stats{Sent: st.BlocksSent, Retransmitted: st.BlocksRepaired, RepairRequests: st.ReportsSent,
		RepairRequestsReceived: st.ReportsReceived, InFlight: len(c.open) + len(c.queue), Pending: len(c.queue), Detail: st}
}

// Members returns the group's members.
func (c *Core) Members() []core.Member {
	ms := make([]core.Member, len(c.members))
	for i, m := range c.members {
		ms[i] = core.Member{ID: m.ID, Self: m.ID == c.cfg.Self, Live: m.ID != c.cfg.Self || !c.left}
	}
	return ms
}

// Repair: a file core has no message streams to time.
func (c *Core) Repair(from frame.MemberID) (frame.MemberID, bool) { return from, false }

// report queues a finished transfer for Reports.
func (c *Core) report(r Report) { c.reports = append(c.reports, r) }

// frameBytes is the Ethernet bytes of a full data frame: what the pacer
// counts a frame as at most.
func (c *Core) frameBytes() int {
	return frame.EthernetHeaderLen + frame.Overhead + frame.FileDataHead + c.cfg.BlockSize
}

// buf returns an empty frame buffer with room for one frame.
func (c *Core) buf() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, frame.EthernetHeaderLen+c.cfg.MTU)
}

// SkipCRC leaves every frame's CRC to the link (core.CRCSkipper).
func (c *Core) SkipCRC() { c.skipCRC = true }

func (c *Core) header(seq uint32, flags frame.Flags) frame.Header {
	return frame.Header{Group: c.cfg.Group, Sender: c.cfg.Self, Incarnation: c.cfg.selfInc, ViewID: c.cfg.ViewID, Seq: seq, Flags: flags, SkipCRC: c.skipCRC}
}

// send encodes body to dst and queues the frame; it returns its length.
func (c *Core) send(dst [6]byte, seq uint32, flags frame.Flags, body frame.Body) int {
	h := c.header(seq, flags)
	b := frame.AppendEthernet(c.buf(), dst, c.cfg.selfMAC, c.cfg.EtherType)
	b, err := frame.Append(b, &h, body)
	if err != nil {
		// Bodies are built within the MTU; an error is a bug here.
		panic("files: encoding a " + body.FrameType().String() + " frame: " + err.Error())
	}
	c.frames = append(c.frames, b)
	c.tokens -= int64(len(b))
	return len(b)
}

// errNotFile refuses a frame that is not a file frame.
func errNotFile(t frame.Type) error {
	return fmt.Errorf("files: a %v frame is not a file frame", t)
}

// stamp is now in microseconds, the clock that offers and ends carry.
func stamp(now Time) uint32 { return uint32(int64(now) / int64(Microsecond)) }

// sampleRTT takes a report's echo (RTCP's LSR/DLSR): the round trip is
// the time since the echoed stamp less the time the receiver held it.
func (c *Core) sampleRTT(now Time, echo, delay uint32) {
	if echo == 0 {
		return
	}
	us := stamp(now) - echo - delay
	if int32(us) < 0 || us > 10_000_000 {
		return
	}
	r := Duration(us) * Microsecond
	if r < Microsecond {
		r = Microsecond
	}
	// RFC 6298.
	if !c.sampled {
		c.sampled = true
		c.srtt, c.rttvar = r, r/2
	} else {
		d := c.srtt - r
		if d < 0 {
			d = -d
		}
		c.rttvar = (3*c.rttvar + d) / 4
		c.srtt = (7*c.srtt + r) / 8
	}
	c.stats.RTTSamples++
}

// rto is how long a repair or an offer sent again waits for the report
// that says it arrived: a round trip with its variance (measured with
// the queues it crosses), and the time the pacer takes to send a burst.
func (c *Core) rto() Duration {
	d := c.srtt + 4*c.rttvar + Duration(int64(c.cfg.Burst)*int64(c.frameBytes())*int64(Second)/c.cfg.Rate)
	return c.clamp(d)
}

func (c *Core) clamp(d Duration) Duration { return min(max(d, c.cfg.MinTimer), c.cfg.MaxTimer) }

// Busy reports whether a file is queued, sent and not yet judged, or
// being received.
func (c *Core) Busy() bool {
	if len(c.queue) > 0 {
		return true
	}
	for _, f := range c.open {
		if !f.judged {
			return true
		}
	}
	for _, t := range c.in {
		if t.active() {
			return true
		}
	}
	return false
}

// Progress is one transfer as status shows it.
type Progress struct {
	Meta Meta
	// Sending: this member sends it; Receivers are then the members it
	// heard from or awaits, with what they last reported. Else Held of
	// Blocks are here.
	Sending      bool
	Held, Blocks uint32
	State        string
	Receivers    []ReceiverProgress
}

// ReceiverProgress is a receiver of a file this member sends.
type ReceiverProgress struct {
	Member frame.MemberID
	// InSnapshot: the verdict waits for it.
	InSnapshot   bool
	State        frame.FileState // 0: not heard yet
	Cause        Cause           // with FileFailed: why (CauseDeclined: it declined the file)
	Held         uint32
	LastReported Time
}

// Progress returns every transfer under way or open here. It allocates;
// it is for status output.
func (c *Core) Progress() []Progress {
	var ps []Progress
	for _, f := range append(slices.Clone(c.open), c.queue...) {
		p := Progress{Meta: f.meta, Sending: true, Held: f.next, Blocks: f.blocks}
		switch {
		case !f.passing && !f.ended:
			p.State = "queued"
		case !f.ended && f.allHold:
			p.State = "hashing (every receiver holds it)"
		case !f.ended:
			p.State = "multicasting"
		case !f.judged:
			p.State = "repairing"
		default:
			p.State = "judged"
		}
		for _, r := range f.rcv {
			rp := ReceiverProgress{Member: r.id, InSnapshot: r.snap, State: r.state, Held: r.held, LastReported: r.heard}
			if r.state == frame.FileFailed {
				rp.Cause = r.cause
			}
			p.Receivers = append(p.Receivers, rp)
		}
		ps = append(ps, p)
	}
	for _, t := range c.in {
		p := Progress{Meta: t.meta, Held: t.set.held, Blocks: t.set.n}
		switch t.state {
		case needOffer:
			p.State = "needs offer"
			if t.waiting {
				p.State = "waiting: as many files being received as MaxReceiving"
			}
		case receiving:
			p.State = "receiving"
		case received:
			p.State = "received"
		case failed:
			p.State = "incomplete: " + t.cause.String()
		case declined:
			p.State = "declined"
			if t.cause.Limit() {
				p.State = "refused: " + t.cause.String()
			}
		}
		ps = append(ps, p)
	}
	return ps
}
