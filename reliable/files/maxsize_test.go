package files

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// An offer of more bytes than Config.MaxSize is refused as one of more
// blocks than MaxBlocks (reason 9, larger than the receiver takes),
// before the sink is asked; one of MaxSize bytes exactly goes to the sink
// (here a sink with no room, so that its refusal shows it was asked).
// MaxSize 0 is no limit.
func TestMaxSizeRefused(t *testing.T) {
	offer := frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 77, Name: []byte("f")}
	for _, c := range []struct {
		max    uint64
		reason frame.FileReason
		asked  int
	}{
		{99, frame.FileTooLarge, 0},
		{100, frame.FileNoSpace, 1},
		{0, frame.FileNoSpace, 1},
	} {
		sink := &refuseSink{err: fmt.Errorf("no room: %w", ErrNoSpace)}
		r := newCore(t, 2, sink, func(cfg *Config) { cfg.MaxSize = c.max })
		err := r.Step(10, macA, macB, encode(t, 1, 11, 0, 0, &offer))
		if c.asked == 0 && (err == nil || !strings.Contains(err.Error(), "larger than MaxSize, 99 bytes")) {
			t.Errorf("MaxSize %d: Step's error %v, want one naming MaxSize", c.max, err)
		}
		_, vs := sent(t, r)
		if len(vs) != 1 || vs[0].Type() != frame.FileStatus {
			t.Fatalf("MaxSize %d: sent %v, want one report", c.max, frameTypes(vs))
		}
		if st := vs[0].FileStatus(); st.State != frame.FileFailed || st.Reason != c.reason || sink.opened != c.asked || r.stats.FilesRefused != 1 {
			t.Errorf("MaxSize %d: report %+v, sink asked %d times, %d refused; want reason %v, asked %d", c.max, st, sink.opened, r.stats.FilesRefused, c.reason, c.asked)
		}
	}
}
