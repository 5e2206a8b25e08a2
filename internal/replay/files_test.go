package replay

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestDetailsFiles: the timeline shows the file frames' fields
// (reliable/files, docs/wire-format.md "Files").
func TestDetailsFiles(t *testing.T) {
	var hash [frame.FileHashLen]byte
	hash[0], hash[7] = 0xab, 0xcd
	for _, tc := range []struct {
		seq  uint32
		body frame.Body
		want string
	}{
		{0, &frame.FileOfferBody{ID: 3, Size: 3000, BlockSize: 1464, Stamp: 5, Hash: hash, Name: []byte("a/b.img")}, `g7 file 3 "a/b.img" 3000B in 3 blocks of 1464 sha256 ab000000000000cd`},
		{2, &frame.FileDataBody{ID: 3, Data: []byte("last")}, "g7 file 3 block 2 4B"},
		{0, &frame.FileOfferBody{ID: 3, Size: 3000, BlockSize: 1464, Stamp: 5, Name: []byte("a/b.img")}, `g7 file 3 "a/b.img" 3000B in 3 blocks of 1464 sha256 in FileEnd`},
		{0, &frame.FileOfferBody{ID: 3, Size: 3000, BlockSize: 1464, Stamp: 5, Name: []byte("a/b.img"), Alg: frame.FileHashBLAKE3}, `g7 file 3 "a/b.img" 3000B in 3 blocks of 1464 blake3 in FileEnd`},
		{0, &frame.FileOfferBody{ID: 3, Size: 3000, BlockSize: 1464, Stamp: 5, Hash: hash, Name: []byte("a/b.img"), Alg: 9}, `g7 file 3 "a/b.img" 3000B in 3 blocks of 1464 hash(9) ab000000000000cd`},
		{0, &frame.FileEndBody{ID: 3, Blocks: 3, SRTT: 120, Awaited: []frame.MemberID{2, 5}}, "g7 file 3 end: 3 blocks, srtt 120µs, awaiting [2 5]"},
		{0, &frame.FileEndBody{ID: 3, Blocks: 3, SRTT: 120, Awaited: []frame.MemberID{2}, Hash: hash}, "g7 file 3 end: 3 blocks, srtt 120µs, awaiting [2] hash ab000000000000cd"},
		{9, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileReceiving, Credit: 256, Held: 1, Top: 3, Missing: []frame.Range{{First: 0, Last: 0}, {First: 2, Last: 2}}}, "g7 file 3.4 receiving held 1 top 3 credit 256 missing 0,2"},
		{10, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileHashMismatch, Held: 3, Top: 3}, "g7 file 3.4 failed (hash mismatch) held 3 top 3 credit 0"},
		{11, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileHashUnknown}, "g7 file 3.4 failed (hash algorithm unknown to the receiver) held 0 top 0 credit 0"},
		{12, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileDeclined}, "g7 file 3.4 failed (declined by the receiver) held 0 top 0 credit 0"},
		{13, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileNoSpace}, "g7 file 3.4 failed (no room on the receiver's disk) held 0 top 0 credit 0"},
		{14, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileOverMTU}, "g7 file 3.4 failed (blocks larger than the receiver's MTU) held 0 top 0 credit 0"},
		{15, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileTooBigForFS}, "g7 file 3.4 failed (larger than the receiver's file system allows) held 0 top 0 credit 0"},
		{16, &frame.FileStatusBody{ID: 3, Incarnation: 4, State: frame.FileFailed, Reason: frame.FileBadName}, "g7 file 3.4 failed (name not a local file path at the receiver) held 0 top 0 credit 0"},
		{0, &frame.FileGoneBody{ID: 3, Reason: frame.FileClosed}, "g7 file 3 gone: closed by the sender"},
	} {
		b, err := frame.Append(nil, &frame.Header{Group: 7, Sender: 1, Incarnation: 4, Seq: tc.seq}, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := Details(v); got != tc.want {
			t.Errorf("%v: Details = %q, want %q", tc.body.FrameType(), got, tc.want)
		}
	}
}
