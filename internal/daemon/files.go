package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/filestore"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
	"golang.org/x/sys/unix"
)

// Files (issue 20; docs/protocols.md, "Files (IBRMP)"): the daemon runs
// the file core (reliable/files) beside its message group, on a link of
// its own — the same interface, the group id FilesGroup(G) — so that the
// message group's data path is untouched. The file core's member list is
// the message group's (its view, under -membership views), its member id
// and incarnation the daemon's in that group; when the daemon joins
// again as a new incarnation, the file core starts again with it.
//
// A received file is stored in the directory of the oldest recvfile
// client connected when its offer arrives, else in the inbox (run
// -inbox), else declined: the file core tells the sender, whose verdict
// names this member declined at once (files.CauseDeclined).
//
// An authenticated group (Config.Group.Auth: run -key-file, -encrypt)
// authenticates the files' link too, with the same key and algorithm
// (reliable.WrapFiles; docs/auth.md, "Files"): the daemon wraps it once, so
// that the keys rotate with the group's (rbcastd rekey takes each step
// on both links) and outlive the file core of each membership.

// FilesConfig configures the daemon's file dissemination.
type FilesConfig struct {
	// Link carries the file frames: a link of its own on the message
	// group's interface (rbcastd run opens it, with a kernel filter for
	// Group). The daemon does not close it.
	Link link.Link
	// Group is the file frames' group id: FilesGroup of the message
	// group's, unless set.
	Group uint32
	// Inbox is where the daemon stores the files it receives while no
	// recvfile client is connected; "" declines them then.
	Inbox string
	// KeepFree is the bytes the daemon leaves free on the file system of
	// the directory a file is stored in: a file that would leave less is
	// refused at its offer, and the sender told (no room).
	KeepFree uint64
	// DropWritten gives each received copy's written prefix back to the
	// page cache as it is written (filestore.Dir.DropWritten); off by
	// default.
	DropWritten bool
	// MaxSize, if not 0, is the largest file the daemon takes, in bytes:
	// a larger one is refused at its offer, and the sender told (larger
	// than it takes).
	MaxSize uint64
	// MaxReceiving is the most files the daemon receives at once; an
	// offer beyond waits until one ends (files.Config.MaxReceiving); 0
	// means the file core's default.
	MaxReceiving int
	// Rate is the file pacer's rate in bytes/s; 0 means
	// the file core's default (125 MB/s).
	Rate int64
	// OwnMACs says the files' link names members by MACs of its own, not
	// the message group's: link/udp on other ports (rbcastd run -link
	// udp), where each member's MAC is derived from its address and port.
	// The file core is then given no other member's MAC from the group's
	// list (it learns each from its frames' source, and sends to the
	// group until it has).
	OwnMACs bool
	// Tune, if set, adjusts the file core's configuration (tests).
	Tune func(*reliable.FilesConfig)
}

// FilesGroup is the group id of the file frames of message group g: g
// with its top bit flipped, so both are distinct and the kernel filter
// of each link passes only its own. (Group 0x80000000 maps to 0, which is
// no group: such a daemon needs an explicit -files-group.)
func FilesGroup(g uint32) uint32 { return g ^ 0x80000000 }

// FilesFailureTimeout is the file core's FailureTimeout in the daemon: a
// receiver silent this long fails a file (and a sender silent this long
// ends its transfers). Longer than the core's default (2 s): a receiver's
// loop stalls while it commits a large file (the fsync), and a daemon
// that shares two cores with others may not run for a while.
const FilesFailureTimeout = 5 * reliable.FileSecond

// memberPoll is how often the file service looks at the group's view.
const memberPoll = 100 * time.Millisecond

// maxRecent bounds the files listed in status' recent list.
const maxRecent = 32

