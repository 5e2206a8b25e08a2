package frame

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
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
	// SkipCRC leaves the frame's CRC32C zero: for a frame sent on a link
	// that computes every frame's CRC itself over the bytes it sends and
	// never reads the encoder's (link.CRCSealer: an encrypting link/auth).
	// Nothing else may be given such a frame; it is not valid on the wire.
	SkipCRC bool
}

// Authenticator computes authentication tags (a keyed MAC) for the
// encoder. Algorithm numbers are assigned by the code that implements them
// (link/auth); the authenticated link inserts its sections with InsertAuth
// instead, into frames a core encoded without one.
type Authenticator interface {
	Algorithm() uint8
	KeyID() uint8    // which of the group's keys made the tag
	Counter() uint64 // the sender's frame counter (replay protection)
	Size() int       // tag length, 1..MaxAuthTag
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
		n += AuthFixedLen + h.Auth.Size()
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
		b = append(b, h.Auth.Algorithm(), byte(tagLen), h.Auth.KeyID())
		b = binary.BigEndian.AppendUint64(b, h.Auth.Counter())
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
	if h.SkipCRC {
		return append(b, 0, 0, 0, 0), nil
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
// type's body layout. An encrypted body (AuthEncrypted) is checked as any
// other: as ciphertext it rarely has its type's layout, so such a frame
// does not parse until a verifier has decrypted it in place (ParseSealed),
// and no body accessor can read ciphertext as structure.
func Parse(b []byte) (View, error) { return parse(b, false, true) }

// ParseSealed is Parse for a verifier (link/auth): it checks an encrypted
// body's frame up to its body, so that the frame can be verified and
// decrypted in place; the plaintext frame must then be Parsed. Only the
// header and the auth section of the View it returns may be read.
func ParseSealed(b []byte) (View, error) { return parse(b, true, true) }

// ParseSealedNoCRC is ParseSealed without the CRC32C: for a verifier whose
// MAC covers every byte the CRC does (a frame that fails the MAC can be
// judged by CRC then, to tell corruption from forgery), and for a frame
// this process built itself and is about to seal.
func ParseSealedNoCRC(b []byte) (View, error) { return parse(b, true, false) }

// ParseNoCRC is Parse without the CRC32C: every other check, the body's
// layout included, stays. It is for a frame whose authentication tag
// verified (link.Frame.Authenticated): the tag covers every byte the CRC
// does, so the CRC adds nothing, and after a verifier decrypted a body in
// place it no longer matches the bytes (docs/auth.md). Anything else must
// use Parse.
func ParseNoCRC(b []byte) (View, error) { return parse(b, false, false) }

// ParseGroupNoCRC is ParseNoCRC followed by ParseGroup's group check.
func ParseGroupNoCRC(b []byte, group uint32) (View, error) {
	v, err := ParseNoCRC(b)
	if err != nil {
		return nil, err
	}
	return v.inGroup(group)
}

func parse(b []byte, sealed, crc bool) (View, error) {
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
	encrypted := false
	if flags&FlagAuth != 0 {
		if bodyStart+AuthFixedLen > bodyEnd {
			return nil, decodeErr(ErrAuth, "auth", bodyStart, "flag set but no room for the auth section's %d fixed bytes", AuthFixedLen)
		}
		l := int(b[bodyStart+1])
		if l < 1 || l > MaxAuthTag || bodyStart+AuthFixedLen+l > bodyEnd {
			return nil, decodeErr(ErrAuth, "auth.length", bodyStart+1, "tag length %d, room for %d (max %d)", l, bodyEnd-bodyStart-AuthFixedLen, MaxAuthTag)
		}
		encrypted = sealed && b[bodyStart] == AuthEncrypted
		bodyStart += AuthFixedLen + l
	}
	if sum := binary.BigEndian.Uint32(b[n-CRCLen:]); crc {
		if got := crc32.Checksum(b[:n-CRCLen], castagnoli); got != sum {
			return nil, decodeErr(ErrChecksum, "crc32c", n-CRCLen, "frame says %08x, bytes give %08x", sum, got)
		}
	}
	if err := checkBody(t, flags, b, bodyStart, bodyEnd, encrypted); err != nil {
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
	return v.inGroup(group)
}

// inGroup is small enough to inline into ParseGroup and ParseGroupNoCRC;
// its error is built out of line.
func (v View) inGroup(group uint32) (View, error) {
	if v.Group() != group {
		return nil, v.groupErr(group)
	}
	return v, nil
}

func (v View) groupErr(group uint32) error {
	return decodeErr(ErrGroup, "group", offGroup, "group %d, this member is in group %d", v.Group(), group)
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
		return v.authStart() + AuthFixedLen + int(v[v.authStart()+1])
	}
	return v.authStart()
}

// AckShape is AckBase<<16 | AckCount in one read: a receiver compares
// a frame's ack vector shape with the one it expects at once.
func (v View) AckShape() uint32 { return binary.BigEndian.Uint32(v[offAckBase:]) }

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
	return v[at], v[at+AuthFixedLen : v.bodyStart()], true
}

// AuthKey returns the authentication section's key id and frame counter
// (zero without one).
func (v View) AuthKey() (key uint8, counter uint64) {
	if !v.hasAuth() {
		return 0, 0
	}
	at := v.authStart()
	return v[at+2], binary.BigEndian.Uint64(v[at+3:])
}

// AuthTagAt returns where the tag lies in v (0, 0 without one), for a
// verifier that works in place: the tag is v[at:at+n], the body follows.
func (v View) AuthTagAt() (at, n int) {
	if !v.hasAuth() {
		return 0, 0
	}
	at = v.authStart() + AuthFixedLen
	return at, v.bodyStart() - at
}

// BodyAt returns the offset of the body in v.
func (v View) BodyAt() int { return v.bodyStart() }

// AuthInput appends to dst the bytes an authentication tag is computed
// over: the frame up to the CRC, with the tag zeroed.
func (v View) AuthInput(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, v[:v.crcStart()]...)
	if v.hasAuth() {
		clear(dst[start+v.authStart()+AuthFixedLen : start+v.bodyStart()])
	}
	return dst
}

