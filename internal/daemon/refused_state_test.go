package daemon

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// Status names a receiver that refused a file "refused" for every
// refusal at the offer, those of 2026-12-01 included (12: larger than
// its file system allows; 13: a name not a local file path there), not
// "failed".
func TestReceiverStateRefused(t *testing.T) {
	for c, want := range map[reliable.FileCause]string{
		reliable.FileCause(frame.FileStorage):     "failed",
		reliable.FileCauseDeclined:                "declined",
		reliable.FileCause(frame.FileOverMTU):     "refused",
		reliable.FileCause(frame.FileNoSpace):     "refused",
		reliable.FileCause(frame.FileTooBigForFS): "refused",
		reliable.FileCause(frame.FileBadName):     "refused",
	} {
		if got := receiverState(reliable.FileReceiverProgress{Member: 2, State: frame.FileFailed, Cause: c}); got != want {
			t.Errorf("a receiver failed for %v: status says %q, want %q", c, got, want)
		}
	}
}