// fileService is the daemon's file dissemination.
type fileService struct {
	d   *Daemon
	cfg FilesConfig
	// auth is the files' link's authentication (cfg.Link wraps it), nil
	// without a key; authErr is why it could not be set up (Run returns
	// it).
	auth    *auth.Link
	authErr error

	// mu guards what the sink and the status read. It is never held
	// while calling into the runner (whose loop calls the sink with its
	// own lock held).
	mu      sync.Mutex
	r       *reliable.Files // nil while the daemon is not a member
	clients []*fileClient   // recvfile clients, oldest first
	stored  map[xferKey]*xferInfo
	recent  []FileEvent
	rates   map[rateKey]rateSample
	self    frame.MemberID

	// wmu guards wait: the sendfile connection of each file sent by the
	// runner now. Held across runner.Send, so a verdict (handed out on
	// the loop, which takes wmu) never comes before its waiter.
	wmu  sync.Mutex
	wait map[uint32]*fileWaiter
	// opening counts the SendFiles between the bound's check and the
	// runner taking their file (or the refusal), under wmu: with wait,
	// the files queued here and not yet judged (sendBound).
	opening int
	// maxOpen and maxReceiving are the running core's MaxOpen and
	// MaxReceiving (start), under wmu.
	maxOpen, maxReceiving int
	// rooms are the connections of version 6 refused for the bound
	// since a place last freed (under wmu): each is sent one FileRoom
	// once one does, after its refusal was written (the channel closes
	// then).
	rooms map[*conn]chan struct{}
	// nofile, if not 0, stands for RLIMIT_NOFILE's soft limit (tests).
	nofile uint64
	// queuedHook, if set, runs in SendFile between the runner taking
	// the file and the FileQueued answer (tests).
	queuedHook func()

	bytesIn atomic.Uint64 // block bytes written to storage by this daemon
	runs    int           // runners started (a rejoin starts another)
}

// xferKey is one transfer: a sender's incarnation's file id.
type xferKey struct {
	sender frame.MemberID
	inc    uint32
	id     uint32
}

// xferInfo is where a received transfer is stored and how many bytes
// this daemon wrote for it.
type xferInfo struct {
	dir   string
	bytes atomic.Uint64
}

type rateKey struct {
	xferKey
	receiver frame.MemberID
}

type rateSample struct {
	at   time.Time
	held uint32
	rate float64 // blocks/s over the last interval
}

// fileClient is one recvfile connection.
type fileClient struct {
	c   *conn
	dir string
	ch  chan *localapi.FileReport
}

func newFileService(d *Daemon, cfg FilesConfig) *fileService {
	if cfg.Group == 0 {
		cfg.Group = FilesGroup(d.cfg.Group.Group)
	}
	s := &fileService{d: d, cfg: cfg, stored: map[xferKey]*xferInfo{}, rates: map[rateKey]rateSample{}, wait: map[uint32]*fileWaiter{}, rooms: map[*conn]chan struct{}{}}
	if a := d.cfg.Group.Auth; a != nil && cfg.Link != nil {
		s.auth, s.authErr = reliable.WrapFiles(cfg.Link, cfg.Group, d.cfg.Group.EtherType, auth.Config{Key: a.Key, Encrypt: a.Encrypt, Now: a.Now})
		if s.authErr == nil {
			s.cfg.Link = s.auth
		}
	}
	return s
}

// rekey takes a step of a key rotation on the files' link, after the
// message group took it (rekeyStep): k to install, or fp to activate,
// or neither to retire.
func (s *fileService) rekey(step uint8, k *auth.Key, fp uint64) error {
	if s == nil || s.auth == nil {
		return nil
	}
	var err error
	switch step {
	case localapi.RekeyInstall:
		err = s.auth.Install(k)
	case localapi.RekeyActivate:
		err = s.auth.Activate(fp)
	case localapi.RekeyRetire:
		s.auth.Retire()
	}
	if err != nil {
		return fmt.Errorf("the files' link (the group's took the step): %w", err)
	}
	return nil
}

// groupMembers is g's member list: its view's, or the list it started
// with.
func groupMembers(g *reliable.Group) (ms []frame.MemberInfo, view uint32) {
	if v, ok := g.View(); ok {
		return v.Members, v.ID
	}
	return g.MemberList(), 0
}

