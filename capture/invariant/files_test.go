package invariant

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestFileReuse: a block of a transfer with other contents, or a
// transfer id offered for another file, is file-reuse; the same frame
// again (a repair) is not.
func TestFileReuse(t *testing.T) {
	c := New(Options{})
	check := func(seq uint32, body frame.Body) []Violation {
		b, err := frame.Append(frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 1}, frame.EtherType),
			&frame.Header{Group: 1, Sender: 1, Incarnation: 3, Seq: seq}, body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(b[frame.EthernetHeaderLen:])
		if err != nil {
			t.Fatal(err)
		}
		return c.Check(&Frame{Data: b, View: v})
	}
	offer := &frame.FileOfferBody{ID: 5, Size: 10, BlockSize: 5, Name: []byte("a")}
	for i, tc := range []struct {
		seq  uint32
		body frame.Body
		want string
	}{
		{0, offer, ""},
		{0, offer, ""},
		{0, &frame.FileDataBody{ID: 5, Data: []byte("hello")}, ""},
		{0, &frame.FileDataBody{ID: 5, Data: []byte("hello")}, ""},
		{1, &frame.FileDataBody{ID: 5, Data: []byte("world")}, ""},
		{0, &frame.FileDataBody{ID: 5, Data: []byte("HELLO")}, "member 1.3 file 5 block 0: frame 6 carries 5 bytes that differ from frame 3's"},
		{0, &frame.FileDataBody{ID: 6, Data: []byte("HELLO")}, ""},
		{0, &frame.FileOfferBody{ID: 5, Size: 10, BlockSize: 5, Name: []byte("b")}, `member 1.3 file 5: frame 8 offers "b" of 10 bytes, frame 1 offered another file under that id`},
	} {
		got := check(tc.seq, tc.body)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("frame %d: %v", i+1, got)
		case tc.want != "" && (len(got) != 1 || got[0].Kind != KindFileReuse || !strings.Contains(got[0].Detail, tc.want)):
			t.Errorf("frame %d: %v, want %s saying %q", i+1, got, KindFileReuse, tc.want)
		}
	}
}
