package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden")

// fixedAuth is a test Authenticator whose tag is a constant, so golden
// vectors do not depend on a MAC algorithm the format does not define.
type fixedAuth struct {
	alg     uint8
	tag     []byte
	key     uint8
	counter uint64
}

func (a fixedAuth) Algorithm() uint8                 { return a.alg }
func (a fixedAuth) KeyID() uint8                     { return a.key }
func (a fixedAuth) Counter() uint64                  { return a.counter }
func (a fixedAuth) Size() int                        { return len(a.tag) }
func (a fixedAuth) AppendTag(dst, msg []byte) []byte { return append(dst, a.tag...) }

func baseHeader() Header {
	return Header{Group: 0x0000beef, Sender: 3, Incarnation: 7, ViewID: 5, Seq: 42, AckBase: 0, Acks: []uint32{11, 12, 13, 42}}
}

var uid = UID{Origin: 2, Incarnation: 5, Seq: 99}

// goldenCases is one example of every frame type (and of each flag that
// changes the layout). Each has a vector in testdata/golden/<name>.hex.
func goldenCases() []struct {
	name string
	h    Header
	body Body
} {
	h := baseHeader()
	hNoAcks := h
	hNoAcks.Acks = nil
	hAuth := h
	hAuth.Auth = fixedAuth{alg: 1, tag: []byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x11}, key: 1, counter: 0x0102030405060708}
	hRetx := h
	hRetx.Flags = FlagRetransmit
	hJoin := hNoAcks
	hJoin.Sender = NoMember
	hViewJoin := hJoin
	hViewJoin.ViewID = 0
	members2 := []MemberInfo{{0, [6]byte{2, 0, 0, 0, 0, 1}, 1}, {1, [6]byte{2, 0, 0, 0, 0, 2}, 9}}
	hFile := hNoAcks
	hFile.Seq, hFile.ViewID = 0, 0
	hBlock := hFile
	hBlock.Seq = 2
	hRepair := hBlock
	hRepair.Flags = FlagRetransmit
	hFileAlg := hFile
	hFileAlg.Flags = FlagHashAlg
	var fileHash [FileHashLen]byte
	for i := range fileHash {
		fileHash[i] = byte(0xa0 + i)
	}
	hData := h
	hData.Sender, hData.ViewID = 2, 7
	relayed, err := Append(nil, &hData, &Payload{T: Data, Data: []byte("from the departed")})
	if err != nil {
		panic(err)
	}
	// A static group's relay (pbp.Config.Relay): base 0, the relaying
	// member's header as an Ack's (view 0, its ack vector, its last
	// sequence number), the silent member's frame without acks.
	hStatic := h
	hStatic.ViewID = 0
	hDead := hNoAcks
	hDead.Sender, hDead.ViewID, hDead.Seq = 2, 0, 12
	relayedStatic, err := Append(nil, &hDead, &Payload{T: Data, Data: []byte("from the dead")})
	if err != nil {
		panic(err)
	}
	return []struct {
		name string
		h    Header
		body Body
	}{
		{"data", h, &Payload{T: Data, Data: []byte("hello, segment")}},
		{"data_bundle", h, &Bundle{T: Data, Msgs: [][]byte{[]byte("one"), []byte("two"), {}}}},
		{"data_retransmit", hRetx, &Payload{T: Data, Data: []byte("again")}},
		{"data_auth", hAuth, &Payload{T: Data, Data: []byte("signed")}},
		{"ack", h, &Empty{T: Ack}},
		{"nack", h, &NackBody{Target: 1, Ranges: []Range{{5, 7}, {9, 9}, {0xfffffffe, 1}}}},
		{"join", hJoin, &JoinBody{Requested: NoMember, Window: 16, MTU: 1500, Nonce: 0x0102030405060708, ConfigHash: 0xdeadbeefcafef00d}},
		{"welcome", hNoAcks, &WelcomeBody{Nonce: 0x0102030405060708, Assigned: 4, Members: 8, ConfigHash: 0xdeadbeefcafef00d}},
		{"start", hNoAcks, &StartBody{Members: []MemberInfo{{0, [6]byte{2, 0, 0, 0, 0, 1}, 1}, {1, [6]byte{2, 0, 0, 0, 0, 2}, 9}}}},
		{"leave", h, &Empty{T: Leave}},
		{"heartbeat", h, &Empty{T: Heartbeat}},
		{"seq_request", h, &Payload{T: SeqRequest, Data: []byte("order me")}},
		{"seq_request_bundle", h, &Bundle{T: SeqRequest, Msgs: [][]byte{[]byte("a"), []byte("bc")}}},
		{"seq_data", h, &SeqDataBody{Epoch: 3, Safe: 99, Held: 97, UID: uid, Data: []byte("ordered")}},
		{"seq_accept", h, &SeqAcceptBody{Epoch: 3, Safe: 98, Held: 96, Entries: []AcceptEntry{{Global: 100, UID: uid}, {Global: 101, UID: UID{1, 1, 7}}}}},
		{"seq_status_request", hNoAcks, &StatusBody{T: SeqStatusRequest, Epoch: 3, Delivered: 101, Safe: 100, Held: 95}},
		{"seq_status_reply", h, &StatusBody{T: SeqStatusReply, Epoch: 3, Delivered: 99}},
		{"seq_retransmit", hNoAcks, &RetransmitBody{Epoch: 3, Ranges: []Range{{90, 95}}}},
		{"seq_election", hNoAcks, &ElectionBody{Epoch: 4, Phase: ElectionVote, Candidate: 1, LastGlobal: 101}},
		{"seq_member", h, &SeqMemberBody{Epoch: 3, Safe: 99, Held: 97, Change: MemberRemoved, Reason: ReasonSilent, Member: 2, Incarnation: 0x01020304}},
		{"view_join", hViewJoin, &ViewJoinBody{Requested: 3, Nonce: 0x0102030405060708, ConfigHash: 0xdeadbeefcafef00d, MTU: 1500}},
		{"view_prepare", hNoAcks, &ViewPrepareBody{Next: 8, Base: 7, Members: members2}},
		{"view_flush", hNoAcks, &ViewFlushBody{Next: 8, Base: 7, Coord: 1, Sent: 42, Delivered: []Delivered{{Member: 0, Next: 17}, {Member: 2, Gone: true, Next: 5}}}},
		{"view_flush_left", hNoAcks, &ViewFlushBody{Next: 8, Base: 7, Coord: 1, Sent: 42, Delivered: []Delivered{{Member: 0, Next: 17}, {Member: 2, Gone: true, Next: 5}, {Member: 3, Gone: true, Left: true, Next: 9}}}},
		{"view_commit", hNoAcks, &ViewCommitBody{Next: 8, Base: 7, Members: members2, Cuts: []Cut{{0, 17, 0, 17}, {1, 42, 1, 40}, {2, 6, 0, 5}}, BaseCount: 3, FromBase: []MemberID{0, 1}}},
		{"view_relay", hNoAcks, &ViewRelayBody{Base: 7, Frame: relayed}},
		{"view_relay_static", hStatic, &ViewRelayBody{Base: 0, Frame: relayedStatic}},
		{"view_refuse", hNoAcks, &ViewRefuseBody{Nonce: 0x0102030405060708, Reason: RefuseConfig, ConfigHash: 0xdeadbeefcafef00d}},
		{"group_remove", hNoAcks, &GroupRemoveBody{View: 7}},
		{"view_suspect", hNoAcks, &ViewSuspectBody{Suspects: []MemberID{2, 4}}},
		{"datagram", hNoAcks, &Payload{T: Datagram, Data: []byte("at most once")}},
		{"key_mismatch", hJoin, &KeyMismatchBody{Reason: MismatchKey, Refused: ViewJoin, Fingerprint: 0x0123456789abcdef}},
		{"pcode_data", h, &PcodeDataBody{Step: 1000, Global: 77, Targets: AppendTargets(nil, 0, 1, 9), Data: []byte("round 1000")}},
		{"pcode_data_point", h, &PcodeDataBody{Step: 5, Global: 70, Stream: StreamPoint, Targets: AppendTargets(nil, 2), Data: []byte("to 2 only")}},
		{"pcode_nack", h, &PcodeNackBody{Kind: NackRequest, Target: 1, Last: 12, Step: 1001}},
		{"pcode_nack_global", h, &PcodeNackBody{Kind: NackGlobal, Target: NoMember, Last: 76}},
		{"pcode_status", h, &PcodeStatusBody{Global: 77, Echo: 5, PointBase: 0, Point: []uint32{0, 3, 0, 0}}},
		{"pcode_abort", h, &PcodeAbortBody{Reason: AbortMismatch, Member: 1, Step: 1001, Text: []byte("step 1001 got step 1002")}},
		{"file_offer", hFile, &FileOfferBody{ID: 9, Size: 3000, BlockSize: 1464, Stamp: 0x01020304, Hash: fileHash, Name: []byte("images/disk.img")}},
		{"file_offer_blake3", hFile, &FileOfferBody{ID: 9, Size: 3000, BlockSize: 1464, Stamp: 0x01020304, Name: []byte("images/disk.img"), Alg: FileHashBLAKE3}},
		{"file_data", hBlock, &FileDataBody{ID: 9, Data: []byte("block two of three")}},
		{"file_data_repair", hRepair, &FileDataBody{ID: 9, Data: []byte("again, to one receiver")}},
		{"file_end", hFile, &FileEndBody{ID: 9, Blocks: 3, SRTT: 250, Stamp: 0x01020305, Awaited: []MemberID{1, 4}}},
		{"file_end_hash", hFile, &FileEndBody{ID: 9, Blocks: 3, SRTT: 250, Stamp: 0x01020305, Awaited: []MemberID{1, 4}, Hash: fileHash}},
		{"file_status", hFile, &FileStatusBody{ID: 9, Incarnation: 7, State: FileReceiving, Credit: 256, Held: 1, Top: 3, Echo: 0x01020304, Delay: 120, Missing: []Range{{0, 0}, {2, 2}}}},
		{"file_status_failed", hFile, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileHashMismatch, Held: 3, Top: 3}},
		{"file_status_hash_alg", hFileAlg, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileHashUnknown}},
		{"file_status_declined", hFileAlg, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileDeclined, Echo: 0x01020304, Delay: 35}},
		{"file_status_no_space", hFileAlg, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileNoSpace, Credit: 256, Echo: 0x01020304, Delay: 35}},
		{"file_status_too_big", hFileAlg, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileTooBigForFS, Credit: 256, Echo: 0x01020304, Delay: 35}},
		{"file_status_bad_name", hFileAlg, &FileStatusBody{ID: 9, Incarnation: 7, State: FileFailed, Reason: FileBadName, Credit: 256, Echo: 0x01020304, Delay: 35}},
		{"file_gone", hFile, &FileGoneBody{ID: 9, Reason: FileClosed}},
	}
}

