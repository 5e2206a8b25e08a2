// Package frame is rbcast's wire format: encoding appends into a caller's
// buffer and allocates nothing; decoding validates the bytes and returns a
// View over them that copies nothing. The layout is specified in
// docs/wire-format.md; every frame type has a golden vector in testdata.
//
// A frame on the wire is an Ethernet II header followed by an rbcast frame:
//
//	fixed header (24 bytes) | ack vector (4 × AckCount) | [auth] | body | CRC32C (4)
//
// Multi-byte fields are big-endian (network byte order). The Length field
// holds the rbcast frame's own length, so Ethernet padding after it is
// ignored.
//
// This package imports nothing of rbcast's, and only pure parts of the
// standard library, so protocol cores can use it.
package frame

import "fmt"

// Version is the wire format version this package speaks. A receiver drops
// frames of any other version (ErrVersion): a new version is a new protocol.
// Changes that old receivers may ignore travel in the non-critical flag bits
// instead (see Flags).
const Version = 4

// Sizes of the fixed parts of a frame.
const (
	HeaderLen   = 28 // fixed header
	AckEntryLen = 4  // one ack vector entry
	CRCLen      = 4  // CRC32C trailer
	// Overhead is the rbcast bytes of a frame with an empty ack vector,
	// an empty body and no auth tag.
	Overhead = HeaderLen + CRCLen
	// MinMTU is the smallest link MTU rbcast runs on: room for the fixed
	// overhead, a 64-member ack vector and a useful payload.
	MinMTU = 576
	// MaxAuthTag is the longest authentication tag the format carries.
	MaxAuthTag = 64
	// AuthFixedLen is the authentication section without its tag:
	// algorithm (1), tag length (1), key id (1), counter (8).
	AuthFixedLen = 11
)

// Field offsets in the fixed header.
const (
	offVersion     = 0
	offType        = 1
	offFlags       = 2
	offLength      = 4
	offSender      = 6
	offGroup       = 8
	offIncarnation = 12
	offView        = 16
	offSeq         = 20
	offAckBase     = 24
	offAckCount    = 26
)

// Type is a frame's type.
type Type uint8