// start runs the file core for membership g until the returned stop.
func (s *fileService) start(g *reliable.Group) (stop func()) {
	if s == nil {
		return func() {}
	}
	ms, view := groupMembers(g)
	ms = s.withOwnMAC(ms, g.Self())
	cfg := reliable.FilesConfig{Group: s.cfg.Group, Self: g.Self(), Members: ms, EtherType: s.d.cfg.Group.EtherType, Rate: s.cfg.Rate, Sink: &fileSink{s},
		FailureTimeout: FilesFailureTimeout, MaxSize: s.cfg.MaxSize, MaxReceiving: s.cfg.MaxReceiving}
	if s.cfg.Tune != nil {
		s.cfg.Tune(&cfg)
	}
	s.wmu.Lock()
	s.maxOpen, s.maxReceiving = cmp.Or(cfg.MaxOpen, reliable.FilesDefaultMaxOpen), cmp.Or(cfg.MaxReceiving, reliable.FilesDefaultMaxReceiving)
	s.wmu.Unlock()
	r, err := reliable.StartFiles(s.cfg.Link, cfg, s.d.log)
	if err != nil {
		s.d.log.Error("rbcastd: files off: the file core did not start", "err", err)
		return func() {}
	}
	r.Subscribe(s.onReport)
	s.mu.Lock()
	s.r, s.self = r, g.Self()
	s.runs++
	s.mu.Unlock()
	s.d.log.Info("rbcastd: files on", "files_group", s.cfg.Group, "self", g.Self(), "inbox", s.cfg.Inbox)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(memberPoll)
		defer t.Stop()
		lastSample := time.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if ms2, v := groupMembers(g); v != view || len(ms2) != len(ms) {
				view, ms = v, ms2
				r.SetMembers(s.withOwnMAC(ms2, g.Self()))
			}
			if time.Since(lastSample) >= time.Second {
				lastSample = time.Now()
				s.sample(r.Progress(), lastSample)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		s.mu.Lock()
		s.r = nil
		s.mu.Unlock()
		r.Close()
		s.wmu.Lock()
		waiting := s.wait
		s.wait = map[uint32]*fileWaiter{}
		rooms := s.freed(len(waiting))
		s.wmu.Unlock()
		tellRoom(rooms)
		for id, w := range waiting {
			w.tell(&localapi.FileVerdict{ID: id, Text: "the daemon left the group (or joins it again as a new incarnation) before the file's verdict; send it again"})
		}
	}
}

// withOwnMAC is ms with this member's MAC replaced by the file link's
// (the same interface's, so the same MAC, on a real network), and with
// FilesConfig.OwnMACs, every other member's cleared.
func (s *fileService) withOwnMAC(ms []frame.MemberInfo, self frame.MemberID) []frame.MemberInfo {
	ms = slices.Clone(ms)
	hw := s.cfg.Link.HardwareAddr()
	for i := range ms {
		switch {
		case ms[i].ID == self && len(hw) == 6:
			ms[i].MAC = [6]byte(hw)
		case ms[i].ID != self && s.cfg.OwnMACs:
			ms[i].MAC = [6]byte{}
		}
	}
	return ms
}

