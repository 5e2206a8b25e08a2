package frame

import "encoding/binary"

var be = binary.BigEndian

// Range is an inclusive range of sequence numbers, First..Last in
// serial-number order.
type Range struct{ First, Last uint32 }

const rangeLen = 8

// Body sizes of the fixed-size bodies.
const (
	joinLen       = 24
	welcomeLen    = 20
	memberLen     = 12
	seqDataLen    = 22
	acceptHeadLen = 14 // epoch, safe, held, count
	acceptLen     = 14
	statusLen     = 8  // SeqStatusReply
	statusReqLen  = 16 // SeqStatusRequest: with safe and held
	electionLen   = 12
	memberChLen   = 20 // SeqMember
	listHeaderLen = 2
)

// Payload is the body of a Data, SeqRequest or Datagram frame carrying
// one message.
type Payload struct {
	T    Type // Data, SeqRequest or Datagram
	Data []byte
}

func (p *Payload) FrameType() Type            { return p.T }
func (p *Payload) Len() int                   { return len(p.Data) }
func (p *Payload) AppendBody(b []byte) []byte { return append(b, p.Data...) }
func (p *Payload) flags() Flags               { return 0 }

// Bundle is the body of a Data or SeqRequest frame carrying several
// messages, each prefixed by its 16-bit length.
type Bundle struct {
	T    Type // Data or SeqRequest
	Msgs [][]byte
}

func (p *Bundle) FrameType() Type { return p.T }
func (p *Bundle) Len() int {
	n := 0
	for _, m := range p.Msgs {
		n += 2 + len(m)
	}
	return n
}
func (p *Bundle) AppendBody(b []byte) []byte {
	for _, m := range p.Msgs {
		b = be.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}
func (p *Bundle) flags() Flags { return FlagBundle }

// Encoded is the body of a Data or SeqRequest frame given as its bytes:
// one message, or with Bundled the length-prefixed messages of a bundle
// (what Bundle appends).
type Encoded struct {
	T       Type // Data or SeqRequest
	Data    []byte
	Bundled bool
}

func (p *Encoded) FrameType() Type            { return p.T }
func (p *Encoded) Len() int                   { return len(p.Data) }
func (p *Encoded) AppendBody(b []byte) []byte { return append(b, p.Data...) }
func (p *Encoded) flags() Flags {
	if p.Bundled {
		return FlagBundle
	}
	return 0
}

// Placed is an Encoded body that lies in place already: its N bytes are in
// the encoding buffer's backing array right where Append puts the body,
// PrefixLen(h) bytes after the frame's start. AppendBody copies nothing;
// it extends the slice over them. A sender that keeps its frames in that
// layout writes each message once, where it is kept, and only the header
// and the CRC each time it sends the frame (reliable/pbp's history).
// Append refuses a Placed body whose buffer lacks the capacity.
type Placed struct {
	T       Type // Data or SeqRequest (or FileData: file id and block in place)
	N       int
	Bundled bool
}

func (p *Placed) FrameType() Type            { return p.T }
func (p *Placed) Len() int                   { return p.N }
func (p *Placed) AppendBody(b []byte) []byte { return b[:len(b)+p.N] }
func (p *Placed) flags() Flags {
	if p.Bundled {
		return FlagBundle
	}
	return 0
}

// Empty is the body of Ack, Leave and Heartbeat frames: everything they
// say is in the header.
type Empty struct{ T Type }

func (e *Empty) FrameType() Type            { return e.T }
func (e *Empty) Len() int                   { return 0 }
func (e *Empty) AppendBody(b []byte) []byte { return b }
func (e *Empty) flags() Flags               { return 0 }

// NackBody asks Target to retransmit the listed ranges.
type NackBody struct {
	Target MemberID
	Ranges []Range
}

func (n *NackBody) FrameType() Type { return Nack }
func (n *NackBody) Len() int        { return 2 + listHeaderLen + len(n.Ranges)*rangeLen }
func (n *NackBody) AppendBody(b []byte) []byte {
	b = be.AppendUint16(b, uint16(n.Target))
	return appendRanges(b, n.Ranges)
}
func (n *NackBody) flags() Flags { return 0 }

func appendRanges(b []byte, rs []Range) []byte {
	b = be.AppendUint16(b, uint16(len(rs)))
	for _, r := range rs {
		b = be.AppendUint32(b, r.First)
		b = be.AppendUint32(b, r.Last)
	}
	return b
}

// JoinBody asks the registration server for admission.
type JoinBody struct {
	Requested  MemberID // NoMember: let the server assign one
	Window     uint16   // the joiner's send window
	MTU        uint32   // the joiner's link MTU
	Nonce      uint64   // matches the Welcome to this Join
	ConfigHash uint64   // hash of the group configuration; must match the server's
}

func (j *JoinBody) FrameType() Type { return Join }
func (j *JoinBody) Len() int        { return joinLen }
func (j *JoinBody) AppendBody(b []byte) []byte {
	b = be.AppendUint16(b, uint16(j.Requested))
	b = be.AppendUint16(b, j.Window)
	b = be.AppendUint32(b, j.MTU)
	b = be.AppendUint64(b, j.Nonce)
	return be.AppendUint64(b, j.ConfigHash)
}
func (j *JoinBody) flags() Flags { return 0 }

// WelcomeBody admits one joiner.
type WelcomeBody struct {
	Nonce      uint64   // the Join's nonce
	Assigned   MemberID // the joiner's member id
	Members    uint16   // the group's size
	ConfigHash uint64   // the server's configuration hash
}

func (w *WelcomeBody) FrameType() Type { return Welcome }
func (w *WelcomeBody) Len() int        { return welcomeLen }
func (w *WelcomeBody) AppendBody(b []byte) []byte {
	b = be.AppendUint64(b, w.Nonce)
	b = be.AppendUint16(b, uint16(w.Assigned))
	b = be.AppendUint16(b, w.Members)
	return be.AppendUint64(b, w.ConfigHash)
}
func (w *WelcomeBody) flags() Flags { return 0 }

// MemberInfo is one entry of a Start frame's member list.
type MemberInfo struct {
	ID          MemberID
	MAC         [6]byte
	Incarnation uint32
}

// StartBody lists every member of the group.
type StartBody struct{ Members []MemberInfo }

func (s *StartBody) FrameType() Type { return Start }
func (s *StartBody) Len() int        { return listHeaderLen + len(s.Members)*memberLen }
func (s *StartBody) AppendBody(b []byte) []byte {
	b = be.AppendUint16(b, uint16(len(s.Members)))
	for _, m := range s.Members {
		b = be.AppendUint16(b, uint16(m.ID))
		b = append(b, m.MAC[:]...)
		b = be.AppendUint32(b, m.Incarnation)
	}
	return b
}
func (s *StartBody) flags() Flags { return 0 }

// UID is the unique id of a message submitted to the sequencer.
type UID struct {
	Origin      MemberID
	Incarnation uint32
	Seq         uint32
}

func appendUID(b []byte, u UID) []byte {
	b = be.AppendUint16(b, uint16(u.Origin))
	b = be.AppendUint32(b, u.Incarnation)
	return be.AppendUint32(b, u.Seq)
}

func readUID(b []byte) UID {
	return UID{Origin: MemberID(be.Uint16(b)), Incarnation: be.Uint32(b[2:]), Seq: be.Uint32(b[6:])}
}

// SeqDataBody is a message numbered by the sequencer; the header's Seq is
// its global number and the header's Sender is the sequencer.
type SeqDataBody struct {
	Epoch uint32 // the sequencer's term; bumped at each election
	// Safe is the sequencer's safe cursor: every global number below it
	// is held by enough members (see reliable/seq) to be delivered.
	Safe uint32
	// Held (version 3) is the sequencer's all-held cursor: every global
	// number below it is held by every live member.
	Held uint32
	UID  UID    // the originating request
	Data []byte // one message, or a bundle with Bundled set
	// Bundled says Data is already in bundle form (length-prefixed
	// messages), as when forwarding a bundled SeqRequest.
	Bundled bool
}

func (s *SeqDataBody) FrameType() Type { return SeqData }
func (s *SeqDataBody) Len() int        { return seqDataLen + len(s.Data) }
func (s *SeqDataBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.Epoch)
	b = be.AppendUint32(b, s.Safe)
	b = be.AppendUint32(b, s.Held)
	b = appendUID(b, s.UID)
	return append(b, s.Data...)
}
func (s *SeqDataBody) flags() Flags {
	if s.Bundled {
		return FlagBundle
	}
	return 0
}

