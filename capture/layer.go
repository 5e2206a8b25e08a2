package capture

import (
	"fmt"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/rbcast/rbcast/frame"
)

// LayerTypeRbcast is the gopacket layer type of an rbcast frame. Importing
// this package registers it for EtherType 0x88B5 (frame.EtherType) in
// layers.EthernetTypeMetadata, so gopacket.NewPacket(data,
// layers.LayerTypeEthernet, ...) and DecodingLayerParsers built on
// layers.Ethernet or layers.Dot1Q decode rbcast frames. A group that uses
// another EtherType registers it with RegisterEtherType.
var LayerTypeRbcast = gopacket.RegisterLayerType(1885, gopacket.LayerTypeMetadata{
	Name:    "Rbcast",
	Decoder: gopacket.DecodeFunc(decodeRbcast),
})

func init() { RegisterEtherType(frame.EtherType) }

// RegisterEtherType makes gopacket decode frames of EtherType et as rbcast.
// Call it at start-up, before decoding starts: gopacket's tables are not
// guarded against concurrent change.
func RegisterEtherType(et uint16) {
	layers.EthernetTypeMetadata[et] = layers.EnumMetadata{
		DecodeWith: gopacket.DecodeFunc(decodeRbcast),
		Name:       "Rbcast",
		LayerType:  LayerTypeRbcast,
	}
}

// Rbcast is an rbcast frame decoded by gopacket. It is built on frame.Parse
// and copies nothing: View, Body, AuthTag and the layer's contents and
// payload are slices of the packet's data. Contents is the whole rbcast
// frame (header to CRC, Ethernet padding excluded); Payload is the
// application message of a Data, SeqRequest or SeqData frame (in bundle
// form when the BUNDLE flag is set) and empty for other types.
type Rbcast struct {
	layers.BaseLayer
	View frame.View

	Version     uint8
	Type        frame.Type
	Flags       frame.Flags
	Length      uint16
	Sender      frame.MemberID
	Group       uint32
	Incarnation uint32
	ViewID      uint32 // the view of a group that changes (wire version 4)
	Seq         uint32
	// AckBase and Acks are the piggybacked ack vector: Acks[i] is the next
	// sequence number the sender expects from member AckBase+i.
	AckBase frame.MemberID
	Acks    []uint32
	// AuthAlgorithm and AuthTag are set when Flags has FlagAuth.
	AuthAlgorithm uint8
	AuthTag       []byte
	// Body is the type-specific body; Summary describes it.
	Body []byte
	CRC  uint32
}

var _ gopacket.DecodingLayer = (*Rbcast)(nil)

func (r *Rbcast) LayerType() gopacket.LayerType  { return LayerTypeRbcast }
func (r *Rbcast) CanDecode() gopacket.LayerClass { return LayerTypeRbcast }

// NextLayerType is gopacket.LayerTypePayload when the frame carries
// application data, else gopacket.LayerTypeZero.
func (r *Rbcast) NextLayerType() gopacket.LayerType {
	if len(r.Payload) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// DecodeFromBytes validates data (the bytes after the EtherType, Ethernet
// padding allowed) with frame.Parse and fills r. On error, r is reset and
// the *frame.DecodeError says what was wrong and at which offset. The Acks
// slice is reused, so a DecodingLayerParser allocates nothing per frame.
func (r *Rbcast) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	acks := r.Acks[:0]
	*r = Rbcast{Acks: acks}
	v, err := frame.Parse(data)
	if err != nil {
		return err
	}
	r.View = v
	r.Contents = v
	r.Payload = v.Payload()
	r.Version = v.Version()
	r.Type = v.Type()
	r.Flags = v.Flags()
	r.Length = uint16(v.Length())
	r.Sender = v.Sender()
	r.Group = v.Group()
	r.Incarnation = v.Incarnation()
	r.ViewID = v.ViewID()
	r.Seq = v.Seq()
	r.AckBase = v.AckBase()
	for i := range v.AckCount() {
		r.Acks = append(r.Acks, v.Ack(i))
	}
	if alg, tag, ok := v.Auth(); ok {
		r.AuthAlgorithm, r.AuthTag = alg, tag
	}
	r.Body = v.Body()
	r.CRC = v.CRC()
	return nil
}

