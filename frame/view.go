package frame

// checkBody validates the type-specific layout of body b[start:end] so
// that the view accessors below never read out of bounds.
// An encrypted body (AuthEncrypted) is ciphertext: only its flags are
// checked here, the body once the verifier has decrypted it in place.
func checkBody(t Type, flags Flags, b []byte, start, end int, encrypted bool) error {
	body := b[start:end]
	need := func(field string, n int) error {
		if len(body) != n {
			return decodeErr(ErrBody, field, start, "%s body is %d bytes, must be %d", t, len(body), n)
		}
		return nil
	}
	atLeast := func(field string, n int) error {
		if len(body) < n {
			return decodeErr(ErrBody, field, start, "%s body is %d bytes, needs at least %d", t, len(body), n)
		}
		return nil
	}
	if flags&FlagBundle != 0 && t != Data && t != SeqRequest && t != SeqData {
		return decodeErr(ErrFlags, "flags", offFlags, "bundle flag on a %s frame", t)
	}
	if encrypted {
		return nil
	}
	switch t {
	case Data, SeqRequest:
		if flags&FlagBundle != 0 {
			return checkBundle(body, start)
		}
		return nil
	case Datagram:
		return nil // the message, of any length
	case Ack, Leave, Heartbeat:
		return need("body", 0)
	case Nack:
		if err := atLeast("nack", 2+listHeaderLen); err != nil {
			return err
		}
		return checkRanges(body[2:], start+2, "nack.ranges")
	case Join:
		return need("join", joinLen)
	case Welcome:
		if err := need("welcome", welcomeLen); err != nil {
			return err
		}
		if MemberID(be.Uint16(body[8:])) == NoMember {
			return decodeErr(ErrBody, "welcome.assigned", start+8, "assigned id 0x%04x is reserved for 'no member'", uint16(NoMember))
		}
		return nil
	case Start:
		if err := atLeast("start", listHeaderLen); err != nil {
			return err
		}
		n := int(be.Uint16(body))
		if n == 0 || len(body) != listHeaderLen+n*memberLen {
			return decodeErr(ErrBody, "start.members", start, "%d members need %d bytes, body has %d", n, listHeaderLen+n*memberLen, len(body))
		}
		return nil
	case SeqData:
		if err := atLeast("seqdata", seqDataLen); err != nil {
			return err
		}
		if flags&FlagBundle != 0 {
			return checkBundle(body[seqDataLen:], start+seqDataLen)
		}
		return nil
	case SeqAccept:
		if err := atLeast("accept", acceptHeadLen); err != nil {
			return err
		}
		n := int(be.Uint16(body[12:]))
		if n == 0 || len(body) != acceptHeadLen+n*acceptLen {
			return decodeErr(ErrBody, "accept.entries", start+12, "%d entries need %d bytes, body has %d", n, acceptHeadLen+n*acceptLen, len(body))
		}
		return nil
	case SeqStatusRequest:
		return need("status request", statusReqLen)
	case SeqStatusReply:
		return need("status", statusLen)
	case SeqRetransmit:
		if err := atLeast("retransmit", 4+listHeaderLen); err != nil {
			return err
		}
		return checkRanges(body[4:], start+4, "retransmit.ranges")
	case SeqElection:
		if err := need("election", electionLen); err != nil {
			return err
		}
		if p := ElectionPhase(body[4]); !p.valid() {
			return decodeErr(ErrBody, "election.phase", start+4, "phase %d (want 1..3)", p)
		}
		if body[5] != 0 {
			return decodeErr(ErrBody, "election.reserved", start+5, "reserved byte is %d, must be 0", body[5])
		}
		return nil
	case SeqMember:
		if err := need("member change", memberChLen); err != nil {
			return err
		}
		ch, r := MemberChange(body[12]), RemovalReason(body[13])
		if !ch.valid() {
			return decodeErr(ErrBody, "member.change", start+12, "change %d (want 1 removed or 2 readmitted)", ch)
		}
		if !r.valid() || ch == MemberReadmitted && r != ReasonNone || ch == MemberRemoved && r == ReasonNone {
			return decodeErr(ErrBody, "member.reason", start+13, "reason %d with change %v (want 1..3 with removed, 0 with readmitted)", r, ch)
		}
		if MemberID(be.Uint16(body[14:])) == NoMember {
			return decodeErr(ErrBody, "member.member", start+14, "member id 0x%04x is reserved for 'no member'", uint16(NoMember))
		}
		return nil
	case ViewJoin, ViewPrepare, ViewFlush, ViewCommit, ViewRelay, ViewRefuse, GroupRemove, ViewSuspect:
		return checkViewBody(t, body, start)
	case KeyMismatch:
		return checkKeyMismatch(body, start)
	case PcodeData, PcodeNack, PcodeStatus, PcodeAbort:
		return checkPcodeBody(t, body, start)
	case FileOffer, FileData, FileEnd, FileStatus, FileGone:
		return checkFileBody(t, body, start)
	}
	return decodeErr(ErrType, "type", offType, "type 0x%02x", uint8(t))
}

