package files

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/internal/simtest"
)

// refuseSink opens no file: it returns err for every one (ErrDeclined:
// an rbcastd with no recvfile client and no -inbox; ErrNoSpace or
// ErrNameTooLong: a sink past one of its limits).
type refuseSink struct {
	err    error
	opened int
}

func (s *refuseSink) Open(Meta) (SinkFile, []frame.Range, error) {
	s.opened++
	return nil, nil, s.err
}

// A receiver that declines a file (its sink says ErrDeclined), or
// refuses it for one of its limits, the core's (blocks over its MTU,
// more than MaxBlocks) or its sink's (no room, a name too long), says so
// to the sender: once at the offer, again to a FileEnd that still awaits
// this member (its report was lost), never faster than MinTimer; nothing
// else, and no block is taken. Its driver gets no report. A sink error
// of another kind stays a storage failure.
func TestRefusalReported(t *testing.T) {
	offer := frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 77, Name: []byte("f")}
	for _, c := range []struct {
		name   string
		sink   error // the sink's error; nil: it would take the file
		edit   func(*Config)
		offer  frame.FileOfferBody
		reason frame.FileReason
		logged bool   // Step returns an error to log (the core's limits)
		asked  int    // times the sink is asked
		state  string // the transfer's Progress state
	}{
		{"declined", ErrDeclined, nil, offer, frame.FileDeclined, false, 1, "declined"},
		{"blocks over the MTU", nil, func(c *Config) { c.MTU = 576 }, frame.FileOfferBody{ID: 4, Size: 3000, BlockSize: 1464, Stamp: 77, Name: []byte("f")}, frame.FileOverMTU, true, 0, "refused: " + CauseOverMTU.String()},
		{"more than MaxBlocks", nil, func(c *Config) { c.MaxBlocks = 9 }, offer, frame.FileTooLarge, true, 0, "refused: " + CauseTooLarge.String()},
		{"no room", fmt.Errorf("filestore: 100 bytes, 10 free: %w", ErrNoSpace), nil, offer, frame.FileNoSpace, false, 1, "refused: " + CauseNoSpace.String()},
		{"name too long", fmt.Errorf("filestore: %w", ErrNameTooLong), nil, offer, frame.FileNameTooLong, false, 1, "refused: " + CauseNameTooLong.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &refuseSink{err: c.sink}
			r := newCore(t, 2, sink, c.edit)
			if err := r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &c.offer)); (err != nil) != c.logged {
				t.Fatalf("Step of the offer: error %v, want one to log %v", err, c.logged)
			}
			// A refusal is reported once to the driver (its log), with
			// the limit and what was beyond it; a decline is not.
			rep := r.Reports()
			switch {
			case c.reason == frame.FileDeclined && len(rep) != 0:
				t.Fatalf("reports %v, want none", rep)
			case c.reason != frame.FileDeclined && (len(rep) != 1 || rep[0].Kind != Refused || rep[0].Cause != Cause(c.reason) || rep[0].Meta.Name != "f" ||
				rep[0].Meta.Sender != 1 || rep[0].Err == nil || !strings.HasPrefix(rep[0].String(), `refused file 4 "f" of member 1 (incarnation 11, `+fmt.Sprint(c.offer.Size)+" bytes): "+Cause(c.reason).String()+" (")):
				t.Fatalf("reports %v, want one Refused for %v with its error", rep, Cause(c.reason))
			}
			dsts, vs := sent(t, r)
			if len(vs) != 1 || dsts[0] != macA || vs[0].Type() != frame.FileStatus {
				t.Fatalf("sent %v to %v, want one report to the sender", frameTypes(vs), dsts)
			}
			if st := vs[0].FileStatus(); st.State != frame.FileFailed || st.Reason != c.reason || st.ID != 4 || st.Incarnation != 11 || st.Echo != 77 || st.Held != 0 || st.Top != 0 {
				t.Fatalf("report %+v, want failed for reason %v, echoing the offer's stamp", st, c.reason)
			}
			declined, refused := 0, 1
			if c.reason == frame.FileDeclined {
				declined, refused = 1, 0
			}
			if sink.opened != c.asked || r.stats.FilesRefused != uint64(refused) || r.stats.FilesDeclined != uint64(declined) || r.stats.FilesIncomplete != 0 {
				t.Fatalf("the sink was asked %d times (want %d); stats %+v", sink.opened, c.asked, r.stats)
			}
			if p := r.Progress(); len(p) != 1 || p[0].State != c.state {
				t.Fatalf("progress %+v, want %s", p, c.state)
			}
			// Blocks and a FileEnd that does not await it: silence.
			r.Step(20, macA, macB, encode(t, 1, 11, 1, 0, &frame.FileDataBody{ID: 4, Data: make([]byte, 10)}))
			r.Step(Time(Millisecond), macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: uint32(c.offer.Blocks()), Stamp: 78, Awaited: []frame.MemberID{3}}))
			r.Tick(Time(Second))
			if rep := r.Reports(); len(rep) != 0 {
				t.Fatalf("reports %v after the offer's, want none", rep)
			}
			if _, vs := sent(t, r); len(vs) != 0 || r.stats.BlocksReceived != 0 || sink.opened != c.asked {
				t.Fatalf("after a block and a FileEnd awaiting another member: sent %v, %d blocks taken, sink asked %d times", frameTypes(vs), r.stats.BlocksReceived, sink.opened)
			}
			// A FileEnd awaiting it: the report again, with the FileEnd's stamp.
			r.Step(Time(Second)+1, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: uint32(c.offer.Blocks()), Stamp: 79, Awaited: []frame.MemberID{2}}))
			if _, vs = sent(t, r); len(vs) != 1 || vs[0].FileStatus().Reason != c.reason || vs[0].FileStatus().Echo != 79 {
				t.Fatalf("to a FileEnd awaiting it: sent %v, want the report again", frameTypes(vs))
			}
			// Another within MinTimer: not answered.
			r.Step(Time(Second)+2, macA, macB, encode(t, 1, 11, 0, 0, &frame.FileEndBody{ID: 4, Blocks: uint32(c.offer.Blocks()), Stamp: 80, Awaited: []frame.MemberID{2}}))
			if _, vs := sent(t, r); len(vs) != 0 {
				t.Fatalf("a second FileEnd within MinTimer: sent %v", frameTypes(vs))
			}
		})
	}
	// Any other error of the sink is a storage failure, as before.
	r := newCore(t, 2, &refuseSink{err: fmt.Errorf("disk on fire")}, nil)
	r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &offer))
	if _, vs := sent(t, r); len(vs) != 1 || vs[0].FileStatus().Reason != frame.FileStorage || r.stats.FilesRefused != 0 {
		t.Fatalf("a sink's other error: sent %v, refused %d; want a storage failure", frameTypes(vs), r.stats.FilesRefused)
	}
}

