package files

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// A sender with MaxOpen files open and none judged yet (its receivers
// slow to report) has nothing to do until a report or a timer judges
// one: its deadline is that timer, not now. A deadline of now had the
// runtime spin, and its link's read, given a deadline already past,
// time out before reading the reports that would judge the files: rbcastd
// sendfile of a directory of 100 small files named every receiver of
// the first 64 silent after the failure timeout, though each had stored
// the file within milliseconds.
func TestSenderAtMaxOpenWaits(t *testing.T) {
	s := newCore(t, 1, nil, func(c *Config) { c.BlockSize = 10; c.Members = members()[:2]; c.MaxOpen = 1 })
	data := make([]byte, 10)
	var ids []uint32
	for _, name := range []string{"a", "b"} {
		id, err := s.Send(2, Outgoing{Name: name, Size: 10, Hash: mustSum(frame.FileHashSHA256, data), Source: &memSource{data: data, bs: 10, fail: -1}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	now := Time(3)
	s.Tick(now)
	sent(t, s)
	if p := s.Progress(); len(p) != 2 || p[0].State == "queued" || p[1].State != "queued" {
		t.Fatalf("progress %+v, want file %d open and file %d queued", p, ids[0], ids[1])
	}
	if d := s.Deadline(); d <= now {
		t.Fatalf("deadline %d at %d with the one slot held by a file not judged: want a later timer", d, now)
	}
	// Member 2 holds the first file: it is judged, closed, and the
	// second's pass starts with that report.
	now++
	s.Step(now, macB, macA, encode(t, 2, 22, 1, frame.FlagHashAlg, &frame.FileStatusBody{ID: ids[0], Incarnation: 11, State: frame.FileDone, Held: 1, Top: 1}))
	sent(t, s)
	if p := s.Progress(); len(p) != 1 || p[0].Meta.ID != ids[1] || p[0].State == "queued" {
		t.Fatalf("progress %+v, want file %d alone open", p, ids[1])
	}
}
