// Package localapi is rbcastd's local API: the messages local programs and
// the daemon exchange over a Unix SOCK_SEQPACKET socket, one message per
// packet (docs/local-api.md is the specification; the golden vectors in
// testdata/golden pin it).
//
// Every message starts with a one-byte type; integers are big-endian.
// Messages encode append-style (Append) and decode in place (Decode);
// Decode never panics and names what was wrong and where.
package localapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
)

// Version is the local API version this build speaks; it also answers
// Hellos of every version from MinVersion (a Welcome of the client's
// version). A Hello with another version is answered with an Error of
// code CodeVersion. Version 2 adds the rings (RingSetup, RingReady,
// Doorbell, DaemonDoorbell; docs/local-api.md, "Rings"); version 3 the
// file's hash in its verdict (FileSent) instead of in FileQueued, so that
// the daemon hashes a file as it sends it; version 4 the hash's algorithm
// (SendFileAlg, FileSentAlg, FileReportAlg: BLAKE3 as well as SHA-256);
// version 5 a reliable level per message (SendLevel); version 6 a code of
// its own for a SendFile refused past the daemon's bound on queued files
// (CodeQueuedBound) and FileRoom, which tells the refused client when a
// place is free.
const (
	Version    = 6
	MinVersion = 1
)

// Type is a message's first byte. Client messages have the high bit clear,
// daemon messages have it set.
type Type uint8

const (
	// Client to daemon.
	THello     Type = 0x01 // first message on every connection
	TSend      Type = 0x02 // one message to broadcast
	TFlush     Type = 0x03 // ask for Flushed once everything sent is acknowledged
	TSubscribe Type = 0x04 // deliver messages (from one member or all) on this connection
	TStatus    Type = 0x05 // ask for a Status
	TSendBatch Type = 0x06 // several messages to broadcast, in order
	TRingSetup Type = 0x07 // ask for a ring (version 2)
	TDoorbell  Type = 0x08 // look at a ring again (version 2)
	TRekey     Type = 0x09 // one step of a key rotation (an authenticated group)
	// TSendUnreliable is one message at the Unreliable level (a group with
	// views): at most once, never acknowledged; Flushed does not count it.
	TSendUnreliable Type = 0x0a
	// TSendLevel sets the reliable level of the connection's sends from
	// then on (version 5).
	TSendLevel Type = 0x0e

	// Daemon to client.
	TWelcome        Type = 0x81 // answers Hello
	TFlushed        Type = 0x82 // answers Flush
	TSubscribed     Type = 0x83 // answers Subscribe
	TDeliver        Type = 0x84 // one delivered message
	TStatusJSON     Type = 0x85 // answers Status
	TDeliverBatch   Type = 0x86 // several delivered messages, in order (after Hello with HelloBatch)
	TRingReady      Type = 0x87 // answers RingSetup, with the ring's memory (version 2)
	TDaemonDoorbell Type = 0x88 // look at a ring again (version 2)
	TError          Type = 0xff // a request failed; the text says why
)

func (t Type) String() string {
	switch t {
	case THello:
		return "Hello"
	case TSend:
		return "Send"
	case TFlush:
		return "Flush"
	case TSubscribe:
		return "Subscribe"
	case TStatus:
		return "Status"
	case TSendBatch:
		return "SendBatch"
	case TDeliverBatch:
		return "DeliverBatch"
	case TRingSetup:
		return "RingSetup"
	case TDoorbell:
		return "Doorbell"
	case TRekey:
		return "Rekey"
	case TSendUnreliable:
		return "SendUnreliable"
	case TSendLevel:
		return "SendLevel"
	case TRingReady:
		return "RingReady"
	case TDaemonDoorbell:
		return "DaemonDoorbell"
	case TWelcome:
		return "Welcome"
	case TFlushed:
		return "Flushed"
	case TSubscribed:
		return "Subscribed"
	case TDeliver:
		return "Deliver"
	case TStatusJSON:
		return "StatusJSON"
	case TError:
		return "Error"
	}
	if isFile(t) {
		return fileTypeName(t)
	}
	return fmt.Sprintf("Type(%#02x)", uint8(t))
}

