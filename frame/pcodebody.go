package frame

// PCODE's frames (Bruck, Dolev, Ho, Orni & Strong; reliable/pcode), types
// 0x30–0x37. Every PCODE frame carries the sender's personal counter
// vector in the ack vector: ack[j] is the highest consecutive personal
// count the sender has seen from member AckBase+j (the paper's pcv,
// fig. 3), which is also the STATUS of P1 (§4).

// Body sizes of PCODE's fixed parts.
const (
	pcodeDataHead = 16 // step, global, stream, reserved, targets length
	pcodeNackLen  = 16
	pcodeStatHead = 12 // global, echo, p2p base, p2p count
	pcodeAbortHd  = 14 // reason, reserved, member, step, text length
	// MaxPcodeTargets bounds a target bitmap: member ids below
	// 8 × MaxPcodeTargets bytes.
	MaxPcodeTargets = 8192
)

// PcodeStream says which of a sender's two counters numbers a PCODE
// Data frame: its broadcast stream, seen (and counted) by every member,
// or its point-to-point stream to one target (§5.6).
type PcodeStream uint8

const (
	// StreamBroadcast: the frame goes to the group; Seq is the sender's
	// PersonalCount.
	StreamBroadcast PcodeStream = 0
	// StreamPoint: the frame goes to its one target's MAC; Seq counts
	// the sender's point-to-point messages to that target.
	StreamPoint PcodeStream = 1
)

func (s PcodeStream) String() string {
	switch s {
	case StreamBroadcast:
		return "broadcast"
	case StreamPoint:
		return "point-to-point"
	}
	return "stream(" + itoa(int(s)) + ")"
}

// Targets is a target set as a bitmap: bit id%8 of byte id/8 is member
// id. It aliases the frame (or the caller's bytes).
type Targets []byte

// Has reports whether member id is in the set.
func (t Targets) Has(id MemberID) bool {
	i := int(id) / 8
	return i < len(t) && t[i]&(1<<(id%8)) != 0
}

// Count is the number of members in the set.
func (t Targets) Count() int {
	n := 0
	for _, b := range t {
		for ; b != 0; b &= b - 1 {
			n++
		}
	}
	return n
}

// Equal reports whether t and u name the same members (trailing zero
// bytes do not count).
func (t Targets) Equal(u Targets) bool {
	for i := range max(len(t), len(u)) {
		var a, b byte
		if i < len(t) {
			a = t[i]
		}
		if i < len(u) {
			b = u[i]
		}
		if a != b {
			return false
		}
	}
	return true
}

// AppendTargets appends the bitmap of ids to b (as long as the largest id
// needs).
func AppendTargets(b Targets, ids ...MemberID) Targets {
	n := 0
	for _, id := range ids {
		n = max(n, int(id)/8+1)
	}
	start := len(b)
	for range n {
		b = append(b, 0)
	}
	for _, id := range ids {
		b[start+int(id)/8] |= 1 << (id % 8)
	}
	return b
}

// PcodeDataBody is a multicast's message (the paper's REGULAR message,
// fig. 4). The header's Seq is its PersonalCount in Stream.
type PcodeDataBody struct {
	// Step is the program step (the paper's i) of the multicast at its
	// sender: a request matches it only at the same step (A1).
	Step uint64
	// Global is the sender's GlobalCounter (§5.1), original for a
	// broadcast-stream message.
	Global  uint32
	Stream  PcodeStream
	Targets Targets
	Data    []byte
}

func (p *PcodeDataBody) FrameType() Type { return PcodeData }
func (p *PcodeDataBody) Len() int        { return pcodeDataHead + len(p.Targets) + len(p.Data) }
func (p *PcodeDataBody) AppendBody(b []byte) []byte {
	b = be.AppendUint64(b, p.Step)
	b = be.AppendUint32(b, p.Global)
	b = append(b, byte(p.Stream), 0)
	b = be.AppendUint16(b, uint16(len(p.Targets)))
	b = append(b, p.Targets...)
	return append(b, p.Data...)
}
func (p *PcodeDataBody) flags() Flags { return 0 }

