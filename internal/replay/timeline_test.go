package replay

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestDetailsSeqV3 checks that the timeline shows the fields wire formats
// v2 and v3 added to sequencer bodies: the safe and all-held cursors of
// SeqData, SeqAccept and SeqStatusRequest, and a status request's second
// field as the highest global sequenced (a status reply's is the member's
// delivered cursor).
func TestDetailsSeqV3(t *testing.T) {
	uid := frame.UID{Origin: 2, Incarnation: 9, Seq: 5}
	for _, tc := range []struct {
		body frame.Body
		want string
	}{
		{&frame.SeqDataBody{Epoch: 3, Safe: 41, Held: 38, UID: uid, Data: []byte("hello")}, "g7 epoch 3 safe 41 held 38 req 2#5 5B"},
		{&frame.SeqAcceptBody{Epoch: 3, Safe: 42, Held: 39, Entries: []frame.AcceptEntry{{Global: 50, UID: uid}}}, "g7 epoch 3 safe 42 held 39 1 accepts 50=2#5"},
		{&frame.StatusBody{T: frame.SeqStatusRequest, Epoch: 3, Delivered: 60, Safe: 43, Held: 40}, "g7 epoch 3 sequenced 60 safe 43 held 40"},
		{&frame.StatusBody{T: frame.SeqStatusReply, Epoch: 3, Delivered: 44}, "g7 epoch 3 delivered 44"},
		{&frame.SeqMemberBody{Epoch: 3, Safe: 61, Held: 59, Change: frame.MemberRemoved, Reason: frame.ReasonSilent, Member: 4, Incarnation: 2}, "g7 epoch 3 safe 61 held 59 member 4.2 removed (silent past the failure timeout)"},
	} {
		b, err := frame.Append(nil, &frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: 60, Acks: []uint32{44, 45}}, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		v, err := frame.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := Details(v), "acks@0=[44 45] "+tc.want; got != want {
			t.Errorf("%v: Details = %q, want %q", tc.body.FrameType(), got, want)
		}
	}
}