// Frame types. PBP (thesis ch. 3) and group life use 0x01–0x0F; the
// sequencer (Tanenbaum, Kaashoek & Bal) uses 0x10–0x1F. Values are never
// reused.
const (
	// Data carries one application message (or a bundle of them, FlagBundle)
	// with sequence number Seq: PBP's ORDINARY (thesis fig. 3.3).
	Data Type = 0x01
	// Ack is a plain acknowledgement (PBP's PLAIN_ACK); Seq is the last
	// sequence number the sender has sent, so that receivers see a lost
	// tail (thesis fig. 3.9).
	Ack Type = 0x02
	// Nack asks one sender, at its unicast MAC, for the listed ranges.
	Nack Type = 0x03
	// Join asks the registration server (member 0) for admission.
	Join Type = 0x04
	// Welcome is the server's answer to one Join.
	Welcome Type = 0x05
	// Start announces the complete member list; each member then sends
	// sequence number zero (thesis ch. 3, group registration).
	Start Type = 0x06
	// Leave is a clean departure; Seq is the next sequence number the
	// sender would have used, so receivers can detect a lost tail
	// (thesis: the shutdown message).
	Leave Type = 0x07
	// Heartbeat proves liveness while idle; it carries the ack vector.
	Heartbeat Type = 0x08

	// SeqRequest is a message for the sequencer to order: unicast to the
	// sequencer (method 1) or broadcast (method 2). Its unique id is
	// (Sender, Incarnation, Seq).
	SeqRequest Type = 0x10
	// SeqData is a message the sequencer has numbered and broadcast
	// (method 1, and retransmissions in both methods); Seq is the global
	// sequence number.
	SeqData Type = 0x11
	// SeqAccept assigns global sequence numbers to broadcast requests
	// (method 2); several accepts share one frame.
	SeqAccept Type = 0x12
	// SeqStatusRequest is the sequencer's request for status.
	SeqStatusRequest Type = 0x13
	// SeqStatusReply reports the highest global number a member delivered.
	SeqStatusReply Type = 0x14
	// SeqRetransmit asks the sequencer for missing global numbers.
	SeqRetransmit Type = 0x15
	// SeqElection runs sequencer election after a sequencer failure.
	SeqElection Type = 0x16
	// SeqMember is a change of the member list numbered in the global
	// stream like a message (Seq is its global number): the sequencer
	// removed a member, or took one back, and every member learns it at
	// the same place of the total order.
	SeqMember Type = 0x17

	// The view protocol (version 4, reliable/view): 0x20–0x2F.

	// ViewJoin asks a running group's coordinator for admission, or
	// announces a process to the others founding a group.
	ViewJoin Type = 0x20
	// ViewPrepare proposes the next view.
	ViewPrepare Type = 0x21
	// ViewFlush answers a ViewPrepare: the member froze its core of the
	// base view, and says how far it sent and delivered.
	ViewFlush Type = 0x22
	// ViewCommit installs the next view, once each member delivered up to
	// the cut it names in the base view.
	ViewCommit Type = 0x23
	// ViewRelay carries a frame of the base view to members that did not
	// deliver it.
	ViewRelay Type = 0x24
	// ViewRefuse refuses a joiner.
	ViewRefuse Type = 0x25
	// GroupRemove removes the group.
	GroupRemove Type = 0x26
	// ViewSuspect reports to the coordinator the members this member's
	// core removed (silent or stalled), so the view changes even when the
	// coordinator itself still hears them.
	ViewSuspect Type = 0x27
	// Datagram is a message of the Unreliable level: sent once to the
	// members of the sender's view, never acknowledged or repaired, and
	// delivered at most once, only by members of that view. Seq numbers
	// the sender's datagrams, for duplicate suppression.
	Datagram Type = 0x28
	// PCODE (Bruck, Dolev, Ho, Orni & Strong; reliable/pcode): 0x30–0x37.

	// PcodeData is a multicast to a target set (the paper's REGULAR
	// message); Seq is its PersonalCount.
	PcodeData Type = 0x30
	// PcodeNack asks for messages: a request's, or a gap's (§5.7).
	PcodeNack Type = 0x31
	// PcodeStatus is STATUS with PROGRESS (§4, §5.5); Seq is the last
	// PersonalCount sent.
	PcodeStatus Type = 0x32
	// PcodeAbort stops the program everywhere (one failure stops it).
	PcodeAbort Type = 0x33

	// Files (Liu & Russell's IBRMP; reliable/files): 0x40–0x4F.

	// FileOffer announces a file before its data (IBRMP's BOF).
	FileOffer Type = 0x40
	// FileData is one block of a file; Seq is its block number.
	FileData Type = 0x41
	// FileEnd ends a file's multicast pass and names the receivers still
	// awaited (IBRMP's EOF and its snapshot, §III.D).
	FileEnd Type = 0x42
	// FileStatus is a receiver's report on a transfer: BOF_REQUEST,
	// DATA_REQUEST, TRANSFER_DONE and the credit-bearing ACK in one.
	FileStatus Type = 0x43
	// FileGone tells a receiver the file is closed, aborted or unknown
	// (IBRMP's FILE_TIMEOUT, §III.E).
	FileGone Type = 0x44

	// Authentication (link/auth, docs/auth.md): 0x38–0x3B.

	// KeyMismatch tells a station whose frame did not authenticate that
	// the group uses another key, or a key at all, so that a joiner's
	// error names the cause instead of a timeout. It is itself not
	// authenticated: it is a diagnosis, never a reason to change state.
	KeyMismatch Type = 0x38
)