func decodeRbcast(data []byte, p gopacket.PacketBuilder) error {
	r := &Rbcast{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(r)
	if r.NextLayerType() == gopacket.LayerTypeZero {
		return nil
	}
	return p.NextDecoder(r.NextLayerType())
}

// Summary describes the frame in one line: type, sender, sequence number,
// flags and the type-specific body. It allocates; it is for tools.
func (r *Rbcast) Summary() string {
	if r.View == nil {
		return "rbcast (not decoded)"
	}
	var b strings.Builder
	if r.Sender == frame.NoMember {
		fmt.Fprintf(&b, "%v from (no id yet)", r.Type)
	} else {
		fmt.Fprintf(&b, "%v from %d", r.Type, r.Sender)
	}
	fmt.Fprintf(&b, " inc %d view %d seq %d group %d", r.Incarnation, r.ViewID, r.Seq, r.Group)
	if f := r.flagNames(); f != "" {
		fmt.Fprintf(&b, " [%s]", f)
	}
	if len(r.Acks) > 0 {
		fmt.Fprintf(&b, " acks@%d=%v", r.AckBase, r.Acks)
	}
	if r.AuthTag != nil {
		fmt.Fprintf(&b, " auth alg %d (%d-byte tag)", r.AuthAlgorithm, len(r.AuthTag))
	}
	if s := r.BodySummary(); s != "" {
		b.WriteString(": ")
		b.WriteString(s)
	}
	return b.String()
}

func (r *Rbcast) flagNames() string {
	var names []string
	for _, f := range []struct {
		bit  frame.Flags
		name string
	}{{frame.FlagAuth, "AUTH"}, {frame.FlagBundle, "BUNDLE"}, {frame.FlagRetransmit, "RETRANSMIT"}, {frame.FlagAckRequest, "ACK_REQUEST"}} {
		if r.Flags&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if rest := r.Flags &^ (frame.FlagAuth | frame.FlagBundle | frame.FlagRetransmit | frame.FlagAckRequest); rest != 0 {
		names = append(names, fmt.Sprintf("%#04x", uint16(rest)))
	}
	return strings.Join(names, ",")
}

// BodySummary describes the type-specific body, e.g. the ranges of a Nack
// or the member list of a Start.
func (r *Rbcast) BodySummary() string {
	v := r.View
	if v == nil {
		return ""
	}
	switch r.Type {
	case frame.Data, frame.SeqRequest, frame.SeqData:
		var b strings.Builder
		if r.Type == frame.SeqData {
			u := v.SeqDataUID()
			fmt.Fprintf(&b, "epoch %d origin %d inc %d seq %d, ", v.SeqDataEpoch(), u.Origin, u.Incarnation, u.Seq)
		}
		n, size := 0, 0
		for it := v.Messages(); ; {
			m, ok := it.Next()
			if !ok {
				break
			}
			n++
			size += len(m)
		}
		fmt.Fprintf(&b, "%d message(s), %d bytes", n, size)
		return b.String()
	case frame.Nack:
		return fmt.Sprintf("target %d ranges %s", v.NackTarget(), rangeString(v.NackRanges()))
	case frame.Join:
		j := v.Join()
		return fmt.Sprintf("requested %d window %d mtu %d nonce %#016x config %#016x", j.Requested, j.Window, j.MTU, j.Nonce, j.ConfigHash)
	case frame.Welcome:
		w := v.Welcome()
		return fmt.Sprintf("nonce %#016x assigned %d members %d config %#016x", w.Nonce, w.Assigned, w.Members, w.ConfigHash)
	case frame.Start:
		ml := v.Members()
		parts := make([]string, ml.Len())
		for i := range parts {
			m := ml.At(i)
			parts[i] = fmt.Sprintf("%d=%02x:%02x:%02x:%02x:%02x:%02x/inc %d", m.ID, m.MAC[0], m.MAC[1], m.MAC[2], m.MAC[3], m.MAC[4], m.MAC[5], m.Incarnation)
		}
		return "members " + strings.Join(parts, " ")
	case frame.SeqAccept:
		al := v.Accepts()
		parts := make([]string, al.Len())
		for i := range parts {
			e := al.At(i)
			parts[i] = fmt.Sprintf("%d<-%d/%d/%d", e.Global, e.UID.Origin, e.UID.Incarnation, e.UID.Seq)
		}
		return fmt.Sprintf("epoch %d accepts %s", v.AcceptEpoch(), strings.Join(parts, " "))
	case frame.SeqStatusRequest:
		return fmt.Sprintf("epoch %d highest sequenced %d", v.StatusEpoch(), v.StatusDelivered())
	case frame.SeqStatusReply:
		return fmt.Sprintf("epoch %d highest delivered %d", v.StatusEpoch(), v.StatusDelivered())
	case frame.SeqRetransmit:
		return fmt.Sprintf("epoch %d ranges %s", v.RetransmitEpoch(), rangeString(v.RetransmitRanges()))
	case frame.SeqElection:
		e := v.Election()
		return fmt.Sprintf("epoch %d %v candidate %d last global %d", e.Epoch, e.Phase, e.Candidate, e.LastGlobal)
	}
	return ""
}

func rangeString(rl frame.RangeList) string {
	parts := make([]string, rl.Len())
	for i := range parts {
		r := rl.At(i)
		parts[i] = fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	return strings.Join(parts, ",")
}