// Hello.Flags.
const (
	// HelloWaitReady asks the daemon to answer only once the group has
	// started (every member registered).
	HelloWaitReady uint16 = 1
	// HelloBatch says the client reads DeliverBatch: the daemon may
	// deliver several messages in one packet.
	HelloBatch uint16 = 2
)

// MaxBatch bounds a SendBatch or DeliverBatch packet, type byte included.
const MaxBatch = 1 << 16

// AllMembers in Subscribe.From subscribes to every member's messages.
const AllMembers uint16 = 0xffff

// NoMember in Welcome.Self: the group has not started, no id yet.
const NoMember uint16 = 0xffff

// Order values in Welcome.
const (
	OrderFIFO  uint8 = 0
	OrderTotal uint8 = 1 // Agreed: one order at every member
	OrderSafe  uint8 = 2 // one order, each message delivered once every member of the view holds it
)

// Error codes.
const (
	CodeBadMessage Code = 1 // the message did not decode
	CodeVersion    Code = 2 // unsupported local API version
	CodeTooLarge   Code = 3 // a Send larger than the daemon accepts
	CodeUnexpected Code = 4 // a message not valid here (e.g. before Hello)
	CodeClosed     Code = 5 // the group stopped or the daemon is leaving
	CodeSendFailed Code = 6 // the group refused a message
	CodeRefused    Code = 7 // a Rekey the daemon would not do (the text says why)
	// CodeRejoining: the group went on without the daemon (views) and it
	// is joining again as a new incarnation. A connection of the
	// membership that ended gets it (a subscriber: after its last
	// deliveries, so what follows is missing here), and so does a request
	// that waited for the new membership too long. Connect again.
	CodeRejoining Code = 8
	// CodeQueuedBound (version 6): a SendFile refused because as many
	// files are queued at the daemon and not yet judged as its bound on
	// the descriptors they hold allows; the text names the bound. Only
	// that file is refused, and the daemon sends the connection one
	// FileRoom once a place is free: send the file again then. A client
	// of an earlier version gets CodeRefused with the same text.
	CodeQueuedBound Code = 9
)

// Code is an Error's code.
type Code uint16

func (c Code) String() string {
	switch c {
	case CodeBadMessage:
		return "bad message"
	case CodeVersion:
		return "version"
	case CodeTooLarge:
		return "too large"
	case CodeUnexpected:
		return "unexpected"
	case CodeClosed:
		return "closed"
	case CodeSendFailed:
		return "send failed"
	case CodeRefused:
		return "refused"
	case CodeRejoining:
		return "rejoining"
	case CodeQueuedBound:
		return "queued bound"
	}
	return fmt.Sprintf("Code(%d)", uint16(c))
}

// MaxText bounds an Error's text, MaxStatus a Status' JSON.
const (
	MaxText   = 4096
	MaxStatus = 1 << 20
)

// Message is one local API message.
type Message interface {
	Type() Type
	// Append appends the encoded message to b.
	Append(b []byte) []byte
}

// Hello opens a connection: the client's API version and flags.
type Hello struct {
	Version uint16
	Flags   uint16
}

// Send carries one message to broadcast. Data aliases the decoded packet.
type Send struct{ Data []byte }

// SendUnreliable carries one message to send at the Unreliable level
// (reliable.Group.SendUnreliable): once, to the members of the daemon's
// view, never acknowledged or repaired. Data aliases the decoded packet.
type SendUnreliable struct{ Data []byte }

