package files

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
)

// declineSink declines every file (an rbcastd with no recvfile client and
// no -inbox).
type declineSink struct{ opened int }

func (s *declineSink) Open(Meta) (SinkFile, []frame.Range, error) {
	s.opened++
	return nil, nil, ErrDeclined
}

// A receiver whose sink declines a file says so to its sender, once at
// the offer and again to a FileEnd that still awaits it (its report was
// lost), never faster than MinTimer; nothing else, and no block is
// taken. Its driver gets no report.
func TestDeclinedReported(t *testing.T) {
	sink := &declineSink{}
	r := newCore(t, 2, sink, nil)
	if err := r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 77, Name: []byte("f")})); err != nil {
		t.Fatal(err)
	}
	if rep := r.Reports(); len(rep) != 0 {
		t.Fatalf("reports %v, want none (declined is not incomplete)", rep)
	}
	dsts, vs := sent(t, r)
	if len(vs) != 1 || dsts[0] != macA || vs[0].Type() != frame.FileStatus {
		t.Fatalf("sent %v to %v, want one report to the sender", vs, dsts)
	}
	if st := vs[0].FileStatus(); st.State != frame.FileFailed || st.Reason != frame.FileDeclined || st.ID != 4 || st.Incarnation != 11 || st.Echo != 77 {
		t.Fatalf("report %+v, want failed, declined, echoing the offer's stamp", st)
	}
	if sink.opened != 1 || r.stats.FilesDeclined != 1 {
		t.Fatalf("the sink was asked %d times, %d files declined; want 1, 1", sink.opened, r.stats.FilesDeclined)
	}
	// Blocks and a FileEnd that does not await it: silence.
	r.Step(20, macA, macB, encode(t, 1, 11, 1, 0, &frame.FileDataBody{ID: 4, Data: make([]byte, 10)}))
	r.Step(Time(Millisecond), macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 10, Stamp: 78, Awaited: []frame.MemberID{3}}))
	r.Tick(Time(Second))
	if _, vs := sent(t, r); len(vs) != 0 || sink.opened != 1 {
		t.Fatalf("after a block and a FileEnd awaiting another member: sent %v, sink asked %d times", frameTypes(vs), sink.opened)
	}
	// A FileEnd awaiting it: the report again, with the FileEnd's stamp.
	r.Step(Time(Second)+1, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 10, Stamp: 79, Awaited: []frame.MemberID{2}}))
	_, vs = sent(t, r)
	if len(vs) != 1 || vs[0].FileStatus().Reason != frame.FileDeclined || vs[0].FileStatus().Echo != 79 {
		t.Fatalf("to a FileEnd awaiting it: sent %v, want the declined report again", frameTypes(vs))
	}
	// Another within MinTimer: not answered.
	r.Step(Time(Second)+2, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: 10, Stamp: 80, Awaited: []frame.MemberID{2}}))
	if _, vs := sent(t, r); len(vs) != 0 {
		t.Fatalf("a second FileEnd within MinTimer: sent %v", frameTypes(vs))
	}
}

// A sender told that a receiver declined its file names it so in the
// verdict at the end of the pass, without waiting for the failure
// timeout.
func TestDeclinedVerdictAtOnce(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2] })
	data := make([]byte, 100)
	id, err := s.Send(2, Outgoing{Name: "x", Size: 100, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
	if err != nil {
		t.Fatal(err)
	}
	s.Tick(3)
	sent(t, s)
	s.Step(4, macB, macA, encode(t, 2, 22, 1, frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileFailed, Reason: frame.FileDeclined}))
	var verdicts []Report
	now := Time(5)
	for ; len(verdicts) == 0 && now < Time(s.cfg.FailureTimeout); now += Time(Millisecond) {
		s.Tick(now)
		verdicts = append(verdicts, s.Reports()...)
		sent(t, s)
	}
	if len(verdicts) != 1 || len(verdicts[0].Done) != 0 || len(verdicts[0].Missing) != 1 || verdicts[0].Missing[0] != (Miss{Member: 2, Cause: CauseDeclined, Blocks: 10}) ||
		!strings.Contains(verdicts[0].String(), "member 2 not done (declined by the receiver") {
		t.Fatalf("verdicts %v by %v, want member 2 named declined", verdicts, now)
	}
	if now > Time(100*Millisecond) {
		t.Fatalf("the verdict came at %v, want it at the end of the pass", Duration(now))
	}
}

// On the simulated segment, one of three receivers declines the file (its
// sink: no recvfile client and no -inbox): the verdict names it declined
// and comes as soon as the other two hold the file, in the time the same
// file takes when that member receives it too, not after the failure
// timeout; the other two hold it.
func TestSimDeclinedReceiver(t *testing.T) {
	files := shapeFiles(rand.New(rand.NewPCG(1, 4)), 1, 2<<20)
	run := func(decline int, loss map[int]float64) (*simRun, *simFile) {
		f := &simFile{name: files[0].name, data: files[0].data, hash: files[0].hash}
		sc := &scenario{seed: 1, n: 4, link: simtest.Link{MTU: 1500}, files: [][]*simFile{{f}}, senders: 1,
			crash: map[int][2]time.Duration{}, late: map[int]time.Duration{}, ghost: -1, refuse: -1, decline: decline, rate: shapeRate, inLoss: loss}
		s, err := runSim(t, sc, nil)
		if err != nil {
			t.Fatalf("%v\n%v", err, sc)
		}
		if f.verdict == nil {
			t.Fatalf("no verdict\n%v", sc)
		}
		return s, f
	}
	for _, loss := range []map[int]float64{nil, {1: 0.05, 2: 0.05, 3: 0.05}} {
		_, all := run(0, loss)
		s, f := run(3, loss)
		with, without := f.endAt.Sub(s.start), all.endAt.Sub(s.start)
		t.Logf("loss %v: verdict after %v with member 3 declining, %v with it receiving", loss, with, without)
		blocks := uint32(frame.FileBlocks(uint64(len(f.data)), uint32(s.nodes[0].core.cfg.BlockSize)))
		if v := f.verdict; len(v.Missing) != 1 || v.Missing[0] != (Miss{Member: 3, Cause: CauseDeclined, Blocks: blocks}) || !slices.Equal(v.Done, []frame.MemberID{1, 2}) {
			t.Fatalf("loss %v: verdict %v, want members 1 and 2 done, member 3 declined", loss, v)
		}
		if fo := Duration(s.nodes[0].core.cfg.FailureTimeout); with >= time.Duration(fo) || with > without*11/10+time.Millisecond {
			t.Fatalf("loss %v: the verdict took %v with a member declining, %v without (failure timeout %v)", loss, with, without, time.Duration(fo))
		}
		if st := s.nodes[3].core.stats; st.FilesDeclined != 1 || st.BlocksReceived != 0 || len(s.nodes[3].sink.commits) != 0 {
			t.Fatalf("loss %v: the declining member's stats %+v, %d files stored", loss, st, len(s.nodes[3].sink.commits))
		}
	}
}
