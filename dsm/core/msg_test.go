package core

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden")

// goldenCases is one encoded message of every type.
func goldenCases() []struct {
	name string
	b    []byte
} {
	upd := AppendUpdateHeader(nil, TypeUpdate, 0x01020304, 4)
	upd = AppendRecord(upd, 5, 2, []byte{0xa0, 0xa1, 0xa2, 0xa3, 0xb0, 0xb1, 0xb2, 0xb3})
	upd = AppendRecord(upd, 100, 1, []byte{0xc0, 0xc1, 0xc2, 0xc3})
	updb := AppendUpdateHeader(nil, TypeUpdate, 0x01020304, 4)
	updb = AppendRecord(updb, 5, 1, []byte{0xa0, 0xa1, 0xa2, 0xa3})
	updb = AppendBarrierTrailer(updb, 42, 3)
	unrel := AppendUpdateHeader(nil, TypeUnreliable, 7, 8)
	unrel = AppendRecord(unrel, 3, 1, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	return []struct {
		name string
		b    []byte
	}{
		{"segment_create", AppendSegment(nil, 7, Geometry{Locations: 1000, LocationSize: 8}, true)},
		{"segment_join", AppendSegment(nil, 7, Geometry{Locations: 1000, LocationSize: 8}, false)},
		{"update", upd},
		{"unreliable", unrel},
		{"barrier", AppendBarrier(nil, 42, 3)},
		{"lock_request", AppendLockRequest(nil, 5, 0x0102030405060708)},
		{"lock_reply", AppendLockReply(nil, 5, 3, 0x0102030405060708)},
		{"update_barrier", updb},
		{"barrier_partial", AppendBarrier(nil, 42, 3|SeqPartial)},
		{"refuse", AppendRefuse(nil, 4, 0x01020304)},
		{"confirm", AppendConfirm(nil, 0x0102)},
		{"segment_join_readonly", AppendSegmentReadOnly(nil, 7, Geometry{Locations: 1000, LocationSize: 8})},
		{"barrier_channel", AppendBarrier(nil, 42, 3|SeqChannel)},
	}
}

var allTypes = []Type{TypeSegment, TypeUpdate, TypeUnreliable, TypeBarrier, TypeLockRequest, TypeLockReply, TypeUpdateBarrier, TypeRefuse, TypeConfirm}

func TestGoldenVectors(t *testing.T) {
	seen := map[Type]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", c.name+".hex")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(hexDump(c.b)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := readHex(t, path)
			if !bytes.Equal(c.b, want) {
				t.Fatalf("encoding differs from %s:\n got %x\nwant %x", path, c.b, want)
			}
			m, err := Decode(want)
			if err != nil {
				t.Fatalf("golden vector does not decode: %v", err)
			}
			seen[m.Type] = true
			if got := m.Append(nil); !bytes.Equal(got, want) {
				t.Fatalf("re-encoded %x, want %x", got, want)
			}
		})
	}
	for _, ty := range allTypes {
		if !seen[ty] {
			t.Errorf("message type %v has no golden vector", ty)
		}
	}
}