func checkRanges(b []byte, off int, field string) error {
	n := int(be.Uint16(b))
	if n == 0 || len(b) != listHeaderLen+n*rangeLen {
		return decodeErr(ErrBody, field, off, "%d ranges need %d bytes, body has %d", n, listHeaderLen+n*rangeLen, len(b))
	}
	for i := range n {
		r := readRange(b[listHeaderLen+i*rangeLen:])
		if SeqLess(r.Last, r.First) {
			return decodeErr(ErrBody, field, off+listHeaderLen+i*rangeLen, "range %d is %d..%d, last before first", i, r.First, r.Last)
		}
	}
	return nil
}

func readRange(b []byte) Range { return Range{First: be.Uint32(b), Last: be.Uint32(b[4:])} }

func checkBundle(b []byte, off int) error {
	if len(b) == 0 {
		return decodeErr(ErrBody, "bundle", off, "empty bundle")
	}
	for i := 0; i < len(b); {
		if i+2 > len(b) {
			return decodeErr(ErrBody, "bundle.length", off+i, "1 byte left where a 2-byte message length belongs")
		}
		n := int(be.Uint16(b[i:]))
		if i+2+n > len(b) {
			return decodeErr(ErrBody, "bundle.length", off+i, "message of %d bytes, %d left", n, len(b)-i-2)
		}
		i += 2 + n
	}
	return nil
}

// Messages iterates over the application messages of a Data, SeqRequest
// or SeqData frame: one, or each of a bundle. It allocates nothing.
type Messages struct {
	rest    []byte
	bundled bool
}

// Next returns the next message, or ok=false at the end.
func (m *Messages) Next() (msg []byte, ok bool) {
	if m.rest == nil {
		return nil, false
	}
	if !m.bundled {
		msg, m.rest = m.rest, nil
		return msg, true
	}
	if len(m.rest) < 2 {
		m.rest = nil
		return nil, false
	}
	n := int(be.Uint16(m.rest))
	msg = m.rest[2 : 2+n]
	m.rest = m.rest[2+n:]
	if len(m.rest) == 0 {
		m.rest = nil
	}
	return msg, true
}

// Messages returns an iterator over the frame's application messages.
// Frames of other types yield none.
func (v View) Messages() Messages {
	var b []byte
	switch v.Type() {
	case Data, SeqRequest, Datagram:
		b = v.Body()
	case SeqData:
		b = v.Body()[seqDataLen:]
	default:
		return Messages{}
	}
	if b == nil {
		b = []byte{}
	}
	return Messages{rest: b, bundled: v.Flags()&FlagBundle != 0}
}

// Payload returns the message bytes of a Data, SeqRequest or SeqData frame
// (in bundle form if FlagBundle is set).
func (v View) Payload() []byte {
	switch v.Type() {
	case SeqData:
		return v.Body()[seqDataLen:]
	case Data, SeqRequest, Datagram:
		return v.Body()
	}
	return nil
}

// RangeList is a view of a list of sequence ranges.
type RangeList []byte

func (r RangeList) Len() int           { return int(be.Uint16(r)) }
func (r RangeList) At(i int) Range     { return readRange(r[listHeaderLen+i*rangeLen:]) }
func (v View) nackBody() []byte        { return v.Body() }
func (v View) NackTarget() MemberID    { return MemberID(be.Uint16(v.nackBody())) }
func (v View) NackRanges() RangeList   { return RangeList(v.nackBody()[2:]) }
func (v View) RetransmitEpoch() uint32 { return be.Uint32(v.Body()) }
func (v View) RetransmitRanges() RangeList {
	return RangeList(v.Body()[4:])
}