// NackKind is why a PCODE Nack was sent (§5.7): the three kinds.
type NackKind uint8

const (
	// NackRequest: a request found no ready message (fig. 5).
	NackRequest NackKind = 1
	// NackPersonal: a gap in the sender's PersonalCount (§5.3).
	NackPersonal NackKind = 2
	// NackGlobal: a gap in the GlobalCounter, sender unknown: broadcast,
	// and every sender resends what the nacker's pcv lacks (§5.3).
	NackGlobal NackKind = 3
)

func (k NackKind) valid() bool { return k >= NackRequest && k <= NackGlobal }

func (k NackKind) String() string {
	switch k {
	case NackRequest:
		return "request"
	case NackPersonal:
		return "personal"
	case NackGlobal:
		return "global"
	}
	return "kind(" + itoa(int(k)) + ")"
}

// PcodeNackBody asks Target to resend what follows Last in Stream
// (fig. 5's LastRcvd); with NackGlobal, Target is NoMember and every
// member resends what follows the nacker's ack[self].
type PcodeNackBody struct {
	Kind   NackKind
	Stream PcodeStream
	Target MemberID
	Last   uint32
	// Step is the request's program step (NackRequest), else 0.
	Step uint64
}

func (n *PcodeNackBody) FrameType() Type { return PcodeNack }
func (n *PcodeNackBody) Len() int        { return pcodeNackLen }
func (n *PcodeNackBody) AppendBody(b []byte) []byte {
	b = append(b, byte(n.Kind), byte(n.Stream))
	b = be.AppendUint16(b, uint16(n.Target))
	b = be.AppendUint32(b, n.Last)
	return be.AppendUint64(b, n.Step)
}
func (n *PcodeNackBody) flags() Flags { return 0 }

// PcodeStatusBody is P1's STATUS augmented with PROGRESS (§4, §5.2,
// §5.5). The header's Seq is the last PersonalCount the sender sent, so
// that a lost tail shows; its ack vector is its pcv. With FlagAckRequest
// it asks every member for a Status at once.
type PcodeStatusBody struct {
	Global uint32 // the sender's GlobalCounter (PROGRESS; not original)
	// Echo is a probe's token: set by a Status with FlagAckRequest, and
	// echoed by the answers, so the prober measures the round trip.
	Echo uint32
	// PointBase and Point: Point[i] is the last consecutive count the
	// sender received on member PointBase+i's point-to-point stream to
	// it.
	PointBase MemberID
	Point     []uint32
}

func (s *PcodeStatusBody) FrameType() Type { return PcodeStatus }
func (s *PcodeStatusBody) Len() int        { return pcodeStatHead + 4*len(s.Point) }
func (s *PcodeStatusBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.Global)
	b = be.AppendUint32(b, s.Echo)
	b = be.AppendUint16(b, uint16(s.PointBase))
	b = be.AppendUint16(b, uint16(len(s.Point)))
	for _, p := range s.Point {
		b = be.AppendUint32(b, p)
	}
	return b
}
func (s *PcodeStatusBody) flags() Flags { return 0 }

// AbortReason says why a PCODE member stopped the program.
type AbortReason uint8

const (
	// AbortSilent: Member was silent past the failure timeout while
	// needed (the fault model: one failure stops the program).
	AbortSilent AbortReason = 1
	// AbortMismatch: a request at Step matched a message that violates
	// A1 (another step or target set).
	AbortMismatch AbortReason = 2
	// AbortApplication: the program itself stopped.
	AbortApplication AbortReason = 3
)

func (r AbortReason) valid() bool { return r >= AbortSilent && r <= AbortApplication }

func (r AbortReason) String() string {
	switch r {
	case AbortSilent:
		return "member silent"
	case AbortMismatch:
		return "calls do not match (A1)"
	case AbortApplication:
		return "program stopped"
	}
	return "reason(" + itoa(int(r)) + ")"
}