func (s *fileService) runner() *reliable.Files {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

// fileSink stores received files: in the oldest recvfile client's
// directory, else the inbox, else declined (the sender is told).
type fileSink struct{ s *fileService }

var _ reliable.FileHoldingSink = (*fileSink)(nil)

func (k *fileSink) Open(m reliable.FileMeta) (reliable.FileSinkFile, []frame.Range, error) {
	s := k.s
	dir := k.dir()
	if dir == "" {
		return nil, nil, reliable.ErrFileDeclined
	}
	f, held, err := (&filestore.Dir{Root: dir, KeepFree: s.cfg.KeepFree, DropWritten: s.cfg.DropWritten}).Open(m)
	if errors.Is(err, reliable.ErrFileNoSpace) || errors.Is(err, reliable.ErrFileNameTooLong) || errors.Is(err, reliable.ErrFileTooBigForFS) || errors.Is(err, reliable.ErrFileBadName) {
		return nil, nil, err // a refusal: logged at its report (onReport), with the core's
	}
	if err != nil {
		s.d.log.Warn("rbcastd: a file could not be stored", "file", m.Name, "from", m.Sender, "dir", dir, "err", err)
		return nil, nil, err
	}
	info := &xferInfo{dir: dir}
	s.mu.Lock()
	s.stored[xferKey{m.Sender, m.Incarnation, m.ID}] = info
	s.mu.Unlock()
	if st, ok := f.(interface{ Stored() bool }); ok && st.Stored() {
		s.d.log.Info("rbcastd: a file of this name and size is stored already; the file's hash decides whether it is this one", "file", m.Name, "from", m.Sender, "dir", dir)
	} else if len(held) > 0 {
		n := uint32(0)
		for _, r := range held {
			n += r.Last - r.First + 1
		}
		s.d.log.Info("rbcastd: resuming a file from its partial copy", "file", m.Name, "from", m.Sender, "blocks_held", n, "blocks", m.Blocks())
	}
	return &countingFile{FileSinkFile: f, info: info, total: &s.bytesIn}, held, nil
}

// Holds reports whether the directory Open would store m in holds it
// whole (files.HoldingSink, filestore.Dir.Holds): such an offer, coming
// while -files-max-receiving files are being received, is judged at once.
func (k *fileSink) Holds(m reliable.FileMeta) bool {
	dir := k.dir()
	return dir != "" && (&filestore.Dir{Root: dir, KeepFree: k.s.cfg.KeepFree}).Holds(m)
}

// dir is where a file arriving now is stored: the oldest recvfile
// client's directory, else the inbox ("": neither, declined).
func (k *fileSink) dir() string {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clients) > 0 {
		return s.clients[0].dir
	}
	return s.cfg.Inbox
}

// countingFile counts the bytes written.
type countingFile struct {
	reliable.FileSinkFile
	info  *xferInfo
	total *atomic.Uint64
}

var _ reliable.FileSummedSinkFile = (*countingFile)(nil)

func (f *countingFile) WriteBlock(b uint32, data []byte) error {
	return f.counted(f.FileSinkFile.WriteBlock(b, data), len(data))
}

// WriteBlockSum passes the block's CRC-32C on to a store that takes it
// (filestore's), so that it does not compute it again.
func (f *countingFile) WriteBlockSum(b uint32, data []byte, sum uint32) error {
	if s, ok := f.FileSinkFile.(reliable.FileSummedSinkFile); ok {
		return f.counted(s.WriteBlockSum(b, data, sum), len(data))
	}
	return f.WriteBlock(b, data)
}

func (f *countingFile) counted(err error, n int) error {
	if err == nil {
		f.info.bytes.Add(uint64(n))
		f.total.Add(uint64(n))
	}
	return err
}

// FileEvent is a file finished here, in status' recent list.
type FileEvent struct {
	At     string `json:"at"`
	Kind   string `json:"kind"` // received, incomplete, sent
	Sender int    `json:"sender"`
	ID     uint32 `json:"id"`
	Name   string `json:"name"`
	Size   uint64 `json:"size"`
	// Hash is the file's hash as "alg:hex" (blake3:…, sha256:…); SHA256
	// its hex when the algorithm is SHA-256.
	Hash   string `json:"hash"`
	SHA256 string `json:"sha256,omitempty"`
	Dir    string `json:"dir,omitempty"`
	// Received bytes this daemon wrote for it (a resume writes fewer than
	// Size).
	Received uint64 `json:"received_bytes,omitempty"`
	// Done and Missing: a verdict's receivers.
	Done    []int    `json:"done,omitempty"`
	Missing []string `json:"missing,omitempty"`
	Detail  string   `json:"detail,omitempty"`
}

