package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestFileBodyErrors(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	cases := []struct {
		name  string
		body  Body
		field string
		text  string
	}{
		{"id 0", &FileGoneBody{ID: 0, Reason: FileClosed}, "file.id", "file id 0 is reserved"},
		{"block size 0", &FileOfferBody{ID: 1, Size: 10, Name: []byte("a")}, "file.offer.block_size", "block size 0"},
		{"too many blocks", &FileOfferBody{ID: 1, Size: 1 << 40, BlockSize: 1, Name: []byte("a")}, "file.offer.size", "more than 32-bit block numbers count"},
		{"no name", &FileOfferBody{ID: 1, Size: 10, BlockSize: 4}, "file.offer.name", "name of 0 bytes (want 1..4096)"},
		{"NUL in name", &FileOfferBody{ID: 1, Size: 10, BlockSize: 4, Name: []byte("a\x00b")}, "file.offer.name", "NUL byte in the name"},
		{"empty block", &FileDataBody{ID: 1}, "file.data", "FileData body is 4 bytes, needs at least 5"},
		{"awaited no member", &FileEndBody{ID: 1, Awaited: []MemberID{2, NoMember}}, "file.end.awaited", "0xffff is reserved"},
		{"end hash short", &Payload{T: FileEnd, Data: append(be.AppendUint32(nil, 1), make([]byte, 12+2+31)...)}, "file.end.awaited", "0 members need 18 bytes (50 with the file's hash), body has 49"},
		{"end hash zero", &Payload{T: FileEnd, Data: append(be.AppendUint32(nil, 1), make([]byte, 12+2+32)...)}, "file.end.hash", "a hash of all zeros"},
		{"status state", &FileStatusBody{ID: 1, State: 7}, "file.status.state", "state 7 (want 1 needs offer"},
		{"failed without reason", &FileStatusBody{ID: 1, State: FileFailed}, "file.status.reason", "reason 0 with state failed"},
		{"reason while receiving", &FileStatusBody{ID: 1, State: FileReceiving, Reason: FileStorage}, "file.status.reason", "reason 1 with state receiving"},
		{"range at top", &FileStatusBody{ID: 1, State: FileReceiving, Top: 5, Missing: []Range{{1, 5}}}, "file.status.missing", "range 0 is 1..5 (want first <= last < top 5"},
		{"range backwards", &FileStatusBody{ID: 1, State: FileReceiving, Top: 9, Missing: []Range{{4, 3}}}, "file.status.missing", "range 0 is 4..3"},
		{"ranges overlap", &FileStatusBody{ID: 1, State: FileReceiving, Top: 9, Missing: []Range{{1, 3}, {3, 4}}}, "file.status.missing", "range 1 is 3..4"},
		{"gone reason", &FileGoneBody{ID: 1, Reason: FileStorage}, "file.gone.reason", "reason 1 (want 3 closed, 4 aborted, 5 unknown)"},
		{"offer sha256 byte", &Payload{T: FileOffer, Data: offerWithAlgByte(1)}, "file.offer.hash_alg", "hash algorithm 1 (SHA-256 is an offer without the byte"},
		{"offer alg 0", &Payload{T: FileOffer, Data: offerWithAlgByte(0)}, "file.offer.hash_alg", "hash algorithm 0"},
		{"offer two bytes", &Payload{T: FileOffer, Data: append(offerWithAlgByte(2), 2)}, "file.offer.name", "name of 1 bytes (want 1..4096), body has 3 after the fixed part"},
		{"status reason 14", &FileStatusBody{ID: 1, State: FileFailed, Reason: 14}, "file.status.reason", "reason 14 with state failed (want 1..13"},
		{"no space while receiving", &FileStatusBody{ID: 1, State: FileReceiving, Reason: FileNoSpace}, "file.status.reason", "reason 10 with state receiving"},
		{"declined while receiving", &FileStatusBody{ID: 1, State: FileReceiving, Reason: FileDeclined}, "file.status.reason", "reason 7 with state receiving"},
	}
	for _, c := range cases {
		b, err := Append(nil, &h, c.body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(b)
		var de *DecodeError
		if !errors.Is(err, ErrBody) || !errors.As(err, &de) || de.Field != c.field || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: err = %v, want ErrBody in %s saying %q", c.name, err, c.field, c.text)
		}
	}
}

