package frame

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the fixed header and ack vector of a frame, as a value to
// encode. The frame type comes from the Body.
type Header struct {
	Flags       Flags // advisory bits; FlagAuth and FlagBundle are set by the encoder
	Group       uint32
	Sender      MemberID
	Incarnation uint32 // the sender's restart epoch; a new one means a new member
	// ViewID is the view the frame belongs to (reliable/view): each view
	// of a group runs a protocol core of its own, and its frames name it.
	// 0 for a group that never changes (static members) and for a
	// joiner's frames.
	ViewID uint32
	Seq    uint32
	// AckBase is the member id of Acks[0]: Acks[i] is the sender's
	// expected[AckBase+i], the next sequence number it expects from that
	// member (PBP's piggybacked exp_seqno vector, thesis fig. 3.3). A
	// sender may send a slice of its vector to bound the overhead in large
	// groups.
	AckBase MemberID
	Acks    []uint32
	// Auth, when set, adds an authentication section whose tag is computed
	// over the frame up to the tag.
	Auth Authenticator
}

// Authenticator computes authentication tags (a keyed MAC). The format
// only reserves the room: algorithm numbers are assigned by the code that
// implements them.
type Authenticator interface {
	Algorithm() uint8
	Size() int // tag length, 1..MaxAuthTag
	// AppendTag appends the tag over msg to dst.
	AppendTag(dst, msg []byte) []byte
}

// Body is the type-specific part of a frame.
type Body interface {
	FrameType() Type
	// Len is the number of bytes AppendBody appends.
	Len() int
	AppendBody(b []byte) []byte
	// flags returns the critical flags this body needs (FlagBundle).
	flags() Flags
}

// Len returns the length of the rbcast frame Append would produce.
func Len(h *Header, body Body) int {
	return PrefixLen(h) + body.Len() + CRCLen
}

// PrefixLen is the length of what Append writes before the body: the
// fixed header, the ack vector and the authentication section.
func PrefixLen(h *Header) int {
	n := HeaderLen + len(h.Acks)*AckEntryLen
	if h.Auth != nil {
		n += 2 + h.Auth.Size()
	}
	return n
}

// Append appends the rbcast frame for h and body to b (not including an
// Ethernet header; see AppendEthernet) and returns the extended slice.
// It allocates only if b lacks capacity.
func Append(b []byte, h *Header, body Body) ([]byte, error) {
	n := Len(h, body)
	if n > 0xffff {
		return b, errorf(ErrTooLarge, "frame of %d bytes exceeds the 65535-byte length field", n)
	}
	if len(h.Acks) > 0xffff || int(h.AckBase)+len(h.Acks) > 0x10000 {
		return b, errorf(ErrInvalid, "ack vector of %d entries from member %d", len(h.Acks), h.AckBase)
	}
	if h.Flags&criticalMask&^knownCritical != 0 {
		return b, errorf(ErrInvalid, "unknown critical flags %#04x", uint16(h.Flags&criticalMask&^knownCritical))
	}
	if p, ok := body.(*Placed); ok && (p.N < 0 || cap(b)-len(b) < n-CRCLen) {
		return b, errorf(ErrInvalid, "placed body of %d bytes needs %d bytes of room after the frame's start, the buffer has %d", p.N, n-CRCLen, cap(b)-len(b))
	}
	flags := h.Flags&^(FlagAuth|FlagBundle) | body.flags()
	if h.Auth != nil {
		if s := h.Auth.Size(); s < 1 || s > MaxAuthTag {
			return b, errorf(ErrInvalid, "auth tag of %d bytes (1..%d)", s, MaxAuthTag)
		}
		flags |= FlagAuth
	}
	start := len(b)
	b = append(b, Version, byte(body.FrameType()))
	b = binary.BigEndian.AppendUint16(b, uint16(flags))
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = binary.BigEndian.AppendUint16(b, uint16(h.Sender))
	b = binary.BigEndian.AppendUint32(b, h.Group)
	b = binary.BigEndian.AppendUint32(b, h.Incarnation)
	b = binary.BigEndian.AppendUint32(b, h.ViewID)
	b = binary.BigEndian.AppendUint32(b, h.Seq)
	b = binary.BigEndian.AppendUint16(b, uint16(h.AckBase))
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Acks)))
	for _, a := range h.Acks {
		b = binary.BigEndian.AppendUint32(b, a)
	}
	tagAt, tagLen := 0, 0
	if h.Auth != nil {
		tagLen = h.Auth.Size()
		b = append(b, h.Auth.Algorithm(), byte(tagLen))
		tagAt = len(b)
		for range tagLen {
			b = append(b, 0)
		}
	}
	b = body.AppendBody(b)
	if h.Auth != nil {
		// The tag covers the whole frame up to the CRC with the tag
		// itself zeroed (as IPsec AH treats its ICV field).
		var scratch [MaxAuthTag]byte
		tag := h.Auth.AppendTag(scratch[:0], b[start:])
		if len(tag) != tagLen {
			return b[:start], errorf(ErrInvalid, "authenticator wrote %d bytes, declared %d", len(tag), tagLen)
		}
		copy(b[tagAt:], tag)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	return b, nil
}