// onReport takes the core's reports, on the runner's loop.
func (s *fileService) onReport(r reliable.FileReport) {
	k := xferKey{r.Meta.Sender, r.Meta.Incarnation, r.Meta.ID}
	alg := r.Meta.HashAlg
	if alg == 0 {
		alg = frame.FileHashSHA256
	}
	ev := FileEvent{At: stamp(time.Now()), Kind: r.Kind.String(), Sender: int(r.Meta.Sender), ID: r.Meta.ID, Name: r.Meta.Name,
		Size: r.Meta.Size, Hash: reliable.FormatFileHash(alg, r.Meta.Hash)}
	if alg == frame.FileHashSHA256 {
		ev.SHA256 = fmt.Sprintf("%x", r.Meta.Hash)
	}
	switch r.Kind {
	case reliable.FileRefused:
		// Every refusal at the offer, the core's (MTU, -files-max-size,
		// its most blocks) and the store's (room, name, the file
		// system's largest file), once, with the reason the sender is
		// told and what was beyond it.
		s.d.log.Warn("rbcastd: a file is refused here; the sender told", "file", r.Meta.Name, "from", r.Meta.Sender, "id", r.Meta.ID,
			"size", r.Meta.Size, "reason", r.Cause.String(), "err", r.Err)
		return
	case reliable.FileReceived, reliable.FileIncomplete:
		s.mu.Lock()
		info := s.stored[k]
		delete(s.stored, k)
		var to []*fileClient
		if info != nil {
			ev.Dir, ev.Received = info.dir, info.bytes.Load()
			for _, c := range s.clients {
				if c.dir == info.dir {
					to = append(to, c)
				}
			}
		}
		s.mu.Unlock()
		rep := &localapi.FileReport{Kind: localapi.FileReceived, Sender: uint16(r.Meta.Sender), Incarnation: r.Meta.Incarnation,
			ID: r.Meta.ID, Size: r.Meta.Size, Hash: r.Meta.Hash, Name: r.Meta.Name, HashAlg: uint8(alg)}
		switch {
		case r.Held:
			ev.Detail = "held already: stored with this hash, no block received"
		case r.Replaced:
			ev.Detail = "replaced another file stored under its name, of its size (FileEnd's hash did not match it)"
		}
		if r.Kind == reliable.FileIncomplete {
			rep.Kind, rep.Cause = localapi.FileIncomplete, uint8(r.Cause)
			if ev.Detail != "" {
				ev.Detail = "; " + ev.Detail
			}
			ev.Detail = r.Cause.String() + ev.Detail
			s.d.log.Warn("rbcastd: file incomplete", "file", r.Meta.Name, "from", r.Meta.Sender, "id", r.Meta.ID, "cause", r.Cause.String(), "replaced", r.Replaced)
		} else {
			s.d.log.Info("rbcastd: file received", "file", r.Meta.Name, "from", r.Meta.Sender, "id", r.Meta.ID, "size", r.Meta.Size,
				"hash", ev.Hash, "dir", ev.Dir, "received_bytes", ev.Received, "held", r.Held, "replaced", r.Replaced)
		}
		s.remember(ev)
		for _, c := range to {
			rep := rep
			if c.c.version < 4 && alg != frame.FileHashSHA256 {
				// Its FileReport says SHA-256: zeros, not another
				// algorithm's hash under that name.
				rep = &localapi.FileReport{Kind: rep.Kind, Cause: rep.Cause, Sender: rep.Sender, Incarnation: rep.Incarnation, ID: rep.ID, Size: rep.Size, Name: rep.Name}
			}
			select {
			case c.ch <- rep:
			default:
				s.d.log.Warn("rbcastd: a recvfile client does not read; a report was dropped", "file", r.Meta.Name)
			}
		}
	case reliable.FileVerdict:
		ev.Kind = "sent"
		v := &localapi.FileVerdict{ID: r.Meta.ID}
		for _, id := range r.Done {
			v.Done = append(v.Done, uint16(id))
			ev.Done = append(ev.Done, int(id))
		}
		for _, m := range r.Missing {
			v.Missing = append(v.Missing, localapi.FileMiss{Member: uint16(m.Member), Cause: uint8(m.Cause), Held: m.Held, Blocks: m.Blocks})
			ev.Missing = append(ev.Missing, fmt.Sprintf("%d: %v (%d of %d blocks)", m.Member, m.Cause, m.Held, m.Blocks))
		}
		if r.Err != nil {
			v.Text, ev.Detail = r.Err.Error(), r.Err.Error()
		}
		s.d.log.Info("rbcastd: file sent", "file", r.Meta.Name, "id", r.Meta.ID, "done", ev.Done, "missing", ev.Missing, "err", r.Err)
		s.remember(ev)
		s.wmu.Lock()
		w := s.wait[r.Meta.ID]
		delete(s.wait, r.Meta.ID)
		var rooms map[*conn]chan struct{}
		if w != nil {
			rooms = s.freed(1)
		}
		s.wmu.Unlock()
		tellRoom(rooms)
		if w != nil {
			if w.c.version >= 3 {
				v.Hash = r.Meta.Hash // zeros if it was aborted before its hash
				v.HashAlg = uint8(alg)
			}
			w.tell(v)
		}
	}
}

