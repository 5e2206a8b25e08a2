// Package invariant checks the protocol invariants that rbcast frames
// show, one frame at a time. It is the one checker behind both the live
// checks of a wrapped link (capture.Invariants, which feeds it every frame
// the link sends and receives) and 'pcap-replay check' (internal/replay,
// which feeds it every frame of a capture in time order and adds what
// only a whole capture shows: gaps never repaired by its end). A frame fed
// to Check is judged the same way in both; TestOnlineOfflineAgree in
// internal/replay holds the two to it.
//
// It imports frame and the standard library only, and does no I/O.
package invariant

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rbcast/rbcast/frame"
)

// Violation kinds. The Checker finds every kind but KindGap and
// KindImplausible, which need the whole capture (internal/replay).
const (
	// KindSeqReuse: one sender, incarnation and seq in two Data frames (or
	// request number in two SeqRequest frames) with different payloads.
	KindSeqReuse = "seq-reuse"
	// KindGlobalReuse: one global number of an epoch bound to two
	// requests, two payloads, or a member change and anything else; or a
	// SeqData whose payload is not its request's.
	KindGlobalReuse = "global-reuse"
	// KindSequencedTwice: one request numbered with two globals in an
	// epoch (it would be delivered twice).
	KindSequencedTwice = "sequenced-twice"
	// KindOrder: a member acknowledges (so delivered) a frame its own
	// interface had not received, or its acknowledgement goes back.
	KindOrder = "delivery-order"
	// KindNackStorm: more Nacks naming one range than NackStormCount
	// within NackStormWindow.
	KindNackStorm = "nack-storm"
	// KindForeign: a frame of a group other than Options.Group.
	KindForeign = "foreign-group"
	// KindVersion and KindCorrupt: frames that do not decode.
	KindVersion = "foreign-version"
	KindCorrupt = "corrupt-frame"
	// KindGap: a seq or global a receiver knew was missing and never got
	// by the end of the capture.
	KindGap = "unrepaired-gap"
	// KindImplausible: a seq far past what the receiver knew was sent.
	KindImplausible = "seq-jump"
)

// Violation is one broken invariant.
type Violation struct {
	Kind   string
	Detail string
	// Frames are the numbers (Frame.N) of the frames that show it,
	// ascending.
	Frames []int
	// Time is the capture time of the frame that showed it.
	Time time.Time
	// Frame is a copy of that frame (the Ethernet frame), when known.
	Frame []byte
	// Doubt, when not empty, says why the capture cannot show this is a
	// violation: it lost frames of the interface before the frame that
	// showed it, and the missing frame may be one of them. Such a finding
	// is not judged, and not counted as a violation.
	Doubt string
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if len(v.Frames) > 0 {
		b.WriteString(" [frames ")
		for i, f := range v.Frames {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(f))
		}
		b.WriteByte(']')
	}
	b.WriteString(": ")
	b.WriteString(v.Detail)
	if v.Doubt != "" {
		b.WriteString(" (not judged: ")
		b.WriteString(v.Doubt)
		b.WriteByte(')')
	}
	return b.String()
}

// Dir is the direction of a frame at its interface.
type Dir uint8

const (
	DirUnknown Dir = iota // no direction (pcap, tcpdump)
	DirIn                 // received by the interface
	DirOut                // sent by the interface
)

func (d Dir) String() string {
	switch d {
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	}
	return "-"
}

// Frame is one frame as a capture (or a wrapped link) saw it.
type Frame struct {
	// N numbers the frame from 1, in the order of its capture file (or
	// the order frames pass the checker, online).
	N     int
	Time  time.Time
	Iface int // the interface it passed, as AddInterface numbered it
	Dir   Dir
	Data  []byte     // the whole Ethernet frame
	View  frame.View // the decoded rbcast frame; nil when Err is set
	// Err says why it did not decode. Frames of another EtherType are not
	// to be passed at all: they are not ours to judge.
	Err error
	// Lost is how many frames of this interface the capture lost just
	// before this one (pcapng epb_dropcount): frames the node handled that
	// the capture does not hold.
	Lost uint64
}

// Options configure a Checker.
type Options struct {
	// Window bounds memory: the checker remembers the last Window
	// bindings of each kind (seq to payload, global to request, ...) and
	// forgets older ones, which are then not compared. 0 remembers all.
	Window int
	// Group, when set, is the only group allowed (KindForeign);
	// GroupSource says where it came from ("the -group given").
	Group       *uint32
	GroupSource string
	// FilesGroup, when set, is the only group allowed for file frames
	// (types 0x40–0x4F, reliable/files), which rbcastd sends in a group
	// of their own beside the message group; FilesGroupSource says where
	// it came from. Unset, file frames are held to Group like the rest.
	FilesGroup       *uint32
	FilesGroupSource string
	// NackStormCount and NackStormWindow: more than NackStormCount Nacks
	// naming the same range (target, first, last) within NackStormWindow
	// is a storm. Zero means DefaultNackStormCount, DefaultNackStormWindow.
	NackStormCount  int
	NackStormWindow time.Duration
}

// Defaults of Options: the PBP core re-asks every NackTimeout (4 ms) with
// back-off, so a receiver alone sends about 3 per 10 ms; 16 in 10 ms takes
// several receivers asking far faster than the timer allows.
const (
	DefaultNackStormCount  = 16
	DefaultNackStormWindow = 10 * time.Millisecond
)

// maxJump bounds how many seqs one acknowledgement may be checked across:
// a correct sender is never more than its window (256 by default) ahead,
// so a larger step is a new sequence space, not a range to walk.
const maxJump = 1 << 12

