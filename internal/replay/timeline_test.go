package replay

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestDetailsSeqV3 checks that the timeline shows the fields wire formats
// v2 and v3 added to sequencer bodies: the safe and all-held cursors of
// SeqData, SeqAccept and SeqStatusRequest, and a status request's second
// field as the highest global sequenced (a status reply's is the member's
// delivered cursor); and a ViewFlush entry's gone and left bits.
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
		{&frame.PcodeDataBody{Step: 12, Global: 30, Targets: frame.AppendTargets(nil, 0, 9), Data: []byte("abc")}, "g7 step 12 global 30 broadcast to [0,9] 3B"},
		{&frame.PcodeNackBody{Kind: frame.NackRequest, Stream: frame.StreamPoint, Target: 2, Last: 4, Step: 13}, "g7 request nack to 2 point-to-point after 4 step 13"},
		{&frame.PcodeNackBody{Kind: frame.NackGlobal, Target: frame.NoMember, Last: 29}, "g7 global nack (global 29)"},
		{&frame.PcodeStatusBody{Global: 31, Echo: 2}, "g7 global 31 echo 2"},
		{&frame.ViewFlushBody{Next: 8, Base: 7, Coord: 1, Sent: 42, Delivered: []frame.Delivered{{Member: 0, Next: 17}, {Member: 2, Gone: true, Next: 5}, {Member: 3, Gone: true, Left: true, Next: 9}}},
			"g7 view 8 from 7 to coordinator 1 sent 42 delivered 0<17 2<5 gone 3<9 left"},
		{&frame.PcodeAbortBody{Reason: frame.AbortSilent, Member: 3, Step: 14, Text: []byte("member 3 silent")}, "g7 abort at step 14: member silent (member 3): \"member 3 silent\""},
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