// remember adds ev to status' recent list. A file's event is listed
// before its client is told (a report, a verdict), so that a client that
// asks for status once told finds it there.
func (s *fileService) remember(ev FileEvent) {
	s.mu.Lock()
	s.recent = append(s.recent, ev)
	if len(s.recent) > maxRecent {
		s.recent = slices.Delete(s.recent, 0, len(s.recent)-maxRecent)
	}
	s.mu.Unlock()
}

// errNoFiles refuses a file request of a daemon without files.
var errNoFiles = errors.New("this daemon carries no files (rbcastd run -files=false, or -link udp)")

// refuse answers a file request with an Error of code CodeRefused; the
// connection stays open.
func (c *conn) refuse(format string, args ...any) bool {
	c.fail(localapi.CodeRefused, true, format, args...)
	return true
}

// sendFile serves SendFile.
func (c *conn) sendFile(m *localapi.SendFile) bool {
	s := c.d.files
	if s == nil {
		return c.refuse("sendfile %s: %v", m.Name, errNoFiles)
	}
	if err := c.mayOwner("send or receive files through it"); err != nil {
		return c.refuse("sendfile %s: %v", m.Name, err)
	}
	if !filepath.IsAbs(m.Path) {
		return c.refuse("sendfile %s: the path %q is not absolute", m.Name, m.Path)
	}
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	r := s.runner()
	if r == nil {
		return c.refuse("sendfile %s: the daemon is joining the group again; try again", m.Name)
	}
	var to []frame.MemberID
	if len(m.To) > 0 {
		ms, _ := groupMembers(g)
		ids := make([]frame.MemberID, len(ms))
		for i, x := range ms {
			ids[i] = x.ID
		}
		for _, id := range m.To {
			switch {
			case frame.MemberID(id) == g.Self():
				return c.refuse("sendfile %s: member %d is this daemon itself", m.Name, id)
			case !slices.Contains(ids, frame.MemberID(id)):
				return c.refuse("sendfile %s: member %d is not in the group (members %v)", m.Name, id, ids)
			}
			to = append(to, frame.MemberID(id))
		}
	}
	// A client of version 3 takes the hash in the verdict: the core
	// hashes the file as its pass sends it (the first block goes out at
	// once); to an older one FileQueued carries it, hashed first. A
	// client of version 4 may name another algorithm than SHA-256
	// (SendFileAlg); the others' is SHA-256.
	alg := frame.FileHashAlg(m.HashAlg)
	switch {
	case alg == 0:
		alg = frame.FileHashSHA256
	case !alg.Known():
		return c.refuse("sendfile %s: hash algorithm %v is unknown to this daemon (it hashes with %v or %v)", m.Name, alg, frame.FileHashSHA256, frame.FileHashBLAKE3)
	}
	s.wmu.Lock()
	if n, b := len(s.wait)+s.opening, s.sendBound(); n >= b.files {
		// A client of version 6 gets a code of its own and, once a
		// place frees, a FileRoom: it registers here, under the lock
		// the places free under, so that none frees unseen between
		// the check and the refusal. An older one gets code 7 (and
		// sendfile of version 5 tells it by its text) and no FileRoom,
		// which it would not decode.
		var written chan struct{}
		if c.version >= 6 {
			written = make(chan struct{})
			s.rooms[c] = written
		}
		s.wmu.Unlock()
		const f = "sendfile %s: %d files are %s, its bound (%v); send it again after a verdict"
		if written == nil {
			return c.refuse(f, m.Name, n, QueuedBoundText, b)
		}
		c.fail(localapi.CodeQueuedBound, true, f, m.Name, n, QueuedBoundText, b)
		close(written)
		return true
	}
	s.opening++
	s.wmu.Unlock()
	open := filestore.OpenSource
	if c.version >= 3 {
		open = filestore.OpenSourceHashLater
	}
	src, err := open(m.Path, m.Name)
	if err != nil {
		s.wmu.Lock()
		s.opening--
		rooms := s.freed(1)
		s.wmu.Unlock()
		tellRoom(rooms)
		return c.refuse("sendfile %s: %v", m.Name, err)
	}
	src.HashAlg = alg
	w := &fileWaiter{c: c, queued: make(chan struct{})}
	s.wmu.Lock()
	s.opening--
	id, err := r.Send(src.Outgoing(to))
	var rooms map[*conn]chan struct{}
	if err == nil {
		s.wait[id] = w
	} else {
		rooms = s.freed(1)
	}
	s.wmu.Unlock()
	tellRoom(rooms)
	if err != nil {
		src.Close()
		return c.refuse("sendfile %s: %v", m.Name, err)
	}
	c.d.log.Info("rbcastd: sending a file", "file", m.Name, "id", id, "size", src.Size, "to", to, "hash", alg)
	if s.queuedHook != nil {
		s.queuedHook()
	}
	err = c.write(&localapi.FileQueued{ID: id, Size: src.Size, Hash: src.Hash, Name: src.Name})
	close(w.queued)
	return err == nil
}