// The decoded fields of the golden vectors, so a vector cannot decode to
// the wrong values and still round-trip.
func TestDecodeFields(t *testing.T) {
	cases := goldenCases()
	m, _ := Decode(cases[0].b)
	if m.Type != TypeSegment || m.Key != 7 || m.Geometry != (Geometry{1000, 8}) || !m.Create {
		t.Errorf("segment_create: %+v", m)
	}
	m, _ = Decode(cases[2].b)
	var recs []string
	m.Records(func(r Record) { recs = append(recs, hex.EncodeToString(r.Data)) })
	if m.Type != TypeUpdate || m.Key != 0x01020304 || m.Geometry.LocationSize != 4 || strings.Join(recs, ",") != "a0a1a2a3b0b1b2b3,c0c1c2c3" {
		t.Errorf("update: %+v records %v", m, recs)
	}
	m, _ = Decode(cases[4].b)
	if m.Type != TypeBarrier || m.ID != 42 || m.Seq != 3 {
		t.Errorf("barrier: %+v", m)
	}
	m, _ = Decode(cases[6].b)
	if m.Type != TypeLockReply || m.Lock != 5 || m.To != 3 || m.TS != 0x0102030405060708 {
		t.Errorf("lock_reply: %+v", m)
	}
	m, _ = Decode(cases[7].b)
	recs = nil
	m.Records(func(r Record) { recs = append(recs, hex.EncodeToString(r.Data)) })
	if m.Type != TypeUpdateBarrier || m.Key != 0x01020304 || m.Geometry.LocationSize != 4 || strings.Join(recs, ",") != "a0a1a2a3" || m.ID != 42 || m.Seq != 3 {
		t.Errorf("update_barrier: %+v records %v", m, recs)
	}
	m, _ = Decode(cases[8].b)
	if m.Type != TypeBarrier || m.ID != 42 || m.Seq != 3 || !m.Partial {
		t.Errorf("barrier_partial: %+v", m)
	}
	m, _ = Decode(cases[9].b)
	if m.Type != TypeRefuse || m.To != 4 || m.Crossed != 0x01020304 {
		t.Errorf("refuse: %+v", m)
	}
	m, _ = Decode(cases[10].b)
	if m.Type != TypeConfirm || m.To != 0x0102 {
		t.Errorf("confirm: %+v", m)
	}
	m, _ = Decode(cases[11].b)
	if m.Type != TypeSegment || m.Key != 7 || m.Geometry != (Geometry{1000, 8}) || m.Create || !m.ReadOnly {
		t.Errorf("segment_join_readonly: %+v", m)
	}
	if m, _ = Decode(cases[1].b); m.ReadOnly {
		t.Errorf("segment_join: %+v", m)
	}
	m, _ = Decode(AppendBarrierTrailer(bytes.Clone(cases[2].b), 42, 3|SeqPartial))
	if m.Type != TypeUpdateBarrier || m.Seq != 3 || !m.Partial {
		t.Errorf("update_barrier partial: %+v", m)
	}
	m, _ = Decode(cases[12].b)
	if m.Type != TypeBarrier || m.Seq != 3 || m.Partial || !m.ChannelBarrier {
		t.Errorf("barrier_channel: %+v", m)
	}
	m, _ = Decode(AppendBarrierTrailer(bytes.Clone(cases[2].b), 42, 3|SeqChannel))
	if m.Type != TypeUpdateBarrier || m.Seq != 3 || m.Partial || !m.ChannelBarrier {
		t.Errorf("update_barrier channel: %+v", m)
	}
}