// InsertAuth appends to dst a copy of the frame v (which has no
// authentication section) with one inserted after the ack vector:
// algorithm alg, key id key, counter, and a zeroed tag of tagLen bytes; the
// length field and FlagAuth are updated and the CRC is left zero. The
// caller fills the tag (at AuthTagAt of the result) and then calls SetCRC:
// this is how an authenticating link (link/auth) adds a section to a frame
// a core encoded without one. It allocates only if dst lacks capacity.
func InsertAuth(dst []byte, v View, alg, key uint8, counter uint64, tagLen int) ([]byte, error) {
	start := len(dst)
	dst, err := InsertAuthNoBody(dst, v, alg, key, counter, tagLen)
	if err != nil {
		return dst, err
	}
	copy(dst[start+v.authStart()+AuthFixedLen+tagLen:], v.Body())
	return dst, nil
}

// InsertAuthNoBody is InsertAuth without the body's copy: the result has
// the body's length, but its body bytes are whatever dst's backing array
// held there, for a caller that writes them itself (link/auth encrypts v's
// body straight into them).
func InsertAuthNoBody(dst []byte, v View, alg, key uint8, counter uint64, tagLen int) ([]byte, error) {
	if v.hasAuth() {
		return dst, errorf(ErrInvalid, "frame already has an authentication section")
	}
	if tagLen < 1 || tagLen > MaxAuthTag {
		return dst, errorf(ErrInvalid, "auth tag of %d bytes (1..%d)", tagLen, MaxAuthTag)
	}
	n := len(v) + AuthFixedLen + tagLen
	if n > 0xffff {
		return dst, errorf(ErrTooLarge, "frame of %d bytes with its authentication section exceeds the 65535-byte length field", n)
	}
	start := len(dst)
	at := v.authStart()
	dst = append(dst, v[:at]...)
	dst = append(dst, alg, byte(tagLen), key)
	dst = binary.BigEndian.AppendUint64(dst, counter)
	for range tagLen {
		dst = append(dst, 0)
	}
	dst = slices.Grow(dst, len(v)-at)
	dst = dst[:len(dst)+len(v)-at]
	f := dst[start:]
	binary.BigEndian.PutUint16(f[offFlags:], uint16(v.Flags()|FlagAuth))
	binary.BigEndian.PutUint16(f[offLength:], uint16(n))
	clear(f[n-CRCLen:])
	return dst, nil
}

// SetCRC writes the CRC-32C of the rbcast frame f (exactly its Length
// bytes) into its last four bytes: after InsertAuth, or after a verifier
// replaced an encrypted body by its plaintext in place.
func SetCRC(f []byte) {
	if len(f) < Overhead {
		return
	}
	binary.BigEndian.PutUint32(f[len(f)-CRCLen:], crc32.Checksum(f[:len(f)-CRCLen], castagnoli))
}

// CRCValid reports whether f's CRC32C matches its bytes (ParseSealedNoCRC
// did not look).
func (v View) CRCValid() bool {
	if len(v) < Overhead {
		return false
	}
	return binary.BigEndian.Uint32(v[len(v)-CRCLen:]) == crc32.Checksum(v[:len(v)-CRCLen], castagnoli)
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