func TestGoldenVectors(t *testing.T) {
	seen := map[Type]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			h := c.h
			got, err := Append(nil, &h, c.body)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != Len(&h, c.body) {
				t.Fatalf("Len = %d, Append wrote %d", Len(&h, c.body), len(got))
			}
			path := filepath.Join("testdata", "golden", c.name+".hex")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(hexDump(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := readHex(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from %s:\n got %x\nwant %x", path, got, want)
			}
			v, err := ParseGroup(want, h.Group)
			if err != nil {
				t.Fatalf("golden vector does not parse: %v", err)
			}
			seen[v.Type()] = true
			if v.Type() != c.body.FrameType() || v.Seq() != h.Seq || v.Sender() != h.Sender || v.Incarnation() != h.Incarnation || v.AckCount() != len(h.Acks) {
				t.Fatalf("header fields differ: %+v", v.Header())
			}
			for i, a := range h.Acks {
				if got, ok := v.AckFor(h.AckBase + MemberID(i)); !ok || got != a {
					t.Fatalf("ack %d = %d,%v want %d", i, got, ok, a)
				}
			}
			assertRoundTrip(t, want)
		})
	}
	for _, ty := range Types {
		if !seen[ty] {
			t.Errorf("frame type %v has no golden vector", ty)
		}
	}
}

