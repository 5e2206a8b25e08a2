package main

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/rbcast/rbcast/internal/privs"
)

// afterJoin collects garbage (firstGC) only once every quiet channel is
// closed or its wait is over, and not at all if run exits first: the
// first collection's page faults belong after the join, not in it.
// Automatic collection is off, so NumGC counts firstGC's alone.
func TestAfterJoinCollectsAfterTheStart(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gcs := func() uint32 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.NumGC
	}
	const never = 1 << 62 // a wait that does not end within the test
	closed := func() chan struct{} { c := make(chan struct{}); close(c); return c }

	n := gcs()
	afterJoin(privs.Dropped{}, []<-chan struct{}{make(chan struct{})}, closed(), never, log)
	if got := gcs() - n; got != 0 {
		t.Errorf("run exiting before the group started: %d collections, want none", got)
	}

	n = gcs()
	afterJoin(privs.Dropped{}, []<-chan struct{}{closed(), closed()}, make(chan struct{}), never, log)
	if got := gcs() - n; got != 1 {
		t.Errorf("the group started and the links settled: %d collections, want 1", got)
	}

	n = gcs()
	afterJoin(privs.Dropped{}, []<-chan struct{}{closed(), make(chan struct{})}, make(chan struct{}), 0, log)
	if got := gcs() - n; got != 1 {
		t.Errorf("a link that never settles, after the wait: %d collections, want 1", got)
	}
}