// offerWithAlgByte is an offer's body of a one-byte name with the
// algorithm byte a after it.
func offerWithAlgByte(a byte) []byte {
	b := (&FileOfferBody{ID: 1, Size: 10, BlockSize: 4, Name: []byte("a")}).AppendBody(nil)
	return append(b, a)
}

// An offer of a SHA-256 file is what it was before the algorithm byte
// (no byte; it decodes as SHA-256), one of a BLAKE3 file carries the
// byte after its name, and an id this build does not know decodes (the
// core refuses the file, and says why) with the name intact.
// A receiver that declines a file says so (reason 7): the report
// decodes, reads back, and names the reason.
func TestFileStatusDeclined(t *testing.T) {
	h := Header{Group: 7, Sender: 2, Incarnation: 3, Seq: 11, Flags: FlagHashAlg}
	body := &FileStatusBody{ID: 9, Incarnation: 5, State: FileFailed, Reason: FileDeclined, Credit: 256, Echo: 0x01020304, Delay: 35}
	b, err := Append(nil, &h, body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(b)
	if err != nil {
		t.Fatalf("a declined report does not parse: %v", err)
	}
	st := v.FileStatus()
	if st.State != FileFailed || st.Reason != FileDeclined || st.ID != 9 || st.Incarnation != 5 || st.Echo != 0x01020304 || st.Delay != 35 {
		t.Fatalf("read back %+v, want %+v", st, *body)
	}
	if got := st.Reason.String(); got != "declined by the receiver" {
		t.Fatalf("reason %d reads %q", st.Reason, got)
	}
	again, err := Append(nil, &h, v.decodeFile())
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("decode and encode again: %x (%v), want %x", again, err, b)
	}
}