// View is a validated rbcast frame (without Ethernet header), decoded in
// place. Its accessors read the underlying bytes; it is valid as long as
// they are.
type View []byte

// Parse validates b as an rbcast frame of any group and returns a view of
// exactly its Length bytes (trailing Ethernet padding is dropped). It
// checks, in order: length, version, type, critical flags, the length
// field, the ack vector, the authentication section, the CRC32C, and the
// type's body layout.
func Parse(b []byte) (View, error) {
	if len(b) < Overhead {
		return nil, decodeErr(ErrShort, "header", 0, "%d bytes, need at least %d", len(b), Overhead)
	}
	if b[offVersion] != Version {
		return nil, decodeErr(ErrVersion, "version", offVersion, "version %d, this build speaks %d", b[offVersion], Version)
	}
	t := Type(b[offType])
	if !t.Valid() {
		return nil, decodeErr(ErrType, "type", offType, "type 0x%02x", uint8(t))
	}
	flags := Flags(binary.BigEndian.Uint16(b[offFlags:]))
	if unknown := flags & criticalMask &^ knownCritical; unknown != 0 {
		return nil, decodeErr(ErrFlags, "flags", offFlags, "critical flags %#04x", uint16(unknown))
	}
	n := int(binary.BigEndian.Uint16(b[offLength:]))
	if n < Overhead || n > len(b) {
		return nil, decodeErr(ErrLength, "length", offLength, "length field %d, frame has %d bytes", n, len(b))
	}
	b = b[:n]
	acks := int(binary.BigEndian.Uint16(b[offAckCount:]))
	bodyStart := HeaderLen + acks*AckEntryLen
	if bodyStart+CRCLen > n {
		return nil, decodeErr(ErrAckVector, "ack_count", offAckCount, "%d entries need %d bytes, frame has %d", acks, bodyStart+CRCLen, n)
	}
	if base := int(binary.BigEndian.Uint16(b[offAckBase:])); base+acks > 0x10000 {
		return nil, decodeErr(ErrAckVector, "ack_base", offAckBase, "members %d..%d exceed the id space", base, base+acks-1)
	}
	bodyEnd := n - CRCLen
	if flags&FlagAuth != 0 {
		if bodyStart+2 > bodyEnd {
			return nil, decodeErr(ErrAuth, "auth", bodyStart, "flag set but no room for the auth section")
		}
		l := int(b[bodyStart+1])
		if l < 1 || l > MaxAuthTag || bodyStart+2+l > bodyEnd {
			return nil, decodeErr(ErrAuth, "auth.length", bodyStart+1, "tag length %d, room for %d (max %d)", l, bodyEnd-bodyStart-2, MaxAuthTag)
		}
		bodyStart += 2 + l
	}
	sum := binary.BigEndian.Uint32(b[n-CRCLen:])
	if got := crc32.Checksum(b[:n-CRCLen], castagnoli); got != sum {
		return nil, decodeErr(ErrChecksum, "crc32c", n-CRCLen, "frame says %08x, bytes give %08x", sum, got)
	}
	if err := checkBody(t, flags, b, bodyStart, bodyEnd); err != nil {
		return nil, err
	}
	return View(b), nil
}

