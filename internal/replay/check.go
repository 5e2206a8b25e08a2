package replay

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
)

// CheckOptions configure Check.
type CheckOptions struct {
	// Group, when set, is the only group allowed for frames other than
	// the file frames; otherwise frames of any group but the most common
	// one are reported.
	Group *uint32
	// FilesGroup, when set, is the only group allowed for file frames
	// (types 0x40–0x4F); otherwise file frames of any group but their
	// most common one are reported. (rbcastd sends them in a group of
	// their own, -files-group.)
	FilesGroup *uint32
	// NackStormCount and NackStormWindow: more than NackStormCount Nacks
	// naming the same range (target, first, last) within NackStormWindow
	// is a storm. Zero means invariant.DefaultNackStormCount and
	// DefaultNackStormWindow.
	NackStormCount  int
	NackStormWindow time.Duration
}

// Violation is one broken invariant, with the frames involved: the type
// package invariant reports, online (capture.Invariants) and here.
type Violation = invariant.Violation

// Check verifies the protocol invariants a capture can show. Every frame
// goes, in time order, through the checker capture.Invariants runs on a
// live link (package invariant): no sequence number reused with different
// content; no member acknowledging (so delivering) a frame its own
// interface had not received, and no acknowledgement going backwards; no
// Nack storm; no frame of a foreign group or version; no corrupt frame;
// for the sequencer protocol no global number of an epoch bound to two
// messages (nor a SeqData's payload differing from its request's), no
// request numbered twice in an epoch; for a group that changes (views),
// no two views with one id, no frame of a view from a non-member, no
// process going back to an older view, nothing contradicting a commit's
// cut. Then what only the whole capture
// shows: every gap repaired by the end (per receiving interface when the
// capture has direction flags, else over the whole capture); for the
// sequencer, every global a receiver learned of received by the end
// (globals an election discarded excepted) and no delivered cursor beyond
// what the member's interface received or going back.
//
// A finding about a frame missing at an interface whose capture lost
// frames before it (pcapng epb_dropcount, which capture.Writer writes
// when its queue overflows; or a foreign capturer's isb_ifdrop) cannot be
// judged: it comes with Doubt set, and is not a violation.
// Violations come in a stable order.
func Check(c *Capture, opts CheckOptions) []Violation {
	a := analyse(c)
	co := invariant.Options{NackStormCount: opts.NackStormCount, NackStormWindow: opts.NackStormWindow}
	if group, ok := a.majorityGroup(); ok {
		co.Group, co.GroupSource = &group, "the capture's most common group"
	}
	if opts.Group != nil {
		co.Group, co.GroupSource = opts.Group, "the -group given"
	}
	// File frames (rbcastd -files) have a group of their own beside the
	// message group's, in the same capture.
	if group, ok := a.majorityFilesGroup(); ok {
		co.FilesGroup, co.FilesGroupSource = &group, "the capture's most common group of file frames"
	}
	if opts.FilesGroup != nil {
		co.FilesGroup, co.FilesGroupSource = opts.FilesGroup, "the -files-group given"
	}
	ck := invariant.New(co)
	for i := range c.Interfaces {
		intf := &c.Interfaces[i]
		ck.AddInterface(intf.Label())
		if intf.Node == "" && intf.HasStats && intf.Dropped > 0 {
			// Not ours: isb_ifdrop counts what the capturer missed
			// (ours counts the node's own ring drops, which the node
			// missed too).
			ck.LostSomewhere(i, intf.Dropped)
		}
	}
	var out []Violation
	for _, r := range a.order {
		if r.Err != nil && isForeignEtherType(r.Err) {
			continue
		}
		out = append(out, ck.Check(&invariant.Frame{N: r.N, Time: r.Time, Iface: r.Iface, Dir: r.Dir, Data: r.Data, View: r.View, Err: r.Err, Lost: r.Lost})...)
	}

	// Gaps never repaired, and implausible jumps.
	for _, vw := range a.views {
		for _, k := range sortedKeys(vw.streams) {
			st := vw.streams[k]
			for _, g := range st.gaps {
				if g.Repaired.IsZero() && a.owed(vw, k, g.Seq) {
					out = append(out, Violation{Kind: invariant.KindGap, Frames: []int{g.OpenFrame}, Time: g.Opened, Doubt: a.doubt(vw.iface, -1),
						Detail: fmt.Sprintf("at %s: seq %d of member %s, missing since frame %d, never received by the end of the capture", vw.name, g.Seq, k, g.OpenFrame)})
				}
			}
			for _, n := range st.jumps {
				out = append(out, Violation{Kind: invariant.KindImplausible, Frames: []int{n}, Doubt: a.doubt(vw.iface, n),
					Detail: fmt.Sprintf("at %s: member %s's sequence jumps more than %d past %d", vw.name, k, maxJump, st.next)})
			}
		}
	}
	out = append(out, a.seq.check(a)...)
	return out
}