// hexDump writes 16 bytes a line so vectors review well in diffs.
func hexDump(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		end := min(i+16, len(b))
		sb.WriteString(hex.EncodeToString(b[i:end]))
		sb.WriteByte('\n')
	}
	return sb.String()
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./frame -run Golden -update` to create it)", err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// assertRoundTrip checks decode→encode→decode: the re-encoded frame is
// byte-identical to the parsed one and parses to the same view.
func assertRoundTrip(t testing.TB, b []byte) {
	t.Helper()
	v, err := Parse(b)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	h, body := v.Decode()
	if body == nil {
		t.Fatalf("Decode returned no body for type %v", v.Type())
	}
	if alg, tag, ok := v.Auth(); ok {
		key, counter := v.AuthKey()
		h.Auth = fixedAuth{alg: alg, tag: append([]byte{}, tag...), key: key, counter: counter}
	}
	again, err := Append(nil, &h, body)
	if err != nil {
		t.Fatalf("re-encode of a parsed frame failed: %v", err)
	}
	if !bytes.Equal(again, v) {
		t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", again, []byte(v))
	}
	if _, err := Parse(again); err != nil {
		t.Fatalf("re-encoded frame does not parse: %v", err)
	}
}

// reseal fixes the CRC after a test edits a frame, so the edit reaches
// the check it is aimed at.
func reseal(b []byte) []byte {
	n := int(binary.BigEndian.Uint16(b[offLength:]))
	if n > len(b) || n < CRCLen {
		return b
	}
	binary.BigEndian.PutUint32(b[n-CRCLen:], crc32.Checksum(b[:n-CRCLen], castagnoli))
	return b
}

func TestDecodeErrors(t *testing.T) {
	valid := func() []byte {
		h := baseHeader()
		b, _ := Append(nil, &h, &NackBody{Target: 1, Ranges: []Range{{5, 7}}})
		return b
	}
	cases := []struct {
		name  string
		edit  func([]byte) []byte
		kind  error
		field string
		text  string
	}{
		{"short", func(b []byte) []byte { return b[:10] }, ErrShort, "header", "10 bytes, need at least 32"},
		{"version", func(b []byte) []byte { b[0] = 2; return reseal(b) }, ErrVersion, "version", "version 2, this build speaks 4"},
		{"type", func(b []byte) []byte { b[1] = 0x7f; return reseal(b) }, ErrType, "type", "type 0x7f"},
		{"critical flag", func(b []byte) []byte { b[3] |= 0x80; return reseal(b) }, ErrFlags, "flags", "0x0080"},
		{"bundle flag on nack", func(b []byte) []byte { b[3] |= byte(FlagBundle); return reseal(b) }, ErrFlags, "flags", "bundle flag on a Nack frame"},
		{"length too long", func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], uint16(len(b)+1)); return b }, ErrLength, "length", "frame has"},
		{"length too short", func(b []byte) []byte { binary.BigEndian.PutUint16(b[4:], 3); return b }, ErrLength, "length", "length field 3"},
		{"ack count", func(b []byte) []byte { binary.BigEndian.PutUint16(b[26:], 500); return reseal(b) }, ErrAckVector, "ack_count", "500 entries"},
		{"ack base", func(b []byte) []byte { binary.BigEndian.PutUint16(b[24:], 0xfffe); return reseal(b) }, ErrAckVector, "ack_base", "exceed the id space"},
		{"crc", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrChecksum, "crc32c", "frame says"},
		{"payload bit flip", func(b []byte) []byte { b[HeaderLen] ^= 0x10; return b }, ErrChecksum, "crc32c", ""},
		{"nack ranges", func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[HeaderLen+16+2:], 2)
			return reseal(b)
		}, ErrBody, "nack.ranges", "2 ranges need 18 bytes, body has 10"},
		{"nack range backwards", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[HeaderLen+16+4:], 9)
			return reseal(b)
		}, ErrBody, "nack.ranges", "last before first"},
		{"auth flag without room", func(b []byte) []byte {
			h := baseHeader()
			h.Acks = nil
			b, _ = Append(nil, &h, &Empty{T: Ack})
			b[3] |= byte(FlagAuth)
			return reseal(b)
		}, ErrAuth, "auth", "no room"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.edit(valid()))
			if !errors.Is(err, c.kind) {
				t.Fatalf("err = %v, want kind %v", err, c.kind)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Field != c.field {
				t.Fatalf("err = %#v, want field %q", err, c.field)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %q does not say %q", err, c.text)
			}
			// ParseNoCRC makes every check but the CRC's, with the
			// same error.
			b := c.edit(valid())
			v, nerr := ParseNoCRC(b)
			if c.kind == ErrChecksum {
				if nerr != nil || len(v) != len(b) || v.Type() != Nack {
					t.Fatalf("ParseNoCRC: %v, %d bytes, want the %d-byte Nack", nerr, len(v), len(b))
				}
				return
			}
			if nerr == nil || nerr.Error() != err.Error() {
				t.Fatalf("ParseNoCRC: err = %v, want Parse's %v", nerr, err)
			}
		})
	}
}

func TestParseGroupNoCRC(t *testing.T) {
	h := baseHeader()
	b, _ := Append(nil, &h, &Empty{T: Heartbeat})
	b[len(b)-1] ^= 1
	if _, err := ParseGroup(b, h.Group); !errors.Is(err, ErrChecksum) {
		t.Fatalf("ParseGroup of a bad CRC: err = %v", err)
	}
	if v, err := ParseGroupNoCRC(b, h.Group); err != nil || v.Type() != Heartbeat {
		t.Fatalf("ParseGroupNoCRC: %v", err)
	}
	if _, err := ParseGroupNoCRC(b, 7); !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), "group 48879, this member is in group 7") {
		t.Fatalf("ParseGroupNoCRC, another group: err = %v", err)
	}
}

// TestSeqMemberBodyErrors: a SeqMember body must name a known change, a
// reason that fits it, and a member id.
func TestSeqMemberBodyErrors(t *testing.T) {
	h := baseHeader()
	cases := []struct {
		body  SeqMemberBody
		field string
		text  string
	}{
		{SeqMemberBody{Change: 0, Reason: ReasonSilent, Member: 1}, "member.change", "change 0 (want 1 removed or 2 readmitted)"},
		{SeqMemberBody{Change: 3, Member: 1}, "member.change", "change 3"},
		{SeqMemberBody{Change: MemberRemoved, Reason: ReasonNone, Member: 1}, "member.reason", "reason 0 with change removed"},
		{SeqMemberBody{Change: MemberRemoved, Reason: 4, Member: 1}, "member.reason", "reason 4 with change removed"},
		{SeqMemberBody{Change: MemberReadmitted, Reason: ReasonNoVote, Member: 1}, "member.reason", "reason 2 with change readmitted"},
		{SeqMemberBody{Change: MemberRemoved, Reason: ReasonReplaced, Member: NoMember}, "member.member", "0xffff is reserved"},
	}
	for _, c := range cases {
		b, err := Append(nil, &h, &c.body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(b)
		var de *DecodeError
		if !errors.Is(err, ErrBody) || !errors.As(err, &de) || de.Field != c.field || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%+v: err = %v, want ErrBody in %s saying %q", c.body, err, c.field, c.text)
		}
	}
	b, _ := Append(nil, &h, &SeqMemberBody{Change: MemberReadmitted, Member: 1})
	if _, err := Parse(b[:len(b)-1]); err == nil {
		t.Fatal("truncated SeqMember parsed")
	}
	short := append([]byte{}, b...)
	binary.BigEndian.PutUint16(short[offLength:], uint16(len(b)-1))
	short = reseal(short[:len(b)-1])
	if _, err := Parse(short); !errors.Is(err, ErrBody) || !strings.Contains(err.Error(), "SeqMember body is 19 bytes, must be 20") {
		t.Fatalf("19-byte body: err = %v", err)
	}
}

func TestGroupCheck(t *testing.T) {
	h := baseHeader()
	b, _ := Append(nil, &h, &Empty{T: Heartbeat})
	if _, err := ParseGroup(b, h.Group); err != nil {
		t.Fatal(err)
	}
	_, err := ParseGroup(b, 7)
	if !errors.Is(err, ErrGroup) || !strings.Contains(err.Error(), "group 48879, this member is in group 7") {
		t.Fatalf("err = %v", err)
	}
}

func TestAdvisoryFlagsIgnoredAndKept(t *testing.T) {
	h := baseHeader()
	h.Flags = 0x8000 // an advisory bit no version defines yet
	b, err := Append(nil, &h, &Empty{T: Ack})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatalf("advisory bit rejected: %v", err)
	}
	if v.Flags()&0x8000 == 0 {
		t.Fatal("advisory bit lost")
	}
	assertRoundTrip(t, b)
}

func TestEthernetPaddingIgnored(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	b, _ := Append(nil, &h, &Empty{T: Ack})
	padded := append(append([]byte{}, b...), make([]byte, 60-len(b))...)
	v, err := Parse(padded)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != len(b) {
		t.Fatalf("view is %d bytes, want %d (padding must be dropped)", len(v), len(b))
	}
}

func TestAuthSection(t *testing.T) {
	h := baseHeader()
	a := fixedAuth{alg: 9, tag: []byte{1, 2, 3, 4}, key: 1, counter: 0x0102030405060708}
	h.Auth = a
	b, err := Append(nil, &h, &Payload{T: Data, Data: []byte("payload")})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	alg, tag, ok := v.Auth()
	if !ok || alg != 9 || !bytes.Equal(tag, a.tag) {
		t.Fatalf("auth = %d %x %v", alg, tag, ok)
	}
	if string(v.Payload()) != "payload" {
		t.Fatalf("payload = %q", v.Payload())
	}
	in := v.AuthInput(nil)
	if key, ctr := v.AuthKey(); key != 1 || ctr != 0x0102030405060708 {
		t.Fatalf("auth key %d counter %#x", key, ctr)
	}
	if len(in) != len(b)-CRCLen || !bytes.Equal(in[v.authStart()+AuthFixedLen:v.bodyStart()], make([]byte, 4)) {
		t.Fatalf("auth input must be the frame without CRC, tag zeroed: %x", in)
	}
	// The encoder's tag input is the same bytes the verifier gets.
	var got []byte
	rec := recordingAuth{fixedAuth: a, input: &got}
	h.Auth = rec
	if _, err := Append(nil, &h, &Payload{T: Data, Data: []byte("payload")}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, in) {
		t.Fatalf("encoder MACs %x, verifier would MAC %x", got, in)
	}
}

type recordingAuth struct {
	fixedAuth
	input *[]byte
}

func (r recordingAuth) AppendTag(dst, msg []byte) []byte {
	*r.input = append([]byte{}, msg...)
	return r.fixedAuth.AppendTag(dst, msg)
}

func TestMessagesIterator(t *testing.T) {
	h := baseHeader()
	msgs := [][]byte{[]byte("a"), {}, []byte("ccc")}
	b, _ := Append(nil, &h, &Bundle{T: Data, Msgs: msgs})
	v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for it := v.Messages(); ; {
		m, ok := it.Next()
		if !ok {
			break
		}
		got = append(got, m)
	}
	if len(got) != 3 || string(got[0]) != "a" || len(got[1]) != 0 || string(got[2]) != "ccc" {
		t.Fatalf("messages = %q", got)
	}
	b, _ = Append(nil, &h, &Payload{T: Data})
	v, _ = Parse(b)
	it := v.Messages()
	if m, ok := it.Next(); !ok || len(m) != 0 {
		t.Fatal("an empty Data frame carries one empty message")
	}
	if _, ok := it.Next(); ok {
		t.Fatal("only one")
	}
}

func TestMaxPayload(t *testing.T) {
	for _, mtu := range []int{MinMTU, 1500, 9000, 65535} {
		for _, members := range []int{2, 16, 64} {
			max := MaxPayload(mtu, members, 0)
			h := baseHeader()
			h.Acks = make([]uint32, members)
			b, err := Append(nil, &h, &Payload{T: Data, Data: make([]byte, max)})
			if err != nil {
				t.Fatalf("mtu %d members %d: %v", mtu, members, err)
			}
			if len(b) > mtu {
				t.Fatalf("mtu %d members %d: frame of %d bytes", mtu, members, len(b))
			}
			if mtu < 0xffff && len(b) != mtu {
				t.Fatalf("mtu %d members %d: max payload leaves %d bytes unused", mtu, members, mtu-len(b))
			}
			if _, err := Parse(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := baseHeader()
	if _, err := Append(nil, &h, &Payload{T: Data, Data: make([]byte, 70000)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
}

func TestSeqArithmeticWraps(t *testing.T) {
	if !SeqLess(0xffffffff, 0) || SeqLess(0, 0xffffffff) || SeqDiff(2, 0xfffffffe) != 4 {
		t.Fatal("serial-number arithmetic does not wrap")
	}
}

func TestEthernet(t *testing.T) {
	src := [6]byte{2, 0, 0, 0, 0, 9}
	h := baseHeader()
	b := AppendEthernet(nil, Broadcast, src, EtherType)
	b, _ = Append(b, &h, &Empty{T: Ack})
	eth, rb, err := SplitEthernet(b, EtherType)
	if err != nil || eth.Src() != src || eth.Dst() != Broadcast || eth.EtherType() != EtherType {
		t.Fatalf("%v %x", err, eth)
	}
	if _, err := Parse(rb); err != nil {
		t.Fatal(err)
	}
	// An 802.1Q tag, as a capture may keep it.
	tagged := append(append(append([]byte{}, b[:12]...), 0x81, 0x00, 0x00, 0x05), b[12:]...)
	eth, rb2, err := SplitEthernet(tagged, EtherType)
	if err != nil || !bytes.Equal(rb, rb2) || eth.EtherType() != EtherType {
		t.Fatalf("tagged: %v", err)
	}
	if _, _, err := SplitEthernet(b, 0x0800); !errors.Is(err, ErrEthernet) || !strings.Contains(err.Error(), "EtherType 0x88b5, want 0x0800") {
		t.Fatalf("err = %v", err)
	}
	if _, _, err := SplitEthernet(b[:5], EtherType); !errors.Is(err, ErrEthernet) {
		t.Fatalf("err = %v", err)
	}
}

func TestMinMTUAgreesWithLink(t *testing.T) {
	// link.MinMTU mirrors this constant (frame imports nothing of ours).
	if MaxPayload(MinMTU, 64, MaxAuthTag) < 128 {
		t.Fatalf("MinMTU %d leaves %d payload bytes at 64 members with auth", MinMTU, MaxPayload(MinMTU, 64, MaxAuthTag))
	}
}

// The hot path encodes and decodes without allocating (DESIGN.md, decision 4).
func TestZeroAllocs(t *testing.T) {
	h := baseHeader()
	h.Acks = make([]uint32, 16)
	buf := make([]byte, 0, 2048)
	payload := make([]byte, 1000)
	data := &Payload{T: Data, Data: payload}
	ack := &Empty{T: Ack}
	frame, _ := Append(nil, &h, data)
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := Append(buf[:0], &h, data)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = Append(b, &h, ack)
		v, err := ParseGroup(frame, h.Group)
		if err != nil {
			t.Fatal(err)
		}
		it := v.Messages()
		for {
			if _, ok := it.Next(); !ok {
				break
			}
		}
		_, _ = v.AckFor(3)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per encode+decode, want 0", allocs)
	}
}

func BenchmarkAppendData(b *testing.B) {
	h := baseHeader()
	h.Acks = make([]uint32, 16)
	buf := make([]byte, 0, 2048)
	data := &Payload{T: Data, Data: make([]byte, 1400)}
	b.SetBytes(1400)
	for b.Loop() {
		_, _ = Append(buf[:0], &h, data)
	}
}

func BenchmarkParse(b *testing.B) {
	h := baseHeader()
	h.Acks = make([]uint32, 16)
	frame, _ := Append(nil, &h, &Payload{T: Data, Data: make([]byte, 1400)})
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		_, _ = ParseGroup(frame, h.Group)
	}
}

// TestInsertAuth: a section inserted into a frame a core encoded without
// one gives the bytes the encoder gives with the same section.
func TestInsertAuth(t *testing.T) {
	a := fixedAuth{alg: 1, tag: []byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6}, key: 3, counter: 77}
	for _, body := range []Body{&Payload{T: Data, Data: []byte("payload")}, &Empty{T: Ack}} {
		h := baseHeader()
		plain, err := Append(nil, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		h.Auth = a
		want, err := Append(nil, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Parse(plain)
		if err != nil {
			t.Fatal(err)
		}
		got, err := InsertAuth(make([]byte, 0, 256), v, a.alg, a.key, a.counter, len(a.tag))
		if err != nil {
			t.Fatal(err)
		}
		at, n := View(got).AuthTagAt()
		copy(got[at:at+n], a.tag)
		SetCRC(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("InsertAuth gives\n%x\nthe encoder\n%x", got, want)
		}
		if _, err := InsertAuth(nil, View(want), 1, 1, 1, 16); err == nil || !strings.Contains(err.Error(), "already has") {
			t.Fatalf("inserting a second section: %v", err)
		}
	}
}

// A ViewFlush entry's flags byte is 0 (live), 1 (gone) or 3 (gone, left):
// any other value would decode as one of them and not encode back to the
// same bytes (found by FuzzBody for the gone byte before Left), and a
// sender left but not gone says two contradicting things. A Flush from
// before Left (bytes 0 and 1 only) decodes as it did.
func TestViewFlushFlagsByte(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	b, err := Append(nil, &h, &ViewFlushBody{Next: 2, Base: 1, Coord: 0, Sent: 3, Delivered: []Delivered{{Member: 0, Next: 1}, {Member: 1, Gone: true, Next: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	at := len(b) - CRCLen - deliveredLen + 2 // the second entry's flags byte
	for flags, want := range map[byte]Delivered{0: {Member: 1, Next: 2}, 1: {Member: 1, Gone: true, Next: 2}, 3: {Member: 1, Gone: true, Left: true, Next: 2}} {
		b[at] = flags
		v, err := Parse(reseal(b))
		if err != nil {
			t.Fatalf("flags %d: %v", flags, err)
		}
		if got := v.FlushDelivered().At(1); got != want {
			t.Fatalf("flags %d decode as %+v, want %+v", flags, got, want)
		}
		assertRoundTrip(t, v)
	}
	for _, flags := range []byte{2, 4, 0x81} {
		b[at] = flags
		_, err = Parse(reseal(b))
		var de *DecodeError
		if !errors.Is(err, ErrBody) || !errors.As(err, &de) || de.Field != "flush.delivered.flags" ||
			!strings.Contains(err.Error(), fmt.Sprintf("entry 1: flags are %#02x, want 0 (live), 1 (gone) or 3 (gone, left)", flags)) {
			t.Fatalf("a flags byte of %#02x: err = %v, want ErrBody in flush.delivered.flags", flags, err)
		}
	}
}

// Left implies Gone: an entry that says Left alone is encoded as gone and
// left (the flags byte 3), never as the refused 2.
func TestViewFlushLeftImpliesGone(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	b, err := Append(nil, &h, &ViewFlushBody{Next: 2, Base: 1, Delivered: []Delivered{{Member: 1, Left: true, Next: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.FlushDelivered().At(0), (Delivered{Member: 1, Gone: true, Left: true, Next: 2}); got != want {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// TestSkipCRC: a frame encoded with Header.SkipCRC is the golden vector's
// bytes with a zero CRC (the link that seals it writes the real one), and
// parses only without the CRC check.
func TestSkipCRC(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			h := c.h
			h.SkipCRC = true
			got, err := Append(nil, &h, c.body)
			if err != nil {
				t.Fatal(err)
			}
			want := readHex(t, filepath.Join("testdata", "golden", c.name+".hex"))
			if len(got) != len(want) || !bytes.Equal(got[:len(got)-CRCLen], want[:len(want)-CRCLen]) {
				t.Fatalf("SkipCRC changed more than the CRC:\n got %x\nwant %x", got, want)
			}
			if crc := View(got).CRC(); crc != 0 {
				t.Fatalf("CRC = %#08x, want 0", crc)
			}
			if _, err := Parse(got); !errors.Is(err, ErrChecksum) {
				t.Fatalf("Parse = %v, want %v", err, ErrChecksum)
			}
			SetCRC(got)
			if !bytes.Equal(got, want) {
				t.Fatalf("SetCRC of the SkipCRC frame differs from the vector")
			}
		})
	}
}

// A ViewCommit's acceptance part: the base count and a bit per member of
// the new view, the bits past the last member zero; a view of 60 members
// still fits a 1500-byte MTU.
func TestViewCommitAccept(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	var members []MemberInfo
	for i := range 9 {
		members = append(members, MemberInfo{ID: MemberID(i), MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}, Incarnation: 1})
	}
	body := &ViewCommitBody{Next: 0x301, Base: 0x201, Members: members, Cuts: []Cut{{1, 4, 1, 4}}, BaseCount: 4, FromBase: []MemberID{1, 2, 8, 12}}
	b, err := Append(nil, &h, body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	_, got := v.Decode()
	c := got.(*ViewCommitBody)
	if c.BaseCount != 4 || !slices.Equal(c.FromBase, []MemberID{1, 2, 8}) {
		t.Fatalf("decoded base count %d, from base %v; want 4, [1 2 8] (12 is no member)", c.BaseCount, c.FromBase)
	}
	b[len(b)-CRCLen-1] |= 0x01 // a bit past member 8
	_, err = Parse(reseal(b))
	var de *DecodeError
	if !errors.Is(err, ErrBody) || !errors.As(err, &de) || de.Field != "commit.accept.from_base" || !strings.Contains(err.Error(), "bits set past member 8 of 9: 0x81") {
		t.Fatalf("a stray bit: err = %v, want ErrBody in commit.accept.from_base", err)
	}
	if n := MaxViewMembers(1500); n != 60 {
		t.Fatalf("MaxViewMembers(1500) = %d, want 60", n)
	}
}

// TestViewRelayTrailing: the relayed frame must fill a ViewRelay's body.
// Parse drops bytes past a frame's length (Ethernet padding), so a byte
// after the relayed frame was accepted and lost on re-encoding (FuzzBody).
func TestViewRelayTrailing(t *testing.T) {
	h := baseHeader()
	inner, err := Append(nil, &h, &Payload{T: Data, Data: []byte("relayed")})
	if err != nil {
		t.Fatal(err)
	}
	oh := baseHeader()
	oh.Acks = nil
	b, err := Append(nil, &oh, &ViewRelayBody{Base: 7, Frame: append(bytes.Clone(inner), 0)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(b)
	var de *DecodeError
	if !errors.As(err, &de) || de.Kind != ErrBody || de.Field != "relay.frame" || de.Offset != HeaderLen+4+len(inner) ||
		!strings.Contains(err.Error(), fmt.Sprintf("relayed frame of %d bytes, 1 bytes follow it", len(inner))) {
		t.Fatalf("a relay with a byte after its frame: %v", err)
	}
}

// TestViewMembersTwice: a ViewPrepare's or ViewCommit's member list names
// each id once. A commit naming one id twice, with its from-base bit set
// for one entry only, was accepted and re-encoded with both set
// (FuzzBody).
func TestViewMembersTwice(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	twice := []MemberInfo{{1, [6]byte{2, 0, 0, 0, 0, 1}, 1}, {4, [6]byte{2, 0, 0, 0, 0, 4}, 1}, {1, [6]byte{2, 0, 0, 0, 0, 9}, 2}}
	for _, body := range []Body{
		&ViewPrepareBody{Next: 8, Base: 7, Members: twice},
		&ViewCommitBody{Next: 8, Base: 7, Members: twice, BaseCount: 1},
	} {
		b, err := Append(nil, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(b)
		var de *DecodeError
		field := map[Type]string{ViewPrepare: "prepare.members", ViewCommit: "commit.members"}[body.FrameType()]
		if !errors.As(err, &de) || de.Kind != ErrBody || de.Field != field || de.Offset != HeaderLen+8+2+2*memberLen ||
			!strings.Contains(err.Error(), "member 2 has id 1, as member 0 does") {
			t.Fatalf("%v naming member 1 twice: %v", body.FrameType(), err)
		}
	}
}

// AckShape is AckBase and AckCount in one word, as pbp compares them.
func TestViewAckShape(t *testing.T) {
	h := baseHeader()
	h.AckBase, h.Acks = 0x1234, []uint32{1, 2, 3}
	b, err := Append(nil, &h, &Empty{T: Ack})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.AckShape(), uint32(0x1234)<<16|3; got != want || got>>16 != uint32(v.AckBase()) || int(got&0xffff) != v.AckCount() {
		t.Fatalf("AckShape = %#x, want %#x (base %d, count %d)", got, want, v.AckBase(), v.AckCount())
	}
}
