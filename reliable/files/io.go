package files

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rbcast/rbcast/frame"
)

// Meta is a transfer's identity: the sender, its incarnation and the
// file id make it unique; the rest is what the offer announced.
type Meta struct {
	Sender      frame.MemberID
	Incarnation uint32
	ID          uint32
	Name        string
	Size        uint64
	BlockSize   uint32
	Hash        [frame.FileHashLen]byte
	// HashAlg is Hash's algorithm (the offer's; 0 is SHA-256).
	HashAlg frame.FileHashAlg
}

// Blocks is the file's number of blocks.
func (m Meta) Blocks() uint32 { return uint32(frame.FileBlocks(m.Size, m.BlockSize)) }

// BlockLen is the length of block b (the last may be shorter).
func (m Meta) BlockLen(b uint32) int {
	off := uint64(b) * uint64(m.BlockSize)
	return int(min(uint64(m.BlockSize), m.Size-off))
}

func (m Meta) String() string {
	return fmt.Sprintf("file %d %q of member %d (incarnation %d, %d bytes)", m.ID, m.Name, m.Sender, m.Incarnation, m.Size)
}

// Source is a file being sent: the core reads its blocks through it (a
// *os.File live, memory in the simulator), so it never holds a file.
type Source interface {
	// ReadAt reads len(p) bytes at offset off (io.ReaderAt): one block.
	// Fewer bytes, or an error other than io.EOF with all of them, abort
	// the file.
	ReadAt(p []byte, off int64) (int, error)
	// Close is called once the file closes at the sender.
	Close() error
}

// A RunSource is a Source that reads a run of blocks that follow each
// other in the file with one call, each into a buffer of its own: the
// core reads the pass's next blocks straight into the frames they go out
// in (preadv: one copy, from the page cache into the frame, and one
// system call per run). The core reads a Source that is not one a block
// per ReadAt, into the frame as well.
type RunSource interface {
	Source
	// ReadRunAt reads into ps in turn from offset off, as ReadAt would
	// read into their concatenation: n counts the bytes read into all
	// of them; fewer than they hold come with an error (io.EOF at the
	// file's end). The core keeps the whole blocks of a short read and
	// reads the rest again, a block at a time when it comes to them.
	ReadRunAt(ps [][]byte, off int64) (n int, err error)
}

// Sink stores received files.
type Sink interface {
	// Open opens the partial copy of transfer m, or resumes one it kept
	// (a sink keys partials by name, size, block size and hash, so the
	// same file offered again resumes). m.Hash is the offer's: all zeros
	// when the sender sends the hash in FileEnd instead (the core checks
	// Sum against it, and a partial of another file under the same name
	// and size is caught by that check and fetched again). held lists the blocks it already
	// has, each verified against the hash the sink stored beside it when
	// it wrote the block. An error refuses the file (a bad name, no
	// room); ErrDeclined declines it (not for this member): nothing is
	// stored, and the sender is told (CauseDeclined).
	//
	// A file the sink stores under m.Name already, of m.Size bytes, is
	// returned with every block held when m.Hash is its hash, or when
	// m.Hash is zeros (a candidate: its Sum, best from what the sink
	// recorded when it stored it, is checked against FileEnd's hash;
	// when they differ, the core opens the transfer again with m.Hash
	// set to FileEnd's, which a stored file of another hash must not
	// match).
	Open(m Meta) (f SinkFile, held []frame.Range, err error)
}

// A HoldingSink says, before the core opens a copy, whether it holds a
// file whole. An offer that comes while MaxReceiving files are being
// received, of a file it holds, is judged at once (opened, its blocks
// all held, its hash checked, reported done) instead of waiting for a
// file being received to end: it needs no block, and holds its copy for
// that step only. A sink that is not one has such files wait their turn.
type HoldingSink interface {
	Sink
	// Holds reports whether Open(m) would return every block of m held:
	// the file stored under m.Name with m.Hash (not zeros), or a partial
	// copy of m with every block written. It opens no copy and reads no
	// block; Open still checks what it says (a copy it finds lacking a
	// block after all is closed again, kept, and the transfer waits).
	Holds(m Meta) bool
}

// SinkFile is one transfer's partial copy.
type SinkFile interface {
	// WriteBlock stores block b.
	WriteBlock(b uint32, data []byte) error
	// Sum hashes the whole file (with the Meta's HashAlg) once every
	// block is written.
	Sum() ([frame.FileHashLen]byte, error)
	// Commit stores the file under its name (a temporary name, fsynced,
	// renamed: never a partial file under the real name).
	Commit() error
	// Abort gives the copy up; keep leaves the partial for a resume.
	Abort(keep bool)
}