var typeNames = [...]string{
	Data: "Data", Ack: "Ack", Nack: "Nack", Join: "Join", Welcome: "Welcome",
	Start: "Start", Leave: "Leave", Heartbeat: "Heartbeat",
	SeqRequest: "SeqRequest", SeqData: "SeqData", SeqAccept: "SeqAccept",
	SeqStatusRequest: "SeqStatusRequest", SeqStatusReply: "SeqStatusReply",
	SeqRetransmit: "SeqRetransmit", SeqElection: "SeqElection", SeqMember: "SeqMember",
	ViewJoin: "ViewJoin", ViewPrepare: "ViewPrepare", ViewFlush: "ViewFlush", ViewCommit: "ViewCommit",
	ViewRelay: "ViewRelay", ViewRefuse: "ViewRefuse", GroupRemove: "GroupRemove", ViewSuspect: "ViewSuspect", Datagram: "Datagram",
	KeyMismatch: "KeyMismatch",
	PcodeData:   "PcodeData", PcodeNack: "PcodeNack", PcodeStatus: "PcodeStatus", PcodeAbort: "PcodeAbort",
	FileOffer: "FileOffer", FileData: "FileData", FileEnd: "FileEnd", FileStatus: "FileStatus", FileGone: "FileGone",
}

// Types lists every frame type, in wire order.
var Types = []Type{Data, Ack, Nack, Join, Welcome, Start, Leave, Heartbeat,
	SeqRequest, SeqData, SeqAccept, SeqStatusRequest, SeqStatusReply, SeqRetransmit, SeqElection, SeqMember,
	ViewJoin, ViewPrepare, ViewFlush, ViewCommit, ViewRelay, ViewRefuse, GroupRemove, ViewSuspect, Datagram,
	PcodeData, PcodeNack, PcodeStatus, PcodeAbort, KeyMismatch,
	FileOffer, FileData, FileEnd, FileStatus, FileGone}

// Valid reports whether t is a frame type this version defines.
func (t Type) Valid() bool {
	return int(t) < len(typeNames) && typeNames[t] != ""
}

func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(0x%02x)", uint8(t))
}

// Flags are a frame's flag bits. The low byte is critical: a receiver that
// finds a critical bit it does not know drops the frame (ErrFlags). The
// high byte is advisory: unknown bits there are ignored and preserved, so
// later additions that old receivers may skip need no new version.
type Flags uint16

const (
	// FlagAuth: an authentication section (algorithm, tag length, key id,
	// counter, tag) sits between the ack vector and the body; the tag is
	// a keyed MAC over the frame up to the CRC, the tag zeroed (link/auth).
	FlagAuth Flags = 1 << 0
	// FlagBundle: a Data or SeqData body holds several messages, each
	// prefixed by its 16-bit length.
	FlagBundle Flags = 1 << 1
	// FlagRetransmit: the frame is a retransmission.
	FlagRetransmit Flags = 1 << 8
	// FlagAckRequest: the sender asks for a prompt acknowledgement.
	FlagAckRequest Flags = 1 << 9
	// FlagHashAlg, on a FileStatus: the receiver reads the algorithm
	// byte of a FileOffer (FileHashAlg). A receiver from before it
	// drops such an offer and asks for it again without the flag, so a
	// sender of a file hashed with another algorithm than SHA-256 names
	// it too old at its first report instead of waiting on it.
	FlagHashAlg Flags = 1 << 10

	criticalMask  Flags = 0x00ff
	knownCritical       = FlagAuth | FlagBundle
)

// MemberID names a member of a group. NoMember marks an id not yet
// assigned (a Join before its Welcome).
type MemberID uint16

// NoMember is the sender id of a member that has no id yet.
const NoMember MemberID = 0xffff

// SeqLess reports whether sequence number a comes before b in serial-number
// arithmetic (RFC 1982): correct across wrap-around as long as the two are
// less than 2³¹ apart.
func SeqLess(a, b uint32) bool { return int32(a-b) < 0 }

// SeqDiff returns a-b as a signed distance in serial-number arithmetic.
func SeqDiff(a, b uint32) int32 { return int32(a - b) }

// MaxPayload is the largest body a frame can carry on a link of the given
// MTU with an ack vector of acks entries and an authentication tag of
// authTag bytes (0 for none). It is negative when nothing fits.
func MaxPayload(mtu, acks, authTag int) int {
	n := mtu - Overhead - acks*AckEntryLen
	if authTag > 0 {
		n -= AuthFixedLen + authTag
	}
	if n > 0xffff-Overhead {
		n = 0xffff - Overhead
	}
	return n
}