// AcceptEntry assigns global number Global to the request UID.
type AcceptEntry struct {
	Global uint32
	UID    UID
}

// SeqAcceptBody carries one or more Accepts (method 2).
type SeqAcceptBody struct {
	Epoch   uint32
	Safe    uint32 // the sequencer's safe cursor, as in SeqDataBody
	Held    uint32 // the sequencer's all-held cursor, as in SeqDataBody
	Entries []AcceptEntry
}

func (s *SeqAcceptBody) FrameType() Type { return SeqAccept }
func (s *SeqAcceptBody) Len() int        { return acceptHeadLen + len(s.Entries)*acceptLen }
func (s *SeqAcceptBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.Epoch)
	b = be.AppendUint32(b, s.Safe)
	b = be.AppendUint32(b, s.Held)
	b = be.AppendUint16(b, uint16(len(s.Entries)))
	for _, e := range s.Entries {
		b = be.AppendUint32(b, e.Global)
		b = appendUID(b, e.UID)
	}
	return b
}
func (s *SeqAcceptBody) flags() Flags { return 0 }

// StatusBody is the body of SeqStatusRequest (Delivered: the highest
// global number sequenced; Safe and Held: the sequencer's safe and
// all-held cursors) and SeqStatusReply (Delivered: the highest global
// number the member has delivered in order, as reliable/seq sends it; the
// received cursor travels in the ack vector; Safe and Held are not sent).
type StatusBody struct {
	T         Type // SeqStatusRequest or SeqStatusReply
	Epoch     uint32
	Delivered uint32
	Safe      uint32
	Held      uint32
}