// Bad input: the error names the field and where it is.
func TestDecodeErrors(t *testing.T) {
	upd := AppendUpdateHeader(nil, TypeUpdate, 1, 4)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "header at byte 0: 0 bytes, want at least 2"},
		{"version", []byte{2, 1}, "version at byte 0: 2, want 1"},
		{"type", []byte{1, 99}, "type at byte 1: unknown type 99"},
		{"short barrier", AppendBarrier(nil, 1, 1)[:9], "length at byte 0: Barrier message is 9 bytes, want 10"},
		{"long refuse", append(AppendRefuse(nil, 4, 2), 0), "length at byte 0: Refuse message is 9 bytes, want 8"},
		{"short confirm", AppendConfirm(nil, 4)[:3], "length at byte 0: Confirm message is 3 bytes, want 4"},
		{"barrier seq 0", AppendBarrier(nil, 1, 0), "barrier seq at byte 6: 0, want at least 1"},
		{"partial barrier seq 0", AppendBarrier(nil, 1, SeqPartial), "barrier seq at byte 6: 0, want at least 1"},
		{"segment no locations", AppendSegment(nil, 1, Geometry{0, 4}, true), "locations at byte 6: 0"},
		{"segment flags", append(AppendSegment(nil, 1, Geometry{1, 4}, true)[:SegmentLen-1], 0x82), "flags at byte 12: unknown flags 0x80"},
		{"segment created read-only", append(AppendSegment(nil, 1, Geometry{1, 4}, true)[:SegmentLen-1], 0x03), "flags at byte 12: 0x03: a creator's announcement cannot be read-only"},
		{"update no record", upd, "Update message is 8 bytes, want at least 14"},
		{"update short data", AppendRecord(bytes.Clone(upd), 0, 2, []byte{1, 2, 3, 4, 5}), "record data at byte 14: 2 locations of 4 bytes need 8 bytes, 5 left"},
		{"update count 0", AppendRecord(bytes.Clone(upd), 0, 0, nil), "record count at byte 12: 0"},
		{"update barrier short", AppendBarrierTrailer(bytes.Clone(upd), 1, 1), "UpdateBarrier message is 16 bytes, want at least 22"},
		{"update barrier seq 0", AppendBarrierTrailer(AppendRecord(bytes.Clone(upd), 0, 1, []byte{1, 2, 3, 4}), 1, 0), "barrier seq at byte 22: 0, want at least 1"},
		{"update barrier short data", AppendBarrierTrailer(AppendRecord(bytes.Clone(upd), 0, 2, []byte{1, 2, 3, 4}), 1, 1), "record data at byte 14: 2 locations of 4 bytes need 8 bytes, 4 left"},
		{"update trailing", append(AppendRecord(bytes.Clone(upd), 0, 1, []byte{1, 2, 3, 4}), 9), "record at byte 18: 1 bytes left"},
	}
	for _, c := range cases {
		_, err := Decode(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrMessage) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func hexDump(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		sb.WriteString(hex.EncodeToString(b[i:min(i+16, len(b))]))
		sb.WriteByte('\n')
	}
	return sb.String()
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./dsm/core -run Golden -update` to create it)", err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// FuzzDecode: Decode never panics; what decodes re-encodes to the same
// bytes, and its records lie inside the input.
func FuzzDecode(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if got := m.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("decode→encode changed the message:\n in %x\nout %x", b, got)
		}
		total := 0
		m.Records(func(r Record) { total += RecordHeader + len(r.Data) })
		if m.Type == TypeUpdateBarrier {
			total += BarrierTrailer
		}
		if m.Type == TypeUpdate || m.Type == TypeUnreliable || m.Type == TypeUpdateBarrier {
			if total != len(b)-UpdateHeader {
				t.Fatalf("records cover %d bytes of %d", total, len(b)-UpdateHeader)
			}
		}
	})
}

// FuzzReceive feeds arbitrary messages to a core that holds a segment:
// nothing panics, memory stays in bounds, and a rejected message changes
// no memory.
func FuzzReceive(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := New(Config{Self: 1, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 1400, MaxSegment: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Receive(2, AppendSegment(nil, 7, Geometry{Locations: 16, LocationSize: 4}, true)); err != nil {
			t.Fatal(err)
		}
		seg := c.segs[7]
		before := bytes.Clone(seg.mem)
		if err := c.Receive(3, b); err != nil && !bytes.Equal(before, seg.mem) {
			t.Fatalf("rejected message (%v) changed memory", err)
		}
	})
}

// FuzzReceiveSequence feeds a sequence of messages from several members
// (each chunk: sender byte, length byte, message) into a core that is
// waiting at a barrier and requesting a lock: no panic, a refused
// message changes no memory whatever state the core is in, and the
// outbox holds only well-formed messages no larger than MaxMessage.
func FuzzReceiveSequence(f *testing.F) {
	var seed []byte
	for i, c := range goldenCases() {
		seed = append(seed, byte(2+i%2), byte(len(c.b)))
		seed = append(seed, c.b...)
	}
	f.Add(seed)
	f.Add([]byte{2, 10, 1, 4, 0, 0, 0, 1, 0, 0, 0, 1, 3, 14, 1, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9})
	// An update whose second record runs past the segment's end: refused
	// whole, its first record not applied either.
	upd := AppendRecord(AppendRecord(AppendUpdateHeader(nil, TypeUpdate, 9, 4), 0, 1, []byte{5, 6, 7, 8}), 7, 2, make([]byte, 8))
	f.Add(append([]byte{2, byte(len(upd))}, upd...))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := New(Config{Self: 1, Members: []frame.MemberID{1, 2, 3}, MaxMessage: 200, MaxSegment: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.Create(9, Geometry{Locations: 8, LocationSize: 4})
		c.Write(s, 1, []byte{1, 2, 3, 4})
		c.EnterBarrier(1)
		c.RequestLock(1)
		for len(b) >= 2 {
			from, n := frame.MemberID(b[0]%4), int(b[1])
			b = b[2:]
			if n > len(b) {
				n = len(b)
			}
			before := bytes.Clone(s.mem)
			if err := c.Receive(from, b[:n]); err != nil && !bytes.Equal(before, s.mem) {
				t.Fatalf("refused message (%v) changed memory: % x, was % x", err, s.mem, before)
			}
			b = b[n:]
			c.BarrierPassed()
			if c.Holding(1) {
				c.Unlock(1)
			}
		}
		for {
			msg, ok := c.Next()
			if !ok {
				break
			}
			if len(msg) > 200 {
				t.Fatalf("queued %d bytes, MaxMessage 200", len(msg))
			}
			if _, err := Decode(msg); err != nil {
				t.Fatalf("queued a malformed message: %v", err)
			}
			c.Sent()
		}
	})
}