// SendLevel sets the reliable level of every Send, SendBatch and send
// ring message of the connection from then on: Level is a Welcome Order
// (OrderFIFO, OrderTotal for Agreed, OrderSafe), the group's own by
// default. A daemon whose group is a total order over views sends at
// Agreed or Safe whatever the group's level (reliable.Group.SendLevel);
// any other level than the group's own it refuses (CodeSendFailed,
// naming the group's level) and closes the connection, so that nothing
// sent after it goes out at another level. Version 5.
type SendLevel struct{ Level uint8 }

// SendBatch carries several messages to broadcast, in order: one packet
// instead of one per message. Each datum aliases the decoded packet.
type SendBatch struct{ Msgs [][]byte }

// BatchEntryLen is a SendBatch entry's overhead, DeliverBatchEntryLen a
// DeliverBatch entry's.
const (
	BatchEntryLen        = 4
	DeliverBatchEntryLen = 6
)

// Flush asks for Flushed once every message this daemon accepted so far
// (from any client) has been acknowledged by every live member.
type Flush struct{}

// Subscribe asks for every message delivered from now on whose sender is
// From (AllMembers: every sender).
type Subscribe struct{ From uint16 }

// Status asks for a StatusJSON.
type Status struct{}

// RingSetup asks for a ring (RingSend or RingDeliver) with a data area
// of Size bytes (a power of two, MinRing to MaxRing); the daemon answers
// RingReady with the ring's memory, or an Error. Version 2.
type RingSetup struct {
	Ring uint8
	Size uint32
}

// Doorbell tells the daemon to look at a ring again: records were
// published into the send ring while it slept (wantData), or room was
// made in the deliver ring while it waited for some (wantSpace).
// Version 2.
type Doorbell struct{ Ring uint8 }

// Rekey steps (docs/auth.md, "Rotation").
const (
	// RekeyInstall accepts frames under the key in the file at Path too
	// (every member installs before any activates).
	RekeyInstall uint8 = 1
	// RekeyActivate sends under the installed key with fingerprint
	// Fingerprint, or, if Path is set, under the key in that file.
	RekeyActivate uint8 = 2
	// RekeyRetire stops accepting the key not sent under.
	RekeyRetire uint8 = 3
)

// Rekey asks the daemon of an authenticated group to take one step of a
// key rotation: the daemon reads the key file at Path itself (the key
// never crosses the socket) and answers StatusJSON once done, or an Error
// of code CodeRefused. Only a client of the daemon's own user (or root)
// may ask.
type Rekey struct {
	Step        uint8
	Fingerprint uint64
	Path        string // an absolute path, at most MaxText bytes
}

// RingReady answers RingSetup: the ring's memory, a memfd of
// RingHeader+Size bytes sealed against shrinking and growing, comes with
// the packet (SCM_RIGHTS). Version 2.
type RingReady struct {
	Ring uint8
	Size uint32
}

// DaemonDoorbell tells the client to look at a ring again: records were
// published into the deliver ring while it slept, or room was made in the
// send ring while it waited for some. Version 2.
type DaemonDoorbell struct{ Ring uint8 }

// Welcome answers Hello.
type Welcome struct {
	Version    uint16
	Self       uint16 // NoMember until the group has started
	Group      uint32
	Members    uint16 // the group's size
	Order      uint8  // OrderFIFO, OrderTotal or OrderSafe
	Ready      bool   // the group has started
	MaxMessage uint32 // the largest Send data accepted; 0 until Ready
}

// Flushed answers Flush: Accepted is the number of Sends accepted on this
// connection so far.
type Flushed struct{ Accepted uint64 }

// Subscribed answers Subscribe.
type Subscribed struct{ From uint16 }

// Deliver is one delivered message. Data aliases the decoded packet.
type Deliver struct {
	From uint16
	Data []byte
}

// DeliverBatch is several delivered messages, in delivery order. Each
// Data aliases the decoded packet.
type DeliverBatch struct{ Msgs []Deliver }