// Checker checks frames one at a time. It is not safe for concurrent use
// (capture.Invariants serialises it).
type Checker struct {
	opts   Options
	seed   maphash.Seed
	ifaces []*iface
	n      int // frames checked, for Frame.N when the caller leaves it 0

	bindings
	acks
	storms
	views
	files
}

// New returns a Checker.
func New(opts Options) *Checker {
	if opts.NackStormCount <= 0 {
		opts.NackStormCount = DefaultNackStormCount
	}
	if opts.NackStormWindow <= 0 {
		opts.NackStormWindow = DefaultNackStormWindow
	}
	if opts.GroupSource == "" {
		opts.GroupSource = "the group"
	}
	if opts.FilesGroupSource == "" {
		opts.FilesGroupSource = "the files' group"
	}
	c := &Checker{opts: opts, seed: maphash.MakeSeed()}
	c.bindings.init(opts.Window)
	c.acks.init(opts.Window)
	c.storms.init(opts.Window)
	c.views.init(opts.Window)
	c.files.init(opts.Window)
	return c
}

// AddInterface registers an interface (one node's link) named name, as
// violations will call it ("n3"), and returns its number for Frame.Iface.
func (c *Checker) AddInterface(name string) int {
	c.ifaces = append(c.ifaces, &iface{name: name, self: frame.NoMember})
	return len(c.ifaces) - 1
}

// iface is what the checker knows of one interface.
type iface struct {
	name string
	// self is the member whose interface this is: the sender of its first
	// outbound PBP frame.
	self frame.MemberID
	// lost counts the frames the capture lost on it so far; lostAt is the
	// frame before which it last lost some.
	lost   uint64
	lostAt int
}

func (c *Checker) iface(i int) *iface {
	for i >= len(c.ifaces) {
		c.AddInterface("if" + strconv.Itoa(len(c.ifaces)))
	}
	return c.ifaces[i]
}

// LostSomewhere records that the capture lost n frames of interface i at
// places it does not say (a foreign capturer's isb_ifdrop).
func (c *Checker) LostSomewhere(i int, n uint64) {
	c.iface(i).lost += n
}

// Doubt is the Violation.Doubt of a finding about a frame missing at
// interface name, where the capture lost frames: lost of them, the last
// just before frame at (0: where is not known).
func Doubt(name string, lost uint64, at int) string {
	if at == 0 {
		return fmt.Sprintf("the capture lost %d frames of %s, where is not known; the missing one may be among them", lost, name)
	}
	return fmt.Sprintf("the capture lost %d frames of %s, the last just before frame %d; the missing one may be among them", lost, name, at)
}

// doubt returns the Doubt for a missing frame at ifc, or "" if the
// capture lost none there.
func (ifc *iface) doubt() string {
	if ifc.lost == 0 {
		return ""
	}
	return Doubt(ifc.name, ifc.lost, ifc.lostAt)
}

// Skip counts a frame that is not to be checked (another EtherType), so
// that the numbers Check gives frames stay those of the capture.
func (c *Checker) Skip() { c.n++ }

// Check checks one frame and returns the violations it shows (nil
// mostly). A frame with N 0 is numbered one past the previous frame.
func (c *Checker) Check(f *Frame) []Violation {
	c.n++
	if f.N == 0 {
		f.N = c.n
	}
	ifc := c.iface(max(f.Iface, 0))
	if f.Lost > 0 {
		ifc.lost += f.Lost
		ifc.lostAt = f.N
	}
	var out []Violation
	report := func(kind, detail string, frames ...int) {
		out = append(out, Violation{Kind: kind, Detail: detail, Frames: sortInts(frames), Time: f.Time, Frame: append([]byte(nil), f.Data...)})
	}
	if f.Err != nil {
		if errors.Is(f.Err, frame.ErrVersion) {
			report(KindVersion, fmt.Sprintf("on %s: %v", ifc.name, f.Err), f.N)
		} else {
			report(KindCorrupt, fmt.Sprintf("on %s, %d bytes: %v", ifc.name, len(f.Data), f.Err), f.N)
		}
		return out
	}
	v := f.View
	if v == nil {
		return nil
	}
	g, src := c.opts.Group, c.opts.GroupSource
	if IsFileType(v.Type()) && c.opts.FilesGroup != nil {
		g, src = c.opts.FilesGroup, c.opts.FilesGroupSource
	}
	if g != nil && v.Group() != *g {
		report(KindForeign, fmt.Sprintf("%v from %d.%d on %s is of group %d, %s is %d", v.Type(), v.Sender(), v.Incarnation(), ifc.name, v.Group(), src, *g), f.N)
	}
	c.bind(f, report)
	c.checkAcks(f, ifc, report, func(d string) { out[len(out)-1].Doubt = d })
	c.checkStorm(f, report)
	c.checkViews(f, report)
	c.checkFiles(f, report)
	return out
}

// hash is the content of a Data, SeqRequest or SeqData that must not
// change between its copies: its payload and whether it is a bundle.
func (c *Checker) hash(v frame.View) payload {
	var h maphash.Hash
	h.SetSeed(c.seed)
	if v.Flags()&frame.FlagBundle != 0 {
		h.WriteByte(1)
	} else {
		h.WriteByte(0)
	}
	h.Write(v.Payload())
	return payload{h.Sum64(), len(v.Payload())}
}

// payload identifies a payload by its hash, and remembers its length for
// the violation's text.
type payload struct {
	hash uint64
	n    int
}

func sortInts(s []int) []int {
	slices.Sort(s)
	return s
}