// A SummedSinkFile takes each block with its CRC-32C, which the core
// derives from the FileData frame's CRC32C trailer (frame.SuffixCRC)
// without reading the block again: a sink that keeps a checksum per
// block (to find blocks a crash tore) need not compute it. The core
// passes it only where the trailer covers the block's bytes as they are
// (not on a link that seals every frame's CRC itself: SkipCRC).
type SummedSinkFile interface {
	SinkFile
	// WriteBlockSum is WriteBlock(b, data) with sum, data's CRC-32C.
	WriteBlockSum(b uint32, data []byte, sum uint32) error
}

// ErrDeclined is what Sink.Open returns for a file this member does not
// want: the core takes no block of it and reports it declined to its
// sender (FileStatus reason FileDeclined), once, and again whenever the
// sender's FileEnd still awaits this member; it reports nothing to its
// own driver (no Incomplete).
var ErrDeclined = errors.New("files: file declined")

// ErrNoSpace and ErrNameTooLong are what Sink.Open returns, wrapped, for
// a file beyond one of the sink's limits: no room for it on the disk, a
// name longer than the file system takes. The core refuses the file as it
// refuses one beyond its own limits (MTU, MaxBlocks): it takes no block
// and tells the sender which limit (CauseNoSpace, CauseNameTooLong), at
// once and again to each FileEnd that still awaits this member; it
// reports nothing to its own driver. Any other error of Open is a
// storage failure (CauseStorage).
var (
	ErrNoSpace     = errors.New("files: no room for the file")
	ErrNameTooLong = errors.New("files: name too long for the file system")
	// ErrTooBigForFS: the file is larger than a file may be where the
	// sink stores it (the file system's largest file, RLIMIT_FSIZE);
	// CauseTooBigForFS.
	ErrTooBigForFS = errors.New("files: larger than the file system allows a file to be")
	// ErrBadName: the name is not a local file path where the sink
	// stores files (filestore.CheckName); CauseBadName.
	ErrBadName = errors.New("files: name not a local file path")
)

// Outgoing is a file to send.
type Outgoing struct {
	Name string
	Size uint64
	// Hash is the file's hash, announced in its offer; all zeros: the
	// core hashes the file as its pass reads it, and announces the hash
	// in FileEnd, so that the first block goes out without a pass over
	// the file first. HashAlg is its algorithm (0: SHA-256); a receiver
	// from before the algorithm byte cannot receive a file of another
	// (CauseOldHashAlg).
	Hash    [frame.FileHashLen]byte
	HashAlg frame.FileHashAlg
	Source  Source
	// To is the receivers the sender waits for (the snapshot); nil means
	// every member of the group but the sender, when the file's pass ends.
	To []frame.MemberID
}

// ReportKind says what a Report is.
type ReportKind uint8

const (
	// Received: the file is stored under its name, its hash checked.
	Received ReportKind = iota + 1
	// Incomplete: this member gave the transfer up; Cause says why.
	Incomplete
	// Verdict: the sender's outcome of one file: who holds it and who
	// does not.
	Verdict
	// Refused: this member refused the file at its offer, beyond one of
	// its limits or of a name it does not store (Cause, Cause.Limit);
	// Err says what was beyond which limit (the core's words, or the
	// sink's). The sender is told; nothing was taken. One report per
	// transfer.
	Refused
)