// QueuedBoundText is in the refusal of a SendFile beyond the bound on the
// files queued at a daemon and not yet judged (sendBound): rbcastd
// sendfile waits for a verdict and sends the file again. The refusal's
// code is localapi.CodeQueuedBound for a client of version 6 and later,
// CodeRefused for an earlier one.
const QueuedBoundText = "queued at this daemon and not yet judged"

// IsQueuedBound reports whether text, the refusal of a SendFile of the
// file name, is the refusal for the bound on queued files (sendBound's
// "sendfile NAME: N files are QueuedBoundText, its bound (...)"), and
// not another whose text merely holds the phrase (in a name or path).
// Only a daemon of version 5 needs it (its refusal is CodeRefused, told
// by the text; earlier ones had no bound): from version 6 on the code
// says it.
func IsQueuedBound(text, name string) bool {
	rest, ok := strings.CutPrefix(text, "sendfile "+name+": ")
	if !ok {
		return false
	}
	n, _, ok := strings.Cut(rest, " files are "+QueuedBoundText+", its bound (")
	if !ok || n == "" {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// forgetRoom drops c from the connections waiting for a place: a
// client refused for the bound that went away is told nothing, and one
// that connects, is refused and leaves, again and again while every
// place is held, does not grow rooms.
func (s *fileService) forgetRoom(c *conn) {
	s.wmu.Lock()
	delete(s.rooms, c)
	s.wmu.Unlock()
}

// roomsWaiting is how many connections wait for a place (tests).
func (s *fileService) roomsWaiting() int {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return len(s.rooms)
}

// freed takes the connections waiting for a place (rooms) once n
// places have freed (none if n is 0). Called with wmu held; tellRoom
// tells them after it is released.
func (s *fileService) freed(n int) map[*conn]chan struct{} {
	if n == 0 || len(s.rooms) == 0 {
		return nil
	}
	rooms := s.rooms
	s.rooms = map[*conn]chan struct{}{}
	return rooms
}

// tellRoom sends each connection a FileRoom, after its refusal (written
// closes), without holding up the caller (the runner's loop, a
// SendFile). Every one is told, not one: one whose client went away
// would keep the place unused; those that lose the race for it are
// refused again and wait for the next.
func tellRoom(rooms map[*conn]chan struct{}) {
	for c, written := range rooms {
		go func() {
			<-written
			c.write(&localapi.FileRoom{})
		}()
	}
}

// queueBound is the most files queued at the daemon and not yet judged,
// and what it is derived from.
type queueBound struct {
	files                        int
	nofile                       uint64
	afterVerdict, received, rest int
}

func (b queueBound) String() string {
	return fmt.Sprintf("%d: of its RLIMIT_NOFILE, %d, %d kept for files still open after their verdict, %d for files it receives, %d for the rest",
		b.files, b.nofile, b.afterVerdict, b.received, b.rest)
}

// sendBound bounds the descriptors the files sent hold (docs/protocols.md,
// "Files (IBRMP)", "Built, and not yet"): each file queued holds one
// from its SendFile until the core closes it, which is after its
// verdict, up to MaxOpen judged files staying open for late repairs.
// Files queued and not yet judged may then take RLIMIT_NOFILE's soft
// limit less MaxOpen, two for each file received at once
// (MaxReceiving), and an eighth of the limit, at least 64, for the
// sockets, clients and the rest; at least 1. Read at each SendFile, so
// a limit raised while the daemon runs (prlimit) counts. Called with
// wmu held.
func (s *fileService) sendBound() queueBound {
	b := queueBound{nofile: s.nofile, afterVerdict: s.maxOpen, received: 2 * s.maxReceiving}
	if b.nofile == 0 {
		var r unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == unix.RLIM_INFINITY || r.Cur > 1<<30 {
			b.nofile = 1 << 30
		} else {
			b.nofile = r.Cur
		}
	}
	b.rest = int(max(64, b.nofile/8))
	b.files = max(1, int(b.nofile)-b.afterVerdict-b.received-b.rest)
	return b
}

// fileWaiter is the sendfile connection waiting for a file's verdict.
// The verdict may be ready before the connection has its FileQueued (a
// small file, or one every receiver holds already): tell holds it until
// then, as the client learns the file's id from FileQueued.
type fileWaiter struct {
	c      *conn
	queued chan struct{} // closed once FileQueued was written (or failed)
}

// tell writes the verdict m to w's connection once it has FileQueued,
// without holding up the caller.
func (w *fileWaiter) tell(m localapi.Message) {
	go func() {
		<-w.queued
		w.c.write(m)
	}()
}

// receiveFiles serves ReceiveFiles: it stores files under the directory
// while the client is connected, reporting each, and ends when the
// client closes the connection.
func (c *conn) receiveFiles(m *localapi.ReceiveFiles) bool {
	s := c.d.files
	if s == nil {
		c.fail(localapi.CodeRefused, false, "%v", errNoFiles)
		return false
	}
	if err := c.mayOwner("send or receive files through it"); err != nil {
		c.fail(localapi.CodeRefused, false, "%v", err)
		return false
	}
	if err := checkStoreDir(m.Dir); err != nil {
		c.fail(localapi.CodeRefused, false, "%v", err)
		return false
	}
	fc := &fileClient{c: c, dir: m.Dir, ch: make(chan *localapi.FileReport, 1024)}
	s.mu.Lock()
	s.clients = append(s.clients, fc)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.clients = slices.DeleteFunc(s.clients, func(x *fileClient) bool { return x == fc })
		s.mu.Unlock()
	}()
	if c.write(&localapi.ReceivingFiles{Dir: m.Dir}) != nil {
		return false
	}
	go func() {
		for {
			select {
			case rep := <-fc.ch:
				if c.write(rep) != nil {
					return
				}
			case <-c.ctx.Done():
				return
			}
		}
	}()
	buf := make([]byte, 64)
	for {
		if _, _, err := c.read(buf); err != nil {
			return false
		}
	}
}

// checkStoreDir checks that dir is an absolute path of a directory the
// daemon can store files in.
func checkStoreDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("the directory %q is not absolute", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	part := filepath.Join(dir, filestore.PartialDir)
	if err := os.MkdirAll(part, 0o755); err != nil {
		return fmt.Errorf("%s cannot hold files: %w", dir, err)
	}
	f, err := os.CreateTemp(part, ".probe-*")
	if err != nil {
		return fmt.Errorf("%s cannot hold files: %w", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// CheckInbox checks run -inbox's directory.
func CheckInbox(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return checkStoreDir(abs)
}
