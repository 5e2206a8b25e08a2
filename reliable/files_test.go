package reliable

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/filestore"
	"github.com/rbcast/rbcast/reliable/files"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// fileReports gathers a runner's reports.
type fileReports struct {
	mu   sync.Mutex
	reps []files.Report
	got  chan struct{}
}

func newFileReports() *fileReports { return &fileReports{got: make(chan struct{}, 64)} }

func (c *fileReports) add(r files.Report) {
	c.mu.Lock()
	r.Done, r.Missing = append([]frame.MemberID(nil), r.Done...), append([]files.Miss(nil), r.Missing...)
	c.reps = append(c.reps, r)
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
}

// wait waits until pred holds of the reports, or fails the test.
func (c *fileReports) wait(t *testing.T, what string, pred func([]files.Report) bool) []files.Report {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		reps := append([]files.Report(nil), c.reps...)
		c.mu.Unlock()
		if pred(reps) {
			return reps
		}
		select {
		case <-c.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: not within 30s; reports so far: %v", what, reps)
		}
	}
}

// A file sent by one runner reaches two others over a lossy simulated
// segment in real time: stored under its name with its bytes, and the
// sender's verdict names both receivers done.
func TestFilesSendsFileOverLossyLink(t *testing.T) {
	n := rtnet.New(t, 7)
	const members = 3
	var ms []frame.MemberInfo
	links := make([]*rtnet.Link, members)
	for i := range links {
		imp := testnet.Impairment{}
		if i > 0 {
			imp.Loss = 0.05 * float64(i)
		}
		links[i] = n.Attach(t, testnet.EndpointConfig{In: imp})
		ms = append(ms, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(links[i].HardwareAddr()), Incarnation: 1})
	}
	data := make([]byte, 600_000)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, members)
	cols := make([]*fileReports, members)
	runners := make([]*Files, members)
	for i := range runners {
		dirs[i] = t.TempDir()
		cfg := files.Config{Group: 99, Self: ms[i].ID, Members: ms, Rate: 20_000_000, Sink: &filestore.Dir{Root: dirs[i]}}
		r, err := StartFiles(links[i], cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		cols[i] = newFileReports()
		r.Subscribe(cols[i].add)
		runners[i] = r
	}
	s, err := filestore.OpenSource(src, "sub/data.bin")
	if err != nil {
		t.Fatal(err)
	}
	id, err := runners[0].Send(s.Outgoing(nil))
	if err != nil {
		t.Fatal(err)
	}
	reps := cols[0].wait(t, "the verdict", func(rs []files.Report) bool {
		for _, r := range rs {
			if r.Kind == files.Verdict && r.Meta.ID == id {
				return true
			}
		}
		return false
	})
	for _, r := range reps {
		if r.Kind == files.Verdict && !r.OK() {
			t.Fatalf("verdict not OK: %v", r)
		}
	}
	for i := 1; i < members; i++ {
		cols[i].wait(t, "received", func(rs []files.Report) bool { return len(rs) > 0 && rs[0].Kind == files.Received })
		got, err := os.ReadFile(filepath.Join(dirs[i], "sub", "data.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("member %d stored %d bytes that differ from the %d sent", i+1, len(got), len(data))
		}
		if st := runners[i].Stats(); st.Core.FilesReceived != 1 || st.Core.BlocksReceived == 0 {
			t.Errorf("member %d: stats %+v", i+1, st.Core)
		}
	}
	if p := runners[0].Progress(); len(p) != 1 || !p[0].Sending || p[0].State != "judged" {
		t.Errorf("sender's progress %+v, want the one file judged", p)
	}
}

// Close stops the loop, and a Send after it is refused.
func TestFilesClose(t *testing.T) {
	n := rtnet.New(t, 1)
	l := n.Attach(t, testnet.EndpointConfig{})
	ms := []frame.MemberInfo{{ID: 1, MAC: [6]byte(l.HardwareAddr()), Incarnation: 1}}
	r, err := StartFiles(l, files.Config{Group: 1, Self: 1, Members: ms}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.Send(files.Outgoing{Name: "x", Source: nopFileSource{}}); err == nil {
		t.Fatal("Send after Close succeeded")
	}
	if r.Err() != nil {
		t.Fatalf("Err after Close: %v", r.Err())
	}
}

func TestFilesBadConfig(t *testing.T) {
	n := rtnet.New(t, 1)
	l := n.Attach(t, testnet.EndpointConfig{})
	_, err := StartFiles(l, files.Config{Group: 1, Self: 5}, nil)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("Self 5 is not among the 0 Members")) {
		t.Fatalf("error %v, want one naming Self", err)
	}
}

type nopFileSource struct{}

func (nopFileSource) ReadAt(p []byte, off int64) (int, error) { return len(p), nil }
func (nopFileSource) Close() error                            { return nil }

// The runtime's pacing: a burst that lasts a wake-up at the rate, never
// less than the core's default, and a window of at most half a receive
// buffer; what a caller set stays.
func TestFilesPacing(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cfg           files.Config
		burst, window int
	}{
		{"1 GB/s at MTU 1500", files.Config{Rate: 1e9, MTU: 1500}, 1228, files.DefaultWindow},
		{"1 GB/s at MTU 9000", files.Config{Rate: 1e9, MTU: 9000}, 219, 918},
		{"the defaults", files.Config{}, 153, files.DefaultWindow},
		{"slow", files.Config{Rate: 1e6, MTU: 1500}, files.DefaultBurst, files.DefaultWindow},
		{"set by the caller", files.Config{Rate: 1e9, MTU: 9000, Burst: 7, Window: 5000}, 7, 5000},
	} {
		got := filesPacing(tc.cfg)
		if got.Burst != tc.burst || got.Window != tc.window {
			t.Errorf("%s: Burst %d, Window %d; want %d, %d", tc.name, got.Burst, got.Window, tc.burst, tc.window)
		}
	}
}
