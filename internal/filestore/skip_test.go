package filestore

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/clock"
	"github.com/rbcast/rbcast/reliable/files"
)

// TestSendAgainSkipsPass: a file sent a second time to two receivers that
// both stored it (on disk, with their records) is not multicast again:
// the sender sends the blocks that went before the receivers' first
// reports, hashes the rest, and both report it held; nothing is written.
// RBCAST_SKIP_BYTES sets the size (4 MiB by default; the issue's
// measurement is 200 MB: RBCAST_SKIP_BYTES=200000000 go test -run
// TestSendAgainSkipsPass -v ./internal/filestore).
func TestSendAgainSkipsPass(t *testing.T) {
	size := 4 << 20
	if s := os.Getenv("RBCAST_SKIP_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("RBCAST_SKIP_BYTES=%q: want a positive number of bytes", s)
		}
		size = n
	}
	src := t.TempDir()
	dsts := []string{t.TempDir(), t.TempDir()}
	data := randomBytes(size, 20)
	path := filepath.Join(src, "disk.img")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	members := []frame.MemberInfo{{ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Incarnation: 1},
		{ID: 2, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Incarnation: 1}, {ID: 3, MAC: [6]byte{2, 0, 0, 0, 0, 3}, Incarnation: 1}}
	type run struct {
		sent, skipped, repaired, received uint64
		held                              int
		wall                              time.Duration
	}
	send := func() run {
		t.Helper()
		start := time.Now()
		s, err := OpenSourceHashLater(path, "disk.img")
		if err != nil {
			t.Fatal(err)
		}
		cores := make([]*files.Core, 3)
		for i := range cores {
			var sink files.Sink
			if i > 0 {
				sink = &Dir{Root: dsts[i-1]}
			}
			if cores[i], err = files.New(files.Config{Group: 3, Self: members[i].ID, Members: members, Sink: sink, Rate: 1 << 30}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cores[0].Send(1, s.Outgoing(nil)); err != nil {
			t.Fatal(err)
		}
		var verdict *files.Report
		var out run
		now := clock.Time(1)
		for i := 0; verdict == nil; i++ {
			if i == 10_000_000 {
				t.Fatal("no verdict")
			}
			now += clock.Time(10 * clock.Microsecond)
			for i, c := range cores {
				c.Tick(now)
				for _, f := range c.Ready().Frames {
					e, body, _ := frame.SplitEthernet(f, frame.EtherType)
					v, err := frame.ParseGroup(body, 3)
					if err != nil {
						t.Fatal(err)
					}
					for j, to := range cores {
						if j != i && (e.Dst() == members[j].MAC || e.Dst() == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
							to.Step(now, members[i].MAC, e.Dst(), v)
						}
					}
				}
				for _, x := range c.Reports() {
					switch {
					case x.Kind == files.Verdict:
						verdict = &x
					case x.Kind == files.Received && x.Held:
						out.held++
					}
				}
				c.Advance()
			}
		}
		out.wall = time.Since(start)
		if !verdict.OK() || len(verdict.Done) != 2 {
			t.Fatalf("verdict %v", verdict)
		}
		st := cores[0].Stats().Detail.(files.Stats)
		out.sent, out.skipped, out.repaired = st.BlocksSent, st.BlocksSkipped, st.BlocksRepaired
		for _, c := range cores[1:] {
			out.received += c.Stats().Detail.(files.Stats).BlocksReceived
		}
		return out
	}
	first := send()
	blocks := uint64(frame.FileBlocks(uint64(size), 1464))
	if first.sent != blocks || first.skipped != 0 || first.held != 0 {
		t.Fatalf("first send: %+v, want the whole pass of %d blocks", first, blocks)
	}
	again := send()
	t.Logf("%d bytes, %d blocks: first send %v, %d blocks sent; again %v, %d blocks sent, %d skipped, %d repaired, %d received, %d held",
		size, blocks, first.wall.Round(time.Millisecond), first.sent, again.wall.Round(time.Millisecond), again.sent, again.skipped, again.repaired, again.received, again.held)
	if again.held != 2 || again.received != 0 || again.repaired != 0 || again.sent > 64 || again.sent+again.skipped != blocks {
		t.Fatalf("sent again: %+v, want both held, at most the first burst sent and the rest skipped", again)
	}
	for _, d := range dsts {
		if got, err := os.ReadFile(filepath.Join(d, "disk.img")); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s holds %d bytes (%v), not the file", d, len(got), err)
		}
	}
}