// PcodeAbortBody stops the program at every member.
type PcodeAbortBody struct {
	Reason AbortReason
	Member MemberID // whom it is about (the silent member, the mismatched sender)
	Step   uint64   // the step at which the sender stopped
	Text   []byte   // the error, for humans
}

func (a *PcodeAbortBody) FrameType() Type { return PcodeAbort }
func (a *PcodeAbortBody) Len() int        { return pcodeAbortHd + len(a.Text) }
func (a *PcodeAbortBody) AppendBody(b []byte) []byte {
	b = append(b, byte(a.Reason), 0)
	b = be.AppendUint16(b, uint16(a.Member))
	b = be.AppendUint64(b, a.Step)
	b = be.AppendUint16(b, uint16(len(a.Text)))
	return append(b, a.Text...)
}
func (a *PcodeAbortBody) flags() Flags { return 0 }

// checkPcodeBody validates the bodies of types 0x30–0x37.
func checkPcodeBody(t Type, body []byte, start int) error {
	switch t {
	case PcodeData:
		if len(body) < pcodeDataHead {
			return decodeErr(ErrBody, "pcode.data", start, "%s body is %d bytes, needs at least %d", t, len(body), pcodeDataHead)
		}
		st := PcodeStream(body[12])
		if st > StreamPoint {
			return decodeErr(ErrBody, "pcode.data.stream", start+12, "stream %d (want 0 broadcast or 1 point-to-point)", st)
		}
		if body[13] != 0 {
			return decodeErr(ErrBody, "pcode.data.reserved", start+13, "reserved byte is %d, must be 0", body[13])
		}
		n := int(be.Uint16(body[14:]))
		if n == 0 || n > MaxPcodeTargets || pcodeDataHead+n > len(body) {
			return decodeErr(ErrBody, "pcode.data.targets", start+14, "target bitmap of %d bytes (want 1..%d, %d left)", n, MaxPcodeTargets, len(body)-pcodeDataHead)
		}
		c := Targets(body[pcodeDataHead : pcodeDataHead+n]).Count()
		if c == 0 || st == StreamPoint && c != 1 {
			return decodeErr(ErrBody, "pcode.data.targets", start+pcodeDataHead, "%d targets on the %v stream (want %s)", c, st, map[bool]string{true: "exactly 1", false: "at least 1"}[st == StreamPoint])
		}
		return nil
	case PcodeNack:
		if len(body) != pcodeNackLen {
			return decodeErr(ErrBody, "pcode.nack", start, "%s body is %d bytes, must be %d", t, len(body), pcodeNackLen)
		}
		k, st, target := NackKind(body[0]), PcodeStream(body[1]), MemberID(be.Uint16(body[2:]))
		switch {
		case !k.valid():
			return decodeErr(ErrBody, "pcode.nack.kind", start, "kind %d (want 1 request, 2 personal, 3 global)", k)
		case st > StreamPoint:
			return decodeErr(ErrBody, "pcode.nack.stream", start+1, "stream %d (want 0 or 1)", st)
		case k == NackGlobal && (target != NoMember || st != StreamBroadcast):
			return decodeErr(ErrBody, "pcode.nack.target", start+2, "a global nack names target %d on the %v stream (want 0x%04x, broadcast)", target, st, uint16(NoMember))
		case k != NackGlobal && target == NoMember:
			return decodeErr(ErrBody, "pcode.nack.target", start+2, "a %v nack names no target", k)
		}
		return nil
	case PcodeStatus:
		if len(body) < pcodeStatHead {
			return decodeErr(ErrBody, "pcode.status", start, "%s body is %d bytes, needs at least %d", t, len(body), pcodeStatHead)
		}
		n := int(be.Uint16(body[10:]))
		if len(body) != pcodeStatHead+4*n {
			return decodeErr(ErrBody, "pcode.status.point", start+10, "%d entries need %d bytes, body has %d", n, pcodeStatHead+4*n, len(body))
		}
		if int(be.Uint16(body[8:]))+n > 0x10000 {
			return decodeErr(ErrBody, "pcode.status.point", start+8, "entries from member %d run past member id 0xffff", be.Uint16(body[8:]))
		}
		return nil
	case PcodeAbort:
		if len(body) < pcodeAbortHd {
			return decodeErr(ErrBody, "pcode.abort", start, "%s body is %d bytes, needs at least %d", t, len(body), pcodeAbortHd)
		}
		if r := AbortReason(body[0]); !r.valid() {
			return decodeErr(ErrBody, "pcode.abort.reason", start, "reason %d (want 1..3)", r)
		}
		if body[1] != 0 {
			return decodeErr(ErrBody, "pcode.abort.reserved", start+1, "reserved byte is %d, must be 0", body[1])
		}
		if n := int(be.Uint16(body[12:])); len(body) != pcodeAbortHd+n {
			return decodeErr(ErrBody, "pcode.abort.text", start+12, "text of %d bytes, body has %d after the fixed part", n, len(body)-pcodeAbortHd)
		}
		return nil
	}
	return decodeErr(ErrType, "type", offType, "type 0x%02x", uint8(t))
}