func (k ReportKind) String() string {
	switch k {
	case Received:
		return "received"
	case Incomplete:
		return "incomplete"
	case Verdict:
		return "verdict"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("ReportKind(%d)", uint8(k))
}

// Cause says why a transfer did not complete at a receiver.
type Cause uint8

const (
	// CauseStorage: the sink refused the file or a block.
	CauseStorage = Cause(frame.FileStorage)
	// CauseHash: every block arrived twice over and the hash never
	// matched the offer's.
	CauseHash = Cause(frame.FileHashMismatch)
	// CauseClosed, CauseAborted, CauseUnknown: the sender's FileGone.
	CauseClosed  = Cause(frame.FileClosed)
	CauseAborted = Cause(frame.FileAborted)
	CauseUnknown = Cause(frame.FileUnknown)
	// CauseHashUnknown: the offer names a hash algorithm this member
	// does not know; it stores nothing it cannot verify.
	CauseHashUnknown = Cause(frame.FileHashUnknown)
	// CauseDeclined: the receiver's sink declined the file (ErrDeclined;
	// at an rbcastd: no recvfile client and no -inbox). It says so to the
	// sender, whose verdict names it at once instead of after
	// FailureTimeout.
	CauseDeclined = Cause(frame.FileDeclined)
	// CauseOverMTU, CauseTooLarge, CauseNoSpace, CauseNameTooLong: the
	// offer is beyond one of the receiver's limits (its blocks larger
	// than its MTU, more blocks than MaxBlocks or more bytes than
	// MaxSize, no room on its disk, a
	// name too long for its file system: ErrNoSpace, ErrNameTooLong). It
	// stores nothing and says so to the sender, whose verdict names the
	// limit at once instead of waiting out FailureTimeout.
	CauseOverMTU     = Cause(frame.FileOverMTU)
	CauseTooLarge    = Cause(frame.FileTooLarge)
	CauseNoSpace     = Cause(frame.FileNoSpace)
	CauseNameTooLong = Cause(frame.FileNameTooLong)
	// CauseTooBigForFS: the file is larger than the receiver's file
	// system allows a file to be (ErrTooBigForFS), refused so too.
	CauseTooBigForFS = Cause(frame.FileTooBigForFS)
	// CauseBadName: the name is not a local file path at the receiver
	// (ErrBadName: absolute, "..", the directory itself, its partial
	// copies' directory), refused so too: a defence against a sender
	// that offers such a name (rbcastd's never does).
	CauseBadName = Cause(frame.FileBadName)
	// CauseSilent: the other side was silent past FailureTimeout.
	CauseSilent Cause = 16
	// CauseLeft: the sender left before the file's pass began.
	CauseLeft Cause = 17
	// CauseRestarted: the sender came back with a new incarnation; the
	// old run's transfers are dead (its new offer of the same file
	// resumes from the partial copy).
	CauseRestarted Cause = 18
	// CauseOldReceiver (a sender's verdict only): the receiver reported a
	// hash mismatch on a file offered without its hash, or emptied its
	// copy (no block held after some), before it had seen the file's
	// FileEnd, which a receiver that knows such offers never does: it is
	// an rbcastd from before the hash in FileEnd, which takes the
	// offer's zeros for the file's hash and can never
	// store the file (docs/protocols.md, "Files (IBRMP)", Receivers of
	// an older version).
	CauseOldReceiver Cause = 19
	// CauseOldHashAlg (a sender's verdict only): the receiver asked for
	// the offer of a file hashed with another algorithm than SHA-256
	// without the flag that says it reads the offer's algorithm byte:
	// an rbcastd from before that byte, which drops such an offer and
	// can never receive the file (it is sent no block, and one
	// FileGone).
	CauseOldHashAlg Cause = 20
)

// Limit reports whether c names a receiver's limit that the offer is
// beyond (the receiver refused it).
func (c Cause) Limit() bool { return c < CauseSilent && frame.FileReason(c).Limit() }

func (c Cause) String() string {
	switch c {
	case CauseSilent:
		return "silent past the failure timeout"
	case CauseLeft:
		return "the sender left"
	case CauseRestarted:
		return "the sender restarted"
	case CauseOldReceiver:
		return "hash mismatch: an rbcastd too old for a file offered without its hash (upgrade it)"
	case CauseOldHashAlg:
		return "an rbcastd too old for a file not hashed with SHA-256 (upgrade it, or send the file with SHA-256)"
	}
	return frame.FileReason(c).String()
}

// Miss is a receiver of the snapshot that does not hold the file.
type Miss struct {
	Member frame.MemberID
	Cause  Cause
	// Held and Blocks say how far it got, as last reported.
	Held, Blocks uint32
}

// Report is the outcome of a transfer at this member.
type Report struct {
	Kind ReportKind
	At   Time
	Meta Meta
	// Cause (Incomplete, Refused) says why.
	Cause Cause
	// Verdict: the members of the snapshot that hold the file, and those
	// that do not. Err is the source's error of an aborted file.
	Done    []frame.MemberID
	Missing []Miss
	Err     error
	// Received: Held says no block of the file came in this transfer:
	// the sink held them all (the file stored already, or a partial copy
	// complete before a restart), checked against the file's hash.
	// Replaced (Received and Incomplete) says the file the sink held
	// under the name, of the same size, for an offer without a hash was
	// another file (FileEnd's hash did not match it): every block was
	// fetched again, to replace it.
	Held, Replaced bool
}

func (r Report) String() string {
	switch r.Kind {
	case Received:
		s := fmt.Sprintf("received %v, %v %x", r.Meta, r.Meta.HashAlg, r.Meta.Hash[:8])
		switch {
		case r.Held:
			s += ", held already"
		case r.Replaced:
			s += ", replacing another file stored under its name"
		}
		return s
	case Refused:
		s := fmt.Sprintf("refused %v: %v", r.Meta, r.Cause)
		if r.Err != nil {
			s += fmt.Sprintf(" (%v)", r.Err)
		}
		return s
	case Incomplete:
		s := fmt.Sprintf("incomplete %v: %v", r.Meta, r.Cause)
		if r.Replaced {
			s += " (the file stored under its name is another)"
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sent %v: %d done %v", r.Meta, len(r.Done), r.Done)
	for _, m := range r.Missing {
		fmt.Fprintf(&b, "; member %d not done (%v, %d of %d blocks)", m.Member, m.Cause, m.Held, m.Blocks)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, "; %v", r.Err)
	}
	return b.String()
}

// OK reports whether a verdict names no member that lacks the file.
func (r Report) OK() bool { return r.Kind == Verdict && len(r.Missing) == 0 && r.Err == nil }
