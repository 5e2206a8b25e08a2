package replay

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// viewsRun is a group that changes (reliable.Config.Views) on the
// simulator, every endpoint wrapped by capture.Wrap into one pcapng file.
type viewsRun struct {
	path  string
	views []reliable.ViewInfo // every view installed anywhere, by id
}

// runViews founds a group of three on a lossy simulated segment, lets a
// fourth join, crashes one member and restarts it with a new incarnation,
// every member sending all the while; the online invariant checks must
// find nothing.
func runViews(t *testing.T, path string, seed uint64, loss float64) *viewsRun {
	t.Helper()
	run := &viewsRun{path: path}
	var onlineViolations []string
	inv := capture.NewInvariants(0, func(v capture.Violation) { onlineViolations = append(onlineViolations, v.String()) })
	const n = 4
	seg := newSimSegment(t, path, seed, n, loss, inv, 0)
	net, eps, links := seg.net, seg.eps, seg.links
	drivers := make([]*reliable.Driver, n)
	views := make([]*reliable.ViewInfo, n)
	start := func(i, size int, inc uint32) {
		d, err := reliable.NewDriver(links[i], reliable.Config{Group: 7, Views: true, Size: size, Incarnation: inc,
			FailureTimeout: 300 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, Logger: quietLogger(),
			OnEvent: func(ev reliable.Event) {
				if ev.Kind == reliable.ViewInstalled && ev.View != nil {
					views[i] = ev.View
					for _, v := range run.views {
						if v.ID == ev.View.ID {
							return
						}
					}
					run.views = append(run.views, *ev.View)
				}
			},
		}, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		drivers[i] = d
		eps[i].Bind(d)
	}
	sent := make([]int, n)
	// until runs the network, every live member sending, until every
	// member in live has installed one view of len(live) members.
	until := func(what string, live ...int) {
		t.Helper()
		for round := 0; round < 20000; round++ {
			same := true
			for _, i := range live {
				v := views[i]
				if v == nil || len(v.Members) != len(live) || v.ID != views[live[0]].ID {
					same = false
				}
			}
			if same && round > 200 {
				return
			}
			for _, i := range live {
				if views[i] == nil {
					continue
				}
				msg := fmt.Appendf(nil, "message %d of process %d", sent[i], i)
				if err := drivers[i].Propose(net.Now(), msg); err == nil {
					sent[i]++
				} else if !errors.Is(err, reliable.ErrWindowFull) {
					t.Fatalf("process %d: %v", i, err)
				}
			}
			net.RunFor(time.Millisecond)
		}
		t.Fatalf("%s: no common view of %d members (views %v)", what, len(live), views)
	}
	for i := range 3 {
		start(i, 3, uint32(i+1))
	}
	until("founding", 0, 1, 2)
	start(3, 1, 4)
	until("join", 0, 1, 2, 3)
	eps[1].Crash()
	until("crash", 0, 2, 3)
	eps[1].Restart()
	start(1, 1, 11)
	until("restart", 0, 1, 2, 3)
	net.RunFor(time.Second)
	seg.close(t)
	if len(onlineViolations) != 0 {
		t.Fatalf("the online invariant checks found, in a correct run:\n%s", strings.Join(onlineViolations, "\n"))
	}
	if len(run.views) < 4 {
		t.Fatalf("views %v, want at least four (founding, join, crash, restart)", run.views)
	}
	return run
}

// A real run of a group that changes holds every invariant, views'
// included; the same capture with one ViewCommit's member list changed
// shows two views with one id, and a member's Data frames in a view that
// does not list it.
func TestCheckViews(t *testing.T) {
	run := runViews(t, filepath.Join(t.TempDir(), "views.pcapng"), 41, 0.05)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	vs := Check(c, CheckOptions{})
	if err := WriteViolations(&out, c, vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) != 0 {
		t.Fatalf("violations in a correct run:\n%s", out.String())
	}
	types := map[frame.Type]int{}
	for _, r := range c.Records {
		if r.View != nil {
			types[r.View.Type()]++
		}
	}
	for _, ty := range []frame.Type{frame.ViewJoin, frame.ViewPrepare, frame.ViewFlush, frame.ViewCommit} {
		if types[ty] == 0 {
			t.Errorf("the capture holds no %v (frames by type: %v)", ty, types)
		}
	}
	t.Logf("frames by type: %v", types)

	// The commit of the view that admitted the late joiner, changed in
	// one copy: the joiner left out.
	recs := clone(c)
	var joined reliable.ViewInfo
	for _, v := range run.views {
		if len(v.Members) == 4 {
			joined = v
			break
		}
	}
	bad := 0
	for i, r := range recs {
		if r.View == nil || r.View.Type() != frame.ViewCommit || r.View.ViewNext() != joined.ID || r.Dir != DirOut {
			continue
		}
		if bad = i + 1; true {
			recs[i].Data = reencode(t, r.Data, func(h *frame.Header, b frame.Body) frame.Body {
				cb := b.(*frame.ViewCommitBody)
				cb.Members = cb.Members[:3]
				return cb
			})
			break
		}
	}
	if bad == 0 {
		t.Fatalf("no ViewCommit of view %d sent", joined.ID)
	}
	broken := writeNg(t, c, recs)
	byKind := kinds(Check(broken, CheckOptions{}))
	agree := byKind[invariant.KindViewAgreement]
	if len(agree) != 1 || !strings.Contains(agree[0].Detail, fmt.Sprintf("two views with one id: frame %d commits view %d", agree[0].Frames[0], joined.ID)) || !containsInt(agree[0].Frames, bad) {
		t.Errorf("view-agreement findings %v, want one naming frame %d and view %d", agree, bad, joined.ID)
	}
	out.Reset()
	if err := WriteViolations(&out, broken, Check(broken, CheckOptions{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "VIOLATION view-agreement [frames ") {
		t.Errorf("report:\n%s\nwant a view-agreement line with its frames", out.String())
	}
}

func containsInt(s []int, x int) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