func (s *StatusBody) FrameType() Type { return s.T }
func (s *StatusBody) Len() int {
	if s.T == SeqStatusRequest {
		return statusReqLen
	}
	return statusLen
}
func (s *StatusBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.Epoch)
	b = be.AppendUint32(b, s.Delivered)
	if s.T == SeqStatusRequest {
		b = be.AppendUint32(b, s.Safe)
		b = be.AppendUint32(b, s.Held)
	}
	return b
}
func (s *StatusBody) flags() Flags { return 0 }

// RetransmitBody asks the sequencer for missing global numbers.
type RetransmitBody struct {
	Epoch  uint32
	Ranges []Range
}

func (r *RetransmitBody) FrameType() Type { return SeqRetransmit }
func (r *RetransmitBody) Len() int        { return 4 + listHeaderLen + len(r.Ranges)*rangeLen }
func (r *RetransmitBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, r.Epoch)
	return appendRanges(b, r.Ranges)
}
func (r *RetransmitBody) flags() Flags { return 0 }

// ElectionPhase is the step of a sequencer election.
type ElectionPhase uint8

const (
	// ElectionCall starts an election for Epoch, proposing Candidate.
	ElectionCall ElectionPhase = 1
	// ElectionVote reports the voter's LastGlobal to Candidate.
	ElectionVote ElectionPhase = 2
	// ElectionElected announces Candidate as sequencer of Epoch, with the
	// agreed last sequenced number LastGlobal.
	ElectionElected ElectionPhase = 3
)

func (p ElectionPhase) valid() bool { return p >= ElectionCall && p <= ElectionElected }

func (p ElectionPhase) String() string {
	switch p {
	case ElectionCall:
		return "call"
	case ElectionVote:
		return "vote"
	case ElectionElected:
		return "elected"
	}
	return "phase(" + itoa(int(p)) + ")"
}

// ElectionBody is one step of a sequencer election.
type ElectionBody struct {
	Epoch      uint32
	Phase      ElectionPhase
	Candidate  MemberID
	LastGlobal uint32
}

func (e *ElectionBody) FrameType() Type { return SeqElection }
func (e *ElectionBody) Len() int        { return electionLen }
func (e *ElectionBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, e.Epoch)
	b = append(b, byte(e.Phase), 0)
	b = be.AppendUint16(b, uint16(e.Candidate))
	return be.AppendUint32(b, e.LastGlobal)
}
func (e *ElectionBody) flags() Flags { return 0 }

// MemberChange is what a SeqMember entry says happened to a member.
type MemberChange uint8

const (
	// MemberRemoved: the sequencer removed the member (Reason says why).
	MemberRemoved MemberChange = 1
	// MemberReadmitted: a member removed before was heard again while
	// everything it lacked was still in the history; it is a member again.
	MemberReadmitted MemberChange = 2
)

func (c MemberChange) valid() bool { return c == MemberRemoved || c == MemberReadmitted }

func (c MemberChange) String() string {
	switch c {
	case MemberRemoved:
		return "removed"
	case MemberReadmitted:
		return "readmitted"
	}
	return "change(" + itoa(int(c)) + ")"
}

// RemovalReason says why the sequencer removed a member (SeqMember with
// MemberRemoved); 0 with MemberReadmitted.
type RemovalReason uint8

const (
	ReasonNone RemovalReason = 0
	// ReasonSilent: silent past the failure timeout.
	ReasonSilent RemovalReason = 1
	// ReasonNoVote: it did not vote in the election of the entry's epoch.
	ReasonNoVote RemovalReason = 2
	// ReasonReplaced: it was the sequencer before the entry's epoch, and
	// the election replaced it.
	ReasonReplaced RemovalReason = 3
)

func (r RemovalReason) valid() bool { return r <= ReasonReplaced }

func (r RemovalReason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonSilent:
		return "silent past the failure timeout"
	case ReasonNoVote:
		return "did not vote in the election"
	case ReasonReplaced:
		return "the sequencer before, replaced"
	}
	return "reason(" + itoa(int(r)) + ")"
}

// SeqMemberBody is a change of the member list in the global stream; the
// header's Seq is its global number and the header's Sender the sequencer
// that numbered it.
type SeqMemberBody struct {
	Epoch  uint32 // the epoch of the sequencer that numbered it
	Safe   uint32 // the sequencer's safe cursor, as in SeqDataBody
	Held   uint32 // the sequencer's all-held cursor, as in SeqDataBody
	Change MemberChange
	Reason RemovalReason
	Member MemberID // the member removed or taken back
	// Incarnation is Member's: a change names one incarnation.
	Incarnation uint32
}

func (s *SeqMemberBody) FrameType() Type { return SeqMember }
func (s *SeqMemberBody) Len() int        { return memberChLen }
func (s *SeqMemberBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.Epoch)
	b = be.AppendUint32(b, s.Safe)
	b = be.AppendUint32(b, s.Held)
	b = append(b, byte(s.Change), byte(s.Reason))
	b = be.AppendUint16(b, uint16(s.Member))
	return be.AppendUint32(b, s.Incarnation)
}
func (s *SeqMemberBody) flags() Flags { return 0 }

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