// StatusJSON answers Status with the daemon's status as JSON (the
// daemon package's Status type).
type StatusJSON struct{ JSON []byte }

// Error reports a failed request. After an Error the daemon closes the
// connection unless the code is CodeTooLarge. Its message is the daemon's
// text and the code's name, "TEXT (code)": like every error of this
// package it names no program, so a command prints its own name before it
// once.
type Error struct {
	Code Code
	Text string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%v)", e.Text, e.Code) }

func (*Hello) Type() Type          { return THello }
func (*Send) Type() Type           { return TSend }
func (*SendUnreliable) Type() Type { return TSendUnreliable }
func (*SendLevel) Type() Type      { return TSendLevel }
func (*Flush) Type() Type          { return TFlush }
func (*Subscribe) Type() Type      { return TSubscribe }
func (*Status) Type() Type         { return TStatus }
func (*SendBatch) Type() Type      { return TSendBatch }
func (*DeliverBatch) Type() Type   { return TDeliverBatch }
func (*Welcome) Type() Type        { return TWelcome }
func (*Flushed) Type() Type        { return TFlushed }
func (*Subscribed) Type() Type     { return TSubscribed }
func (*Deliver) Type() Type        { return TDeliver }
func (*StatusJSON) Type() Type     { return TStatusJSON }
func (*Error) Type() Type          { return TError }

func (*Rekey) Type() Type          { return TRekey }
func (*RingSetup) Type() Type      { return TRingSetup }
func (*Doorbell) Type() Type       { return TDoorbell }
func (*RingReady) Type() Type      { return TRingReady }
func (*DaemonDoorbell) Type() Type { return TDaemonDoorbell }

func (m *RingSetup) Append(b []byte) []byte {
	return be.AppendUint32(append(b, byte(TRingSetup), m.Ring), m.Size)
}

func (m *Doorbell) Append(b []byte) []byte { return append(b, byte(TDoorbell), m.Ring) }

func (m *Rekey) Append(b []byte) []byte {
	b = be.AppendUint64(append(b, byte(TRekey), m.Step), m.Fingerprint)
	return append(b, m.Path...)
}

func (m *RingReady) Append(b []byte) []byte {
	return be.AppendUint32(append(b, byte(TRingReady), m.Ring), m.Size)
}

func (m *DaemonDoorbell) Append(b []byte) []byte { return append(b, byte(TDaemonDoorbell), m.Ring) }

var be = binary.BigEndian

func (m *Hello) Append(b []byte) []byte {
	b = append(b, byte(THello))
	b = be.AppendUint16(b, m.Version)
	return be.AppendUint16(b, m.Flags)
}

func (m *Send) Append(b []byte) []byte { return append(append(b, byte(TSend)), m.Data...) }

func (m *SendUnreliable) Append(b []byte) []byte {
	return append(append(b, byte(TSendUnreliable)), m.Data...)
}

func (m *SendLevel) Append(b []byte) []byte { return append(b, byte(TSendLevel), m.Level) }

func (m *Flush) Append(b []byte) []byte { return append(b, byte(TFlush)) }

func (m *Subscribe) Append(b []byte) []byte {
	return be.AppendUint16(append(b, byte(TSubscribe)), m.From)
}

func (m *Status) Append(b []byte) []byte { return append(b, byte(TStatus)) }

func (m *SendBatch) Append(b []byte) []byte {
	b = append(b, byte(TSendBatch))
	for _, d := range m.Msgs {
		b = be.AppendUint32(b, uint32(len(d)))
		b = append(b, d...)
	}
	return b
}

func (m *DeliverBatch) Append(b []byte) []byte {
	b = append(b, byte(TDeliverBatch))
	for _, d := range m.Msgs {
		b = be.AppendUint16(b, d.From)
		b = be.AppendUint32(b, uint32(len(d.Data)))
		b = append(b, d.Data...)
	}
	return b
}