// PcodeData returns the body of a PcodeData frame; Targets and Data alias
// the frame.
func (v View) PcodeData() PcodeDataBody {
	b := v.Body()
	n := int(be.Uint16(b[14:]))
	return PcodeDataBody{Step: be.Uint64(b), Global: be.Uint32(b[8:]), Stream: PcodeStream(b[12]),
		Targets: Targets(b[pcodeDataHead : pcodeDataHead+n]), Data: b[pcodeDataHead+n:]}
}

// PcodeNack returns the body of a PcodeNack frame.
func (v View) PcodeNack() PcodeNackBody {
	b := v.Body()
	return PcodeNackBody{Kind: NackKind(b[0]), Stream: PcodeStream(b[1]), Target: MemberID(be.Uint16(b[2:])),
		Last: be.Uint32(b[4:]), Step: be.Uint64(b[8:])}
}

// PointList is a view of a PcodeStatus frame's point-to-point counters.
type PointList []byte

func (p PointList) Base() MemberID       { return MemberID(be.Uint16(p)) }
func (p PointList) Len() int             { return int(be.Uint16(p[2:])) }
func (p PointList) At(i int) uint32      { return be.Uint32(p[4+4*i:]) }
func (v View) PcodeStatusGlobal() uint32 { return be.Uint32(v.Body()) }
func (v View) PcodeStatusEcho() uint32   { return be.Uint32(v.Body()[4:]) }
func (v View) PcodeStatusPoint() PointList {
	return PointList(v.Body()[8:])
}

// PcodeAbort returns the body of a PcodeAbort frame; Text aliases it.
func (v View) PcodeAbort() PcodeAbortBody {
	b := v.Body()
	return PcodeAbortBody{Reason: AbortReason(b[0]), Member: MemberID(be.Uint16(b[2:])), Step: be.Uint64(b[4:]), Text: b[pcodeAbortHd:]}
}

// decodePcode is Decode for types 0x30–0x37.
func (v View) decodePcode() Body {
	switch v.Type() {
	case PcodeData:
		d := v.PcodeData()
		d.Targets = append(Targets{}, d.Targets...)
		d.Data = append([]byte{}, d.Data...)
		return &d
	case PcodeNack:
		n := v.PcodeNack()
		return &n
	case PcodeStatus:
		pl := v.PcodeStatusPoint()
		s := &PcodeStatusBody{Global: v.PcodeStatusGlobal(), Echo: v.PcodeStatusEcho(), PointBase: pl.Base(), Point: make([]uint32, pl.Len())}
		for i := range s.Point {
			s.Point[i] = pl.At(i)
		}
		return s
	case PcodeAbort:
		a := v.PcodeAbort()
		a.Text = append([]byte{}, a.Text...)
		return &a
	}
	return nil
}
