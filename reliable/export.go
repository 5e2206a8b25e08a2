package reliable

import (
	"errors"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/view"
)

// What programs above reliable need of the cores, re-exported so that they
// import reliable only (internal/archtest checks it).

// DefaultFailureTimeout is how long a member may stay silent before it is
// removed when Config.FailureTimeout is 0 (the same under FIFO and Total).
const DefaultFailureTimeout = time.Duration(pbp.DefaultFailureTimeout)

// IsWindowFull reports whether err, from Driver.Propose or TrySend, is
// back-pressure (ErrWindowFull, the one every core returns): propose again
// after a later Step.
func IsWindowFull(err error) bool { return errors.Is(err, ErrWindowFull) }

// ViewNumber is the number part of a view id (reliable/view: an id pairs
// a number with the member that proposed the view); a group's founding
// view is number 1.
func ViewNumber(id uint32) uint32 { return view.Number(id) }

// ViewProposer is the member that proposed view id (or founded it).
func ViewProposer(id uint32) frame.MemberID { return view.Proposer(id) }

// RelayOverhead is how much smaller Config.Relay makes the largest
// message than the MTU and the ack vector allow: room for the relay's
// wrapping of a frame (pbp.RelayOverhead).
const RelayOverhead = pbp.RelayOverhead

// The file core's types the users of Files need (rbcastd's files).
type (
	FilesConfig  = files.Config
	FileReport   = files.Report
	FileMeta     = files.Meta
	FileProgress = files.Progress
	// FileReceiverProgress is a receiver of a file sent here, in its
	// FileProgress.
	FileReceiverProgress = files.ReceiverProgress
	FileSinkFile         = files.SinkFile
	// FileSummedSinkFile takes each block with its CRC-32C, taken from
	// the frame's.
	FileSummedSinkFile = files.SummedSinkFile
	// FileHoldingSink says whether it holds a file whole before a copy
	// opens.
	FileHoldingSink = files.HoldingSink
	FileCause       = files.Cause
)

// FileCauseDeclined: the receiver declined the file (a FileCause).
const FileCauseDeclined = files.CauseDeclined

// FileReport's kinds.
const (
	FileReceived   = files.Received
	FileIncomplete = files.Incomplete
	FileVerdict    = files.Verdict
	FileRefused    = files.Refused
)

// The file core's clock units (FilesConfig's durations, FilesStats.Core's
// SRTT).
const (
	FileMicrosecond = files.Microsecond
	FileSecond      = files.Second
)

// The file core's defaults for FilesConfig's MaxOpen and MaxReceiving
// (0 there means these): what a runtime counts on when it bounds the
// descriptors its files hold.
const (
	FilesDefaultMaxOpen      = files.DefaultMaxOpen
	FilesDefaultMaxReceiving = files.DefaultMaxReceiving
)

// ErrFileDeclined is what a file Sink returns for a file it does not want:
// the core tells the sender, whose verdict names this member declined.
var ErrFileDeclined = files.ErrDeclined

// ErrFileNoSpace and ErrFileNameTooLong, wrapped in a file Sink's error,
// refuse a file beyond one of the sink's limits: the core tells the
// sender which, whose verdict names it at once.
var (
	ErrFileNoSpace     = files.ErrNoSpace
	ErrFileNameTooLong = files.ErrNameTooLong
	ErrFileTooBigForFS = files.ErrTooBigForFS
	ErrFileBadName     = files.ErrBadName
)

// FileCauseText says why a transfer did not complete, for a cause code of
// the local API (localapi.FileCause*).
func FileCauseText(c uint8) string { return files.Cause(c).String() }

// FormatFileHash spells a file's hash as "alg:hex" (blake3:…, sha256:…).
func FormatFileHash(a frame.FileHashAlg, sum [frame.FileHashLen]byte) string {
	return files.FormatHash(a, sum)
}