func (m *Welcome) Append(b []byte) []byte {
	b = append(b, byte(TWelcome))
	b = be.AppendUint16(b, m.Version)
	b = be.AppendUint16(b, m.Self)
	b = be.AppendUint32(b, m.Group)
	b = be.AppendUint16(b, m.Members)
	ready := byte(0)
	if m.Ready {
		ready = 1
	}
	b = append(b, m.Order, ready)
	return be.AppendUint32(b, m.MaxMessage)
}

func (m *Flushed) Append(b []byte) []byte {
	return be.AppendUint64(append(b, byte(TFlushed)), m.Accepted)
}

func (m *Subscribed) Append(b []byte) []byte {
	return be.AppendUint16(append(b, byte(TSubscribed)), m.From)
}

func (m *Deliver) Append(b []byte) []byte {
	b = be.AppendUint16(append(b, byte(TDeliver)), m.From)
	return append(b, m.Data...)
}

func (m *StatusJSON) Append(b []byte) []byte {
	return append(append(b, byte(TStatusJSON)), m.JSON...)
}

func (m *Error) Append(b []byte) []byte {
	b = be.AppendUint16(append(b, byte(TError)), uint16(m.Code))
	t := m.Text
	if len(t) > MaxText {
		t = t[:MaxText]
	}
	return append(b, t...)
}

// Fixed lengths of the messages without variable data, type byte included.
const (
	helloLen      = 5
	ringSetupLen  = 6
	doorbellLen   = 2
	rekeyMin      = 10
	flushLen      = 1
	sendLevelLen  = 2
	subscribeLen  = 3
	statusLen     = 1
	welcomeLen    = 17
	flushedLen    = 9
	subscribedLen = 3
	deliverMin    = 3
	errorMin      = 3
)

// ErrDecode is wrapped by every decode error.
var ErrDecode = errors.New("localapi: bad message")

// DecodeError says what was wrong with a message and at which offset.
type DecodeError struct {
	Type   Type
	Offset int
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("localapi: bad %v message at byte %d: %s", e.Type, e.Offset, e.Reason)
}

func (e *DecodeError) Unwrap() error { return ErrDecode }