// Join returns the body of a Join frame.
func (v View) Join() JoinBody {
	b := v.Body()
	return JoinBody{Requested: MemberID(be.Uint16(b)), Window: be.Uint16(b[2:]), MTU: be.Uint32(b[4:]), Nonce: be.Uint64(b[8:]), ConfigHash: be.Uint64(b[16:])}
}

// Welcome returns the body of a Welcome frame.
func (v View) Welcome() WelcomeBody {
	b := v.Body()
	return WelcomeBody{Nonce: be.Uint64(b), Assigned: MemberID(be.Uint16(b[8:])), Members: be.Uint16(b[10:]), ConfigHash: be.Uint64(b[12:])}
}

// MemberList is a view of a Start frame's member list.
type MemberList []byte

func (m MemberList) Len() int { return int(be.Uint16(m)) }
func (m MemberList) At(i int) MemberInfo {
	b := m[listHeaderLen+i*memberLen:]
	var mi MemberInfo
	mi.ID = MemberID(be.Uint16(b))
	copy(mi.MAC[:], b[2:8])
	mi.Incarnation = be.Uint32(b[8:])
	return mi
}

// Members returns the member list of a Start frame.
func (v View) Members() MemberList { return MemberList(v.Body()) }

// SeqDataEpoch and SeqDataUID read a SeqData frame's fixed body fields.
func (v View) SeqDataEpoch() uint32 { return be.Uint32(v.Body()) }
func (v View) SeqDataUID() UID      { return readUID(v.Body()[12:]) }

// SeqDataSafe, AcceptSafe and StatusSafe read the sequencer's safe cursor
// of a SeqData, SeqAccept or SeqStatusRequest frame.
func (v View) SeqDataSafe() uint32 { return be.Uint32(v.Body()[4:]) }
func (v View) AcceptSafe() uint32  { return be.Uint32(v.Body()[4:]) }
func (v View) StatusSafe() uint32  { return be.Uint32(v.Body()[8:]) }

// SeqDataHeld, AcceptHeld and StatusHeld read the sequencer's all-held
// cursor (version 3) of a SeqData, SeqAccept or SeqStatusRequest frame.
func (v View) SeqDataHeld() uint32 { return be.Uint32(v.Body()[8:]) }
func (v View) AcceptHeld() uint32  { return be.Uint32(v.Body()[8:]) }
func (v View) StatusHeld() uint32  { return be.Uint32(v.Body()[12:]) }

// AcceptList is a view of a SeqAccept frame's entries.
type AcceptList []byte

func (a AcceptList) Len() int { return int(be.Uint16(a)) }
func (a AcceptList) At(i int) AcceptEntry {
	b := a[listHeaderLen+i*acceptLen:]
	return AcceptEntry{Global: be.Uint32(b), UID: readUID(b[4:])}
}

func (v View) AcceptEpoch() uint32     { return be.Uint32(v.Body()) }
func (v View) Accepts() AcceptList     { return AcceptList(v.Body()[12:]) }
func (v View) StatusEpoch() uint32     { return be.Uint32(v.Body()) }
func (v View) StatusDelivered() uint32 { return be.Uint32(v.Body()[4:]) }

// Election returns the body of a SeqElection frame.
func (v View) Election() ElectionBody {
	b := v.Body()
	return ElectionBody{Epoch: be.Uint32(b), Phase: ElectionPhase(b[4]), Candidate: MemberID(be.Uint16(b[6:])), LastGlobal: be.Uint32(b[8:])}
}

// SeqMemberChange returns the body of a SeqMember frame.
func (v View) SeqMemberChange() SeqMemberBody {
	b := v.Body()
	return SeqMemberBody{Epoch: be.Uint32(b), Safe: be.Uint32(b[4:]), Held: be.Uint32(b[8:]),
		Change: MemberChange(b[12]), Reason: RemovalReason(b[13]), Member: MemberID(be.Uint16(b[14:])), Incarnation: be.Uint32(b[16:])}
}