// A sender told that a receiver declined its file, or refused it for a
// limit, names it so in its verdict at the end of the pass, without
// waiting for the failure timeout; its progress shows the receiver
// failed with that cause.
func TestRefusalVerdictAtOnce(t *testing.T) {
	for _, c := range []struct {
		name   string
		reason frame.FileReason
		cause  Cause
		text   string // in the verdict's String
	}{
		{"declined", frame.FileDeclined, CauseDeclined, "member 2 not done (declined by the receiver"},
		{"no room", frame.FileNoSpace, CauseNoSpace, "member 2 not done (no room on the receiver's disk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2] })
			data := make([]byte, 100)
			id, err := s.Send(2, Outgoing{Name: "x", Size: 100, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
			if err != nil {
				t.Fatal(err)
			}
			s.Tick(3)
			sent(t, s)
			s.Step(4, macB, macA, encode(t, 2, 22, 1, frame.FlagHashAlg, &frame.FileStatusBody{ID: id, Incarnation: 11, State: frame.FileFailed, Reason: c.reason}))
			if p := s.Progress(); len(p) != 1 || len(p[0].Receivers) != 1 || p[0].Receivers[0].State != frame.FileFailed || p[0].Receivers[0].Cause != c.cause {
				t.Fatalf("progress %+v, want member 2 failed for %v", p, c.cause)
			}
			var verdicts []Report
			now := Time(5)
			for ; len(verdicts) == 0 && now < Time(s.cfg.FailureTimeout); now += Time(Millisecond) {
				s.Tick(now)
				verdicts = append(verdicts, s.Reports()...)
				sent(t, s)
			}
			if len(verdicts) != 1 || len(verdicts[0].Done) != 0 || len(verdicts[0].Missing) != 1 || verdicts[0].Missing[0] != (Miss{Member: 2, Cause: c.cause, Blocks: 10}) ||
				!strings.Contains(verdicts[0].String(), c.text) {
				t.Fatalf("verdicts %v by %v, want member 2 named for %v", verdicts, now, c.cause)
			}
			if now > Time(100*Millisecond) {
				t.Fatalf("the verdict came at %v, want it at the end of the pass", Duration(now))
			}
		})
	}
}

// On the simulated segment, one of three receivers declines the file
// (its sink: no recvfile client and no -inbox), or the file is beyond
// one of its limits (its sink has no room; its MaxBlocks is below the
// file's blocks): the verdict names that cause and comes as soon as the
// other two hold the file, in the time the same file takes when that
// member receives it too, not after the failure timeout; the other two
// hold it.
func TestSimRefusingReceiver(t *testing.T) {
	files := shapeFiles(rand.New(rand.NewPCG(1, 4)), 1, 2<<20)
	run := func(cause Cause, loss map[int]float64) (*simRun, *simFile) {
		f := &simFile{name: files[0].name, data: files[0].data, hash: files[0].hash}
		sc := &scenario{seed: 1, n: 4, link: simtest.Link{MTU: 1500}, files: [][]*simFile{{f}}, senders: 1,
			crash: map[int][2]time.Duration{}, late: map[int]time.Duration{}, ghost: -1, refuse: -1, rate: shapeRate, inLoss: loss}
		switch cause {
		case CauseDeclined:
			sc.decline = 3
		case CauseNoSpace, CauseTooLarge:
			sc.limit, sc.limitCause = 3, cause
		}
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
		for _, cause := range []Cause{CauseDeclined, CauseNoSpace, CauseTooLarge} {
			s, f := run(cause, loss)
			with, without := f.endAt.Sub(s.start), all.endAt.Sub(s.start)
			t.Logf("%v, loss %v: verdict after %v with member 3 refusing, %v with it receiving", cause, loss, with, without)
			blocks := uint32(s.blocks(f))
			if v := f.verdict; len(v.Missing) != 1 || v.Missing[0] != (Miss{Member: 3, Cause: cause, Blocks: blocks}) || !slices.Equal(v.Done, []frame.MemberID{1, 2}) {
				t.Fatalf("%v, loss %v: verdict %v, want members 1 and 2 done, member 3 missing for %v", cause, loss, v, cause)
			}
			if fo := Duration(s.nodes[0].core.cfg.FailureTimeout); with >= time.Duration(fo) || with > without*11/10+time.Millisecond {
				t.Fatalf("%v, loss %v: the verdict took %v with member 3 refusing, %v without (failure timeout %v)", cause, loss, with, without, time.Duration(fo))
			}
			declined, refused := uint64(0), uint64(1)
			if cause == CauseDeclined {
				declined, refused = 1, 0
			}
			if st := s.nodes[3].core.stats; st.FilesDeclined != declined || st.FilesRefused != refused || st.BlocksReceived != 0 || len(s.nodes[3].sink.commits) != 0 {
				t.Fatalf("%v, loss %v: the refusing member's stats %+v, %d files stored", cause, loss, st, len(s.nodes[3].sink.commits))
			}
		}
	}
}
