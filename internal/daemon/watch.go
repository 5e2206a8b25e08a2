package daemon

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// watchLink is a link.Link that looks at every received frame's fixed
// header, before the runtime decodes it, for two things the runtime does
// not report: when each member was last heard (status shows a member
// "suspected" when it has been silent for half the failure timeout), and
// frames of our EtherType in another protocol version (the runtime drops
// them as undecodable; the daemon names the host that sent them). It
// counts the frames sent by each path, and keeps the watched link's
// capabilities (a link.Wrapper with Stage, Kick and SendNow), so the
// daemon sends on a ring's staged fast path.
type watchLink struct {
	link.Link
	etherType uint16
	log       *slog.Logger

	// Frames the runtime sent with Send, Stage and SendNow.
	sent, staged, sentNow atomic.Uint64

	heard [maxWatched]atomic.Int64 // Unix ns a frame from member id last arrived

	mu      sync.Mutex
	foreign map[[6]byte]uint8 // hosts speaking another version, and which

	wire *wireCounts // repair traffic per (sender, receiver) pair

	// clock is the wall clock in Unix ns (time.Now; tests count its
	// reads). Recv reads it once for all the frames it returns.
	clock func() int64
}

// maxWatched bounds the member ids whose last-heard time is kept
// (registration admits at most 40; static lists may use larger ids).
const maxWatched = 1024

var (
	_ link.Wrapper   = (*watchLink)(nil)
	_ link.Stager    = (*watchLink)(nil)
	_ link.NowSender = (*watchLink)(nil)
	_ link.Lender    = (*watchLink)(nil)
)

func newWatch(l link.Link, etherType uint16, log *slog.Logger) *watchLink {
	if etherType == 0 {
		etherType = frame.EtherType
	}
	return &watchLink{Link: l, etherType: etherType, log: log, foreign: map[[6]byte]uint8{}, wire: newWireCounts(), clock: wallNanos}
}

func wallNanos() int64 {
	return time.Now().UnixNano()
}

// Unwrap returns the watched link.
func (w *watchLink) Unwrap() link.Link { return w.Link }

func (w *watchLink) Send(frames [][]byte) (int, error) {
	n, err := w.Link.Send(frames)
	w.sent.Add(uint64(max(n, 0)))
	w.wire.sent(frames[:max(n, 0)])
	return n, err
}

// Stage, Kick and SendNow forward to the watched link's capabilities
// (link.StagerOf and link.NowSenderOf report the watchLink when it has
// them), counting the frames.
func (w *watchLink) Stage(frames [][]byte) (int, error) {
	n, err := link.Stage(w.Link, frames)
	w.staged.Add(uint64(max(n, 0)))
	w.wire.sent(frames[:max(n, 0)])
	return n, err
}

func (w *watchLink) Kick() error { return link.Kick(w.Link) }

func (w *watchLink) SendNow(frames [][]byte) (int, error) {
	n, err := link.SendNow(w.Link, frames)
	w.sentNow.Add(uint64(max(n, 0)))
	w.wire.sent(frames[:max(n, 0)])
	return n, err
}

// Loan, Lend, Return and Due forward to the watched link's (link.LenderOf
// reports the watchLink when it has them): Recv hands its frames up
// unchanged, and look reads them only during Recv.
func (w *watchLink) Loan(data []byte) (link.Loan, bool) { return link.LoanFrom(w.Link, data) }
func (w *watchLink) Lend(loans []link.Loan)             { link.Lend(w.Link, loans) }
func (w *watchLink) Return(loans []link.Loan)           { link.Return(w.Link, loans) }
func (w *watchLink) Due() (link.Loan, bool)             { return link.Due(w.Link) }

func (w *watchLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := w.Link.Recv(deadline, frames)
	now := int64(0) // read once a Recv, for its first frame of ours
	for i := range frames[:n] {
		w.look(&frames[i], &now)
	}
	return n, err
}

// look looks at one received frame; *now is the wall clock in Unix ns,
// read at the first frame that needs it (0: not yet), so that the
// frames of one Recv cost one clock read, not one each (about 80
// instructions a frame: BenchmarkDaemonPath).
func (w *watchLink) look(f *link.Frame, now *int64) {
	b := f.Data
	if len(b) < frame.EthernetHeaderLen+frame.HeaderLen || binary.BigEndian.Uint16(b[12:]) != w.etherType {
		return
	}
	v := frame.View(b[frame.EthernetHeaderLen:])
	if v.Version() != frame.Version {
		w.foreignFrame([6]byte(b[6:12]), v.Version())
		return
	}
	// The wall clock, not f.Time: status compares with time.Now, and a
	// simulated link stamps frames with virtual time.
	if id := v.Sender(); int(id) < maxWatched {
		if *now == 0 {
			*now = w.clock()
		}
		w.heard[id].Store(*now)
	}
	w.wire.received(b, v)
}

func (w *watchLink) foreignFrame(src [6]byte, version uint8) {
	w.mu.Lock()
	_, seen := w.foreign[src]
	if !seen && len(w.foreign) < 64 {
		w.foreign[src] = version
	}
	w.mu.Unlock()
	if !seen {
		w.log.Error("rbcastd: a host speaks another rbcast protocol version; its frames are dropped",
			"host", net.HardwareAddr(src[:]).String(), "its_version", version, "our_version", frame.Version)
	}
}

// lastHeard is when a frame from member id last arrived (zero: never).
func (w *watchLink) lastHeard(id frame.MemberID) time.Time {
	if int(id) >= maxWatched {
		return time.Time{}
	}
	ns := w.heard[id].Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// ForeignVersion describes hosts seen speaking another protocol version.
type ForeignVersion struct {
	Host    string `json:"host"`
	Version uint8  `json:"version"`
}

func (w *watchLink) foreignVersions() []ForeignVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ForeignVersion
	for mac, v := range w.foreign {
		out = append(out, ForeignVersion{Host: net.HardwareAddr(mac[:]).String(), Version: v})
	}
	return out
}

// versionError explains a failed registration when other-version frames
// were seen: that is the likelier cause than a missing server.
func (w *watchLink) versionError(err error) error {
	fv := w.foreignVersions()
	if len(fv) == 0 {
		return err
	}
	return fmt.Errorf("%w; frames of rbcast protocol version %d from %s were dropped: this build speaks version %d, so every member must run a build of the same protocol version",
		err, fv[0].Version, fv[0].Host, frame.Version)
}