// doubt is the Violation.Doubt of a finding about a frame missing at
// interface iface (-1: any) before frame n (-1: by the end): the capture
// lost frames there, and the missing one may be among them.
func (a *analysis) doubt(iface, n int) string {
	var lost uint64
	at := 0
	for i := range a.c.Interfaces {
		intf := &a.c.Interfaces[i]
		if iface >= 0 && i != iface {
			continue
		}
		if intf.Node == "" && intf.HasStats {
			lost += intf.Dropped
		}
	}
	for _, r := range a.c.Records {
		if r.Lost == 0 || (iface >= 0 && r.Iface != iface) || (n >= 0 && r.N > n) {
			continue
		}
		lost += r.Lost
		at = max(at, r.N)
	}
	if lost == 0 {
		return ""
	}
	name := "the capture's interfaces"
	if iface >= 0 {
		name = a.c.Interfaces[iface].Label()
	}
	return invariant.Doubt(name, lost, at)
}

// isForeignEtherType reports a frame of another EtherType: not ours to
// judge (tcpdump without a filter captures everything).
func isForeignEtherType(err error) bool {
	var de *frame.DecodeError
	return errors.As(err, &de) && de.Field == "ethernet.type" || errors.Is(err, errNotCarriage)
}

// maxNotJudged is how many findings of each kind WriteViolations prints
// when they are not judged.
const maxNotJudged = 10

// Judged counts the violations among vs: the findings without Doubt.
func Judged(vs []Violation) int {
	n := 0
	for _, v := range vs {
		if v.Doubt == "" {
			n++
		}
	}
	return n
}

// WriteViolations prints the violations, sorted by first frame, then the
// findings not judged (Doubt), and a total line that names what the
// capture lost.
func WriteViolations(w io.Writer, c *Capture, vs []Violation) error {
	sorted := append([]Violation(nil), vs...)
	sort.SliceStable(sorted, func(i, j int) bool { return firstFrame(sorted[i]) < firstFrame(sorted[j]) })
	ew := &errWriter{w: w}
	counts, doubts := map[string]int{}, map[string]int{}
	judged := 0
	for _, v := range sorted {
		if v.Doubt == "" {
			ew.printf("VIOLATION %s\n", v)
			counts[v.Kind]++
			judged++
		}
	}
	for _, v := range sorted {
		if v.Doubt == "" {
			continue
		}
		// A hole in the capture leaves a finding per missing frame: a
		// few of each kind say what they are.
		if doubts[v.Kind] < maxNotJudged {
			ew.printf("NOT JUDGED %s\n", v)
		}
		doubts[v.Kind]++
	}
	for _, k := range slices.Sorted(maps.Keys(doubts)) {
		if n := doubts[k]; n > maxNotJudged {
			ew.printf("NOT JUDGED %d more %s findings\n", n-maxNotJudged, k)
		}
	}
	var lost []string
	for i := range c.Interfaces {
		intf := &c.Interfaces[i]
		if intf.CaptureLost > 0 {
			lost = append(lost, fmt.Sprintf("%d at %s", intf.CaptureLost, intf.Label()))
		}
		if intf.Node == "" && intf.HasStats && intf.Dropped > 0 {
			lost = append(lost, fmt.Sprintf("%d at %s, where is not known (isb_ifdrop)", intf.Dropped, intf.Label()))
		}
	}
	switch {
	case len(vs) == 0 && len(lost) == 0:
		ew.printf("# %s: %d frames, all invariants hold\n", c.Path, len(c.Records))
	case judged == 0:
		ew.printf("# %s: %d frames, no violation", c.Path, len(c.Records))
	default:
		ew.printf("# %s: %d frames, %d violations (%s)", c.Path, len(c.Records), judged, kindList(counts))
	}
	if len(vs) > 0 || len(lost) > 0 {
		if len(lost) > 0 {
			ew.printf("; the capture lost frames (%s), so frames missing from it are not judged", strings.Join(lost, ", "))
		}
		if n := len(vs) - judged; n > 0 {
			ew.printf("; %d findings not judged (%s)", n, kindList(doubts))
		}
		ew.printf("\n")
	}
	return ew.err
}

func kindList(counts map[string]int) string {
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

func firstFrame(v Violation) int {
	if len(v.Frames) == 0 {
		return 0
	}
	return slices.Min(v.Frames)
}