// ParseGroup is Parse followed by a check that the frame belongs to group.
func ParseGroup(b []byte, group uint32) (View, error) {
	v, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if g := v.Group(); g != group {
		return nil, decodeErr(ErrGroup, "group", offGroup, "group %d, this member is in group %d", g, group)
	}
	return v, nil
}

// Accessors of the fixed header.

func (v View) Version() uint8      { return v[offVersion] }
func (v View) Type() Type          { return Type(v[offType]) }
func (v View) Flags() Flags        { return Flags(binary.BigEndian.Uint16(v[offFlags:])) }
func (v View) Length() int         { return int(binary.BigEndian.Uint16(v[offLength:])) }
func (v View) Sender() MemberID    { return MemberID(binary.BigEndian.Uint16(v[offSender:])) }
func (v View) Group() uint32       { return binary.BigEndian.Uint32(v[offGroup:]) }
func (v View) Incarnation() uint32 { return binary.BigEndian.Uint32(v[offIncarnation:]) }
func (v View) ViewID() uint32      { return binary.BigEndian.Uint32(v[offView:]) }
func (v View) Seq() uint32         { return binary.BigEndian.Uint32(v[offSeq:]) }
func (v View) AckBase() MemberID   { return MemberID(binary.BigEndian.Uint16(v[offAckBase:])) }
func (v View) AckCount() int       { return int(binary.BigEndian.Uint16(v[offAckCount:])) }
func (v View) CRC() uint32         { return binary.BigEndian.Uint32(v[len(v)-CRCLen:]) }
func (v View) authStart() int      { return HeaderLen + v.AckCount()*AckEntryLen }
func (v View) bodyStart() int {
	if v.hasAuth() {
		return v.authStart() + 2 + int(v[v.authStart()+1])
	}
	return v.authStart()
}
func (v View) Ack(i int) uint32     { return binary.BigEndian.Uint32(v[HeaderLen+i*AckEntryLen:]) }
func (v View) hasAuth() bool        { return v.Flags()&FlagAuth != 0 }
func (v View) crcStart() int        { return len(v) - CRCLen }
func (v View) Retransmission() bool { return v.Flags()&FlagRetransmit != 0 }
func (v View) AckFor(m MemberID) (uint32, bool) {
	i := int(m) - int(v.AckBase())
	if i < 0 || i >= v.AckCount() {
		return 0, false
	}
	return v.Ack(i), true
}

// Body returns the type-specific bytes: between the ack vector (or the
// authentication section) and the CRC.
func (v View) Body() []byte { return v[v.bodyStart():v.crcStart()] }

// Auth returns the authentication algorithm and tag; ok is false when the
// frame has none. The tag covers the frame up to the CRC with the tag's own
// bytes zeroed: see AuthInput.
func (v View) Auth() (alg uint8, tag []byte, ok bool) {
	if !v.hasAuth() {
		return 0, nil, false
	}
	at := v.authStart()
	return v[at], v[at+2 : v.bodyStart()], true
}

// AuthInput appends to dst the bytes an authentication tag is computed
// over: the frame up to the CRC, with the tag zeroed.
func (v View) AuthInput(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, v[:v.crcStart()]...)
	if v.hasAuth() {
		clear(dst[start+v.authStart()+2 : start+v.bodyStart()])
	}
	return dst
}

// Header returns the fixed header and ack vector as a Header value. It
// allocates the ack slice; use the accessors on hot paths.
func (v View) Header() Header {
	h := Header{
		Flags:       v.Flags() &^ (FlagAuth | FlagBundle),
		Group:       v.Group(),
		Sender:      v.Sender(),
		Incarnation: v.Incarnation(),
		ViewID:      v.ViewID(),
		Seq:         v.Seq(),
		AckBase:     v.AckBase(),
	}
	if n := v.AckCount(); n > 0 {
		h.Acks = make([]uint32, n)
		for i := range h.Acks {
			h.Acks[i] = v.Ack(i)
		}
	}
	return h
}

func errorf(kind error, format string, args ...any) error {
	return &EncodeError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}