// Decode returns the frame as a Header and a Body value that Append turns
// back into the same bytes (the authentication tag excepted: Header.Auth
// is left nil). It allocates; tools and tests use it, hot paths use the
// accessors.
func (v View) Decode() (Header, Body) {
	h := v.Header()
	t := v.Type()
	switch t {
	case Data, SeqRequest:
		if v.Flags()&FlagBundle != 0 {
			bu := &Bundle{T: t}
			for it := v.Messages(); ; {
				m, ok := it.Next()
				if !ok {
					break
				}
				bu.Msgs = append(bu.Msgs, append([]byte{}, m...))
			}
			return h, bu
		}
		return h, &Payload{T: t, Data: append([]byte{}, v.Body()...)}
	case Datagram:
		return h, &Payload{T: t, Data: append([]byte{}, v.Body()...)}
	case Ack, Leave, Heartbeat:
		return h, &Empty{T: t}
	case Nack:
		return h, &NackBody{Target: v.NackTarget(), Ranges: ranges(v.NackRanges())}
	case Join:
		j := v.Join()
		return h, &j
	case Welcome:
		w := v.Welcome()
		return h, &w
	case Start:
		ml := v.Members()
		s := &StartBody{Members: make([]MemberInfo, ml.Len())}
		for i := range s.Members {
			s.Members[i] = ml.At(i)
		}
		return h, s
	case SeqData:
		return h, &SeqDataBody{Epoch: v.SeqDataEpoch(), Safe: v.SeqDataSafe(), Held: v.SeqDataHeld(), UID: v.SeqDataUID(), Data: append([]byte{}, v.Payload()...), Bundled: v.Flags()&FlagBundle != 0}
	case SeqAccept:
		al := v.Accepts()
		s := &SeqAcceptBody{Epoch: v.AcceptEpoch(), Safe: v.AcceptSafe(), Held: v.AcceptHeld(), Entries: make([]AcceptEntry, al.Len())}
		for i := range s.Entries {
			s.Entries[i] = al.At(i)
		}
		return h, s
	case SeqStatusRequest, SeqStatusReply:
		s := &StatusBody{T: t, Epoch: v.StatusEpoch(), Delivered: v.StatusDelivered()}
		if t == SeqStatusRequest {
			s.Safe, s.Held = v.StatusSafe(), v.StatusHeld()
		}
		return h, s
	case SeqRetransmit:
		return h, &RetransmitBody{Epoch: v.RetransmitEpoch(), Ranges: ranges(v.RetransmitRanges())}
	case SeqElection:
		e := v.Election()
		return h, &e
	case SeqMember:
		m := v.SeqMemberChange()
		return h, &m
	case ViewJoin:
		j := v.ViewJoin()
		return h, &j
	case ViewPrepare:
		return h, &ViewPrepareBody{Next: v.ViewNext(), Base: v.ViewBase(), Members: members(v.ViewMembers())}
	case ViewFlush:
		dl := v.FlushDelivered()
		f := &ViewFlushBody{Next: v.ViewNext(), Base: v.ViewBase(), Coord: v.FlushCoord(), Sent: v.FlushSent(), Delivered: make([]Delivered, dl.Len())}
		for i := range f.Delivered {
			f.Delivered[i] = dl.At(i)
		}
		return h, f
	case ViewCommit:
		cl := v.CommitCuts()
		c := &ViewCommitBody{Next: v.ViewNext(), Base: v.ViewBase(), Members: members(v.ViewMembers()), Cuts: make([]Cut, cl.Len())}
		for i := range c.Cuts {
			c.Cuts[i] = cl.At(i)
		}
		c.BaseCount = v.CommitBaseCount()
		for i, m := range c.Members {
			if v.CommitFromBase(i) {
				c.FromBase = append(c.FromBase, m.ID)
			}
		}
		return h, c
	case ViewRelay:
		return h, &ViewRelayBody{Base: v.RelayBase(), Frame: append([]byte{}, v.RelayFrame()...)}
	case ViewRefuse:
		r := v.ViewRefuse()
		return h, &r
	case GroupRemove:
		return h, &GroupRemoveBody{View: v.RemovedView()}
	case ViewSuspect:
		return h, &ViewSuspectBody{Suspects: v.Suspects()}
	case KeyMismatch:
		k := v.KeyMismatch()
		return h, &k
	case PcodeData, PcodeNack, PcodeStatus, PcodeAbort:
		return h, v.decodePcode()
	case FileOffer, FileData, FileEnd, FileStatus, FileGone:
		return h, v.decodeFile()
	}
	return h, nil
}

func members(ml MemberList) []MemberInfo {
	ms := make([]MemberInfo, ml.Len())
	for i := range ms {
		ms[i] = ml.At(i)
	}
	return ms
}

func ranges(rl RangeList) []Range {
	rs := make([]Range, rl.Len())
	for i := range rs {
		rs[i] = rl.At(i)
	}
	return rs
}