// A receiver that refuses an offer beyond one of its limits names the
// limit (reasons 8 to 11): each report decodes, reads back, names its
// limit, and encodes again to the same bytes.
func TestFileStatusLimits(t *testing.T) {
	h := Header{Group: 7, Sender: 2, Incarnation: 3, Seq: 12, Flags: FlagHashAlg}
	for r, text := range map[FileReason]string{
		FileOverMTU:     "blocks larger than the receiver's MTU",
		FileTooLarge:    "larger than the receiver takes",
		FileNoSpace:     "no room on the receiver's disk",
		FileNameTooLong: "name too long for the receiver's file system",
		FileTooBigForFS: "larger than the receiver's file system allows",
		FileBadName:     "name not a local file path at the receiver",
	} {
		body := &FileStatusBody{ID: 9, Incarnation: 5, State: FileFailed, Reason: r, Credit: 256, Echo: 77, Delay: 3}
		b, err := Append(nil, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Parse(b)
		if err != nil {
			t.Fatalf("reason %d: the report does not parse: %v", r, err)
		}
		st := v.FileStatus()
		if st.Reason != r || st.State != FileFailed || !st.Reason.Limit() || st.Reason.String() != text {
			t.Fatalf("reason %d read back %+v (%q, limit %v), want %q", r, st, st.Reason.String(), st.Reason.Limit(), text)
		}
		if again, err := Append(nil, &h, v.decodeFile()); err != nil || !bytes.Equal(again, b) {
			t.Fatalf("reason %d: decode and encode again: %x (%v), want %x", r, again, err, b)
		}
	}
	for _, r := range []FileReason{FileStorage, FileDeclined, FileReasonMax + 1} {
		if r.Limit() {
			t.Errorf("reason %d names a limit", r)
		}
	}
}

func TestFileOfferHashAlg(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	for _, c := range []struct {
		alg, want FileHashAlg
		extra     int
	}{{0, FileHashSHA256, 0}, {FileHashSHA256, FileHashSHA256, 0}, {FileHashBLAKE3, FileHashBLAKE3, 1}, {77, 77, 1}} {
		o := &FileOfferBody{ID: 3, Size: 100, BlockSize: 10, Name: []byte("dir/f"), Alg: c.alg}
		b, err := Append(nil, &h, o)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Parse(b)
		if err != nil {
			t.Fatalf("alg %d: %v", c.alg, err)
		}
		if got := len(v.Body()) - fileOfferHead - len(o.Name); got != c.extra {
			t.Errorf("alg %d: %d bytes after the name, want %d", c.alg, got, c.extra)
		}
		if got := v.FileOffer(); got.Alg != c.want || string(got.Name) != "dir/f" {
			t.Errorf("alg %d: decoded alg %v name %q, want %v %q", c.alg, got.Alg, got.Name, c.want, "dir/f")
		}
	}
	if FileHashBLAKE3.String() != "blake3" || FileHashSHA256.String() != "sha256" || FileHashAlg(9).String() != "hash(9)" {
		t.Errorf("names: %v %v %v", FileHashSHA256, FileHashBLAKE3, FileHashAlg(9))
	}
	for _, a := range []FileHashAlg{FileHashSHA256, FileHashBLAKE3} {
		if got, ok := ParseFileHashAlg(a.String()); !ok || got != a {
			t.Errorf("ParseFileHashAlg(%q) = %v, %v", a, got, ok)
		}
	}
	if _, ok := ParseFileHashAlg("md5"); ok {
		t.Error("ParseFileHashAlg took md5")
	}
}

// A FileEnd with the file's hash after its member list decodes both; one
// without it (what a sender that put the hash in the offer sends, and
// every capture from before) decodes as before, with no hash.
func TestFileEndHash(t *testing.T) {
	h := baseHeader()
	h.Acks = nil
	var sum [FileHashLen]byte
	for i := range sum {
		sum[i] = byte(i + 1)
	}
	for _, hash := range [][FileHashLen]byte{sum, {}} {
		b, err := Append(nil, &h, &FileEndBody{ID: 5, Blocks: 9, Awaited: []MemberID{2, 3}, Hash: hash})
		if err != nil {
			t.Fatal(err)
		}
		v, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := v.FileEndHash()
		if ok != (hash != [FileHashLen]byte{}) || got != hash {
			t.Fatalf("FileEndHash = %x, %v; want %x", got, ok, hash)
		}
		if ml := v.FileAwaited(); ml.Len() != 2 || ml.At(0) != 2 || ml.At(1) != 3 {
			t.Fatalf("awaited %v with hash %x", ml, hash)
		}
		if _, body := v.Decode(); body.(*FileEndBody).Hash != hash || len(body.(*FileEndBody).Awaited) != 2 {
			t.Fatalf("Decode = %+v, want hash %x", body, hash)
		}
	}
}

// TestFileDataPlaced: a sender that reads a block straight into the frame
// buffer (Placed) sends the bytes FileDataBody encodes.
func TestFileDataPlaced(t *testing.T) {
	h := baseHeader()
	h.Acks, h.Seq = nil, 17
	block := []byte("the seventeenth block")
	want, err := Append(nil, &h, &FileDataBody{ID: 3, Data: block})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	at := PrefixLen(&h)
	copy(buf[at:cap(buf)], append(be.AppendUint32(nil, 3), block...))
	got, err := Append(buf, &h, &Placed{T: FileData, N: FileDataHead + len(block)})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Placed gives %x, %v; want %x", got, err, want)
	}
	v, err := Parse(got)
	if err != nil || v.FileID() != 3 || v.Seq() != 17 || !bytes.Equal(v.FileBlock(), block) {
		t.Fatalf("parsed %v: id %d block %d %q", err, v.FileID(), v.Seq(), v.FileBlock())
	}
}

func TestFileBlocks(t *testing.T) {
	for _, c := range []struct {
		size uint64
		bs   uint32
		want uint64
	}{{0, 1464, 0}, {1, 1464, 1}, {1464, 1464, 1}, {1465, 1464, 2}, {10, 0, 0}} {
		if got := FileBlocks(c.size, c.bs); got != c.want {
			t.Errorf("FileBlocks(%d, %d) = %d, want %d", c.size, c.bs, got, c.want)
		}
	}
}