func decodeErr(t Type, off int, format string, args ...any) error {
	return &DecodeError{Type: t, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// Decode decodes one packet. Data fields (Send, Deliver, StatusJSON) alias
// p. It allocates the message; a Decoder does not.
func Decode(p []byte) (Message, error) {
	return new(Decoder).Decode(p)
}

// Decoder decodes packets into messages it keeps and reuses, so that a
// stream of packets decodes without allocating (the daemon's and the
// clients' steady state). A message it returns is valid until its next
// Decode.
type Decoder struct {
	hello        Hello
	send         Send
	sendUnrel    SendUnreliable
	sendLevel    SendLevel
	flush        Flush
	subscribe    Subscribe
	status       Status
	sendBatch    SendBatch
	deliverBatch DeliverBatch
	welcome      Welcome
	flushed      Flushed
	subscribed   Subscribed
	deliver      Deliver
	statusJSON   StatusJSON
	ringSetup    RingSetup
	doorbell     Doorbell
	ringReady    RingReady
	daemonBell   DaemonDoorbell
	rekey        Rekey
}

// Decode decodes one packet into the Decoder's message of its type. Data
// fields alias p; an Error and a Rekey path (rare) are allocated.
func (d *Decoder) Decode(p []byte) (Message, error) {
	if len(p) == 0 {
		return nil, decodeErr(0, 0, "empty packet")
	}
	t := Type(p[0])
	if isFile(t) {
		return decodeFile(p)
	}
	exact := func(n int) error {
		if len(p) != n {
			return decodeErr(t, min(len(p), n), "%d bytes, want %d", len(p), n)
		}
		return nil
	}
	atLeast := func(n int) error {
		if len(p) < n {
			return decodeErr(t, len(p), "%d bytes, want at least %d", len(p), n)
		}
		return nil
	}
	switch t {
	case THello:
		if err := exact(helloLen); err != nil {
			return nil, err
		}
		d.hello = Hello{Version: be.Uint16(p[1:]), Flags: be.Uint16(p[3:])}
		return &d.hello, nil
	case TSend:
		d.send.Data = p[1:]
		return &d.send, nil
	case TSendUnreliable:
		d.sendUnrel.Data = p[1:]
		return &d.sendUnrel, nil
	case TSendLevel:
		if err := exact(sendLevelLen); err != nil {
			return nil, err
		}
		if p[1] > OrderSafe {
			return nil, decodeErr(t, 1, "level %d, want 0 (fifo), 1 (agreed) or 2 (safe)", p[1])
		}
		d.sendLevel.Level = p[1]
		return &d.sendLevel, nil
	case TFlush:
		if err := exact(flushLen); err != nil {
			return nil, err
		}
		return &d.flush, nil
	case TSubscribe:
		if err := exact(subscribeLen); err != nil {
			return nil, err
		}
		d.subscribe.From = be.Uint16(p[1:])
		return &d.subscribe, nil
	case TStatus:
		if err := exact(statusLen); err != nil {
			return nil, err
		}
		return &d.status, nil
	case TSendBatch:
		m := &d.sendBatch
		m.Msgs = m.Msgs[:0]
		for e, err := range Entries(p) {
			if err != nil {
				return nil, err
			}
			m.Msgs = append(m.Msgs, e.Data)
		}
		return m, nil
	case TDeliverBatch:
		m := &d.deliverBatch
		m.Msgs = m.Msgs[:0]
		for e, err := range Entries(p) {
			if err != nil {
				return nil, err
			}
			m.Msgs = append(m.Msgs, e)
		}
		return m, nil
	case TWelcome:
		if err := exact(welcomeLen); err != nil {
			return nil, err
		}
		m := &d.welcome
		*m = Welcome{Version: be.Uint16(p[1:]), Self: be.Uint16(p[3:]), Group: be.Uint32(p[5:]),
			Members: be.Uint16(p[9:]), Order: p[11], MaxMessage: be.Uint32(p[13:])}
		if m.Order > OrderSafe {
			return nil, decodeErr(t, 11, "order %d, want 0 (fifo), 1 (total: agreed) or 2 (total: safe)", m.Order)
		}
		switch p[12] {
		case 0:
		case 1:
			m.Ready = true
		default:
			return nil, decodeErr(t, 12, "ready flag %d, want 0 or 1", p[12])
		}
		return m, nil
	case TFlushed:
		if err := exact(flushedLen); err != nil {
			return nil, err
		}
		d.flushed.Accepted = be.Uint64(p[1:])
		return &d.flushed, nil
	case TSubscribed:
		if err := exact(subscribedLen); err != nil {
			return nil, err
		}
		d.subscribed.From = be.Uint16(p[1:])
		return &d.subscribed, nil
	case TDeliver:
		if err := atLeast(deliverMin); err != nil {
			return nil, err
		}
		d.deliver = Deliver{From: be.Uint16(p[1:]), Data: p[3:]}
		return &d.deliver, nil
	case TStatusJSON:
		if len(p)-1 > MaxStatus {
			return nil, decodeErr(t, 1, "%d bytes of status, at most %d", len(p)-1, MaxStatus)
		}
		d.statusJSON.JSON = p[1:]
		return &d.statusJSON, nil
	case TRingSetup, TRingReady:
		if err := exact(ringSetupLen); err != nil {
			return nil, err
		}
		if p[1] > RingDeliver {
			return nil, decodeErr(t, 1, "ring %d, want 0 (send) or 1 (deliver)", p[1])
		}
		if t == TRingSetup {
			d.ringSetup = RingSetup{Ring: p[1], Size: be.Uint32(p[2:])}
			return &d.ringSetup, nil
		}
		d.ringReady = RingReady{Ring: p[1], Size: be.Uint32(p[2:])}
		return &d.ringReady, nil
	case TDoorbell, TDaemonDoorbell:
		if err := exact(doorbellLen); err != nil {
			return nil, err
		}
		if p[1] > RingDeliver {
			return nil, decodeErr(t, 1, "ring %d, want 0 (send) or 1 (deliver)", p[1])
		}
		if t == TDoorbell {
			d.doorbell.Ring = p[1]
			return &d.doorbell, nil
		}
		d.daemonBell.Ring = p[1]
		return &d.daemonBell, nil
	case TRekey:
		if err := atLeast(rekeyMin); err != nil {
			return nil, err
		}
		m := &d.rekey
		*m = Rekey{Step: p[1], Fingerprint: be.Uint64(p[2:]), Path: string(p[rekeyMin:])}
		switch {
		case m.Step < RekeyInstall || m.Step > RekeyRetire:
			return nil, decodeErr(t, 1, "step %d, want 1 (install), 2 (activate) or 3 (retire)", m.Step)
		case len(m.Path) > MaxText:
			return nil, decodeErr(t, rekeyMin, "a path of %d bytes, at most %d", len(m.Path), MaxText)
		case m.Step == RekeyInstall && m.Path == "":
			return nil, decodeErr(t, rekeyMin, "install without a key file path")
		case m.Step == RekeyActivate && m.Path == "" && m.Fingerprint == 0:
			return nil, decodeErr(t, 2, "activate without a fingerprint or a key file path")
		}
		return m, nil
	case TError:
		if err := atLeast(errorMin); err != nil {
			return nil, err
		}
		if len(p)-errorMin > MaxText {
			return nil, decodeErr(t, errorMin, "%d bytes of text, at most %d", len(p)-errorMin, MaxText)
		}
		return &Error{Code: Code(be.Uint16(p[1:])), Text: string(p[3:])}, nil
	}
	return nil, decodeErr(t, 0, "unknown message type %#02x", uint8(t))
}

// Entries iterates over the messages of a SendBatch or DeliverBatch
// packet without allocating (a SendBatch entry's From is 0). It yields a
// decode error, once and last, where the packet is malformed: so a
// caller that acts on each entry as it comes and must not act on a
// malformed packet ranges over it twice.
func Entries(p []byte) iter.Seq2[Deliver, error] {
	return func(yield func(Deliver, error) bool) {
		if len(p) == 0 {
			yield(Deliver{}, decodeErr(0, 0, "empty packet"))
			return
		}
		t := Type(p[0])
		pre, hdr := 0, BatchEntryLen
		switch t {
		case TSendBatch:
		case TDeliverBatch:
			pre, hdr = 2, DeliverBatchEntryLen
		default:
			yield(Deliver{}, decodeErr(t, 0, "not a batch"))
			return
		}
		if len(p) > MaxBatch {
			yield(Deliver{}, decodeErr(t, MaxBatch, "%d bytes, at most %d", len(p), MaxBatch))
			return
		}
		if len(p) == 1 {
			yield(Deliver{}, decodeErr(t, 1, "no messages"))
			return
		}
		for off := 1; off < len(p); {
			if len(p)-off < hdr {
				yield(Deliver{}, decodeErr(t, off, "entry header of %d bytes cut short: %d left", hdr, len(p)-off))
				return
			}
			n := int(be.Uint32(p[off+pre:]))
			if n > len(p)-off-hdr {
				yield(Deliver{}, decodeErr(t, off+pre, "message of %d bytes, only %d left", n, len(p)-off-hdr))
				return
			}
			var e Deliver
			if pre > 0 {
				e.From = be.Uint16(p[off:])
			}
			e.Data = p[off+hdr : off+hdr+n : off+hdr+n]
			if !yield(e, nil) {
				return
			}
			off += hdr + n
		}
	}
}
