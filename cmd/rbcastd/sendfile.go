package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/filestore"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

const sendfileText = `Sends each FILE to the group's members through the daemon (a directory:
every regular file under it, recursively, named by its path from the
directory's parent, so 'sendfile photos' arrives as photos/...). The
data is multicast once at the segment's rate and repaired to whoever
lost it (docs/protocols.md, "Files (IBRMP)"); receivers store it with
'rbcastd recvfile -dir DIR' or run -inbox DIR.

The receivers waited for are -to's members, or else every member of the
group when each file's multicast ends (a member that joins later still
fetches the file, but is not waited for). The daemon opens and hashes
the files itself, as it sends them: run sendfile as the daemon's user
or root. It holds a descriptor for each file until after its verdict,
so sendfile keeps at most 256 files queued there and not yet judged,
and sends a file the daemon refuses for its bound on them again once a
place frees there: a directory of any number of files arrives whole. -hash
names the algorithm: blake3 (the default; what b3sum prints) or sha256
(what sha256sum prints). A receiver running an
rbcastd from before hash algorithms had names cannot receive a file
hashed with blake3: it is named so, and -hash sha256 reaches it.

Exits 0 only once every receiver waited for holds every file with the
right hash; otherwise 1, naming each file and each receiver that does
not hold it, and why. Prints one line per file sent: its hash as
ALG:HEX (blake3:..., sha256:...), its name, and the members that hold
it. Progress per file and receiver (bytes, rate, time left) goes to
stderr when it is a terminal.
`

func sendfileCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("sendfile", "[-socket PATH] [-to IDS] [-hash blake3|sha256] FILE...", sendfileText, stderr)
	sf.add(fs)
	toFlag := fs.String("to", "", "comma-separated member `ids` to wait for (default: every member but this one)")
	hashFlag := fs.String("hash", "blake3", "the files' hash `algorithm`: blake3 or sha256")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() == 0 {
		return usageErr(stderr, "sendfile", "no FILE given")
	}
	alg, ok := frame.ParseFileHashAlg(*hashFlag)
	if !ok {
		return usageErr(stderr, "sendfile", "-hash %q: want blake3 or sha256", *hashFlag)
	}
	to, err := parseIDs(*toFlag)
	if err != nil {
		return usageErr(stderr, "sendfile", "-to: %v", err)
	}
	paths, shown, names, err := walkFiles(fs.Args())
	if err != nil {
		return fail(stderr, "sendfile", err)
	}
	c, err := dial(&sf)
	if err != nil {
		return fail(stderr, "sendfile", err)
	}
	defer c.Close()
	if _, err := c.Hello(localapi.HelloWaitReady); err != nil {
		return fail(stderr, "sendfile", err)
	}
	if alg != frame.FileHashSHA256 && c.Version() < 4 {
		return fail(stderr, "sendfile", fmt.Errorf("-hash %v: the daemon speaks local API version %d, which hashes with sha256 only (upgrade it, or -hash sha256)", alg, c.Version()))
	}
	var prog *fileProgress
	if isTerminal(stderr) {
		prog = startFileProgress(&sf, stderr)
	}
	ok = sendFiles(c, to, uint8(alg), paths, shown, names, stdout, stderr, prog)
	prog.stop()
	if !ok {
		return exitFail
	}
	return exitOK
}

// parseIDs parses -to's comma-separated member ids.
func parseIDs(s string) ([]uint16, error) {
	if s == "" {
		return nil, nil
	}
	var ids []uint16
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || id == 0xffff {
			return nil, fmt.Errorf("%q is not a member id (0..65534)", f)
		}
		ids = append(ids, uint16(id))
	}
	return ids, nil
}

// walkFiles lists the files to send: their absolute paths as resolved,
// how messages name each (the path as typed, and the resolved one
// beside it when it is elsewhere: a symlink on the way), and their
// names.
func walkFiles(args []string) (paths, shown, names []string, err error) {
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", a, unwrapPath(err))
		}
		if !st.IsDir() && !st.Mode().IsRegular() {
			// Opening a named pipe waits for a writer: say so first.
			return nil, nil, nil, fmt.Errorf("%s: not a regular file (%s)", a, fileKind(st.Mode()))
		}
		p, given, n, err := walkAs([]string{a})
		if err != nil {
			return nil, nil, nil, walkErr(a, err)
		}
		if len(p) == 0 && st.IsDir() {
			return nil, nil, nil, fmt.Errorf("%s: no regular files under the directory", a)
		}
		for i := range p {
			abs, err := filepath.Abs(p[i])
			if err != nil {
				return nil, nil, nil, err
			}
			show := given[i]
			if filestore.ResolvedElsewhere(given[i], abs) {
				show = fmt.Sprintf("%s (resolved: %s)", given[i], abs)
			}
			// O_NONBLOCK: should it be a pipe by now, the open does not
			// wait for a writer (the daemon refuses it).
			f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", show, unwrapPath(err))
			}
			f.Close()
			paths, shown, names = append(paths, abs), append(shown, show), append(names, n[i])
		}
	}
	return paths, shown, names, nil
}

// walkAs lists the files under each path (filestore.WalkAs; tests make
// it fail).
var walkAs = filestore.WalkAs

// walkErr is the error of the walk of a, the argument as typed: it names
// the path that failed, under a as typed where it is under a (the
// walk's paths are a's resolved), and why. Before, it named a alone:
// "photos: permission denied" for photos/2019/raw.
func walkErr(a string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", a, err)
	}
	real, rerr := filepath.EvalSymlinks(a)
	if rerr == nil {
		real, rerr = filepath.Abs(real)
	}
	if rerr == nil {
		rel, rerr := filepath.Rel(real, pe.Path)
		switch {
		case rerr != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)):
		case rel == ".":
			return fmt.Errorf("%s: %w", a, pe.Err)
		default:
			return fmt.Errorf("%s%s: %w", strings.TrimSuffix(a, string(filepath.Separator))+string(filepath.Separator), rel, pe.Err)
		}
	}
	return fmt.Errorf("%s: %s: %w", a, pe.Path, pe.Err)
}

// fileKind names a file's type that is not a regular file's or a
// directory's.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "of mode " + m.String()
}

// unwrapPath is a *PathError's cause (the path is said already).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sendfileWindow is the most files sendfile keeps queued at the daemon
// and not yet judged: it waits for a verdict before queueing more, so a
// directory of any number of files does not hold a descriptor each at
// the daemon at once (a daemon refuses files beyond its own bound,
// boundRefusal, and sendfile sends such a file again after a verdict).
var sendfileWindow = 256 // sendfileText says so

// resendPause waits before sending again a file refused for the daemon's
// bound while none of the client's files is queued there, against a
// daemon of version 5, which says nothing when a place frees (tests
// count).
var resendPause = time.Sleep

// boundRefusal reports whether err is the daemon's refusal of the file
// name for its bound on the files queued there and not yet judged: by
// its code from a daemon of local API version 6 on
// (localapi.CodeQueuedBound), by its text from one of version 5, which
// refuses it with code 7 (daemon.IsQueuedBound; earlier daemons have no
// such bound).
func boundRefusal(c *localapi.Conn, err error, name string) bool {
	var le *localapi.Error
	switch {
	case !errors.As(err, &le):
		return false
	case c.Version() >= 6:
		return le.Code == localapi.CodeQueuedBound
	}
	return le.Code == localapi.CodeRefused && daemon.IsQueuedBound(le.Text, name)
}

// sendFiles sends the files and waits for their verdicts; false if any
// file was refused or a receiver lacks one.
func sendFiles(c *localapi.Conn, to []uint16, alg uint8, paths, shown, names []string, stdout, stderr io.Writer, prog *fileProgress) bool {
	ok := true
	queued := map[uint32]*localapi.FileQueued{}
	// Everything printed while the progress shows goes through
	// prog.print, which erases its lines and prints as one step
	// against its redraw.
	judge := func(v *localapi.FileVerdict) {
		if q := queued[v.ID]; q != nil {
			delete(queued, v.ID)
			prog.done(v.ID)
			if !verdictOK(q, v, stdout, stderr, prog) {
				ok = false
			}
		}
	}
	// wait reads until one of the files queued has its verdict, or,
	// with room, until the daemon says a place is free (FileRoom,
	// version 6: any client's file judged); verdict waits for a verdict.
	wait := func(room bool) error {
		for n := len(queued); len(queued) == n; {
			m, err := c.Read()
			if err != nil {
				return err
			}
			switch m := m.(type) {
			case *localapi.FileVerdict:
				judge(m)
			case *localapi.FileRoom:
				if room {
					return nil
				}
			}
		}
		return nil
	}
	verdict := func() error { return wait(false) }
	// unjudged says what went wrong (format, args), names the files
	// queued whose verdicts will not come, and counts those not sent.
	unjudged := func(unsent int, format string, args ...any) bool {
		prog.print(func() {
			fmt.Fprintf(stderr, "rbcastd sendfile: "+format+"\n", args...)
			ids := slices.Sorted(maps.Keys(queued))
			for _, id := range ids {
				fmt.Fprintf(stderr, "rbcastd sendfile: %s: no verdict\n", queued[id].Name)
			}
			if unsent > 0 {
				fmt.Fprintf(stderr, "rbcastd sendfile: %d files not sent\n", unsent)
			}
		})
		return false
	}
	lost := func(err error, unsent int) bool {
		return unjudged(unsent, "waiting for %d verdicts: %v", len(queued), err)
	}
	for i := 0; i < len(paths); {
		if len(queued) >= sendfileWindow {
			if err := verdict(); err != nil {
				return lost(err, len(paths)-i)
			}
		}
		if err := c.Write(&localapi.SendFile{To: to, Name: names[i], Path: paths[i], HashAlg: alg}); err != nil {
			return unjudged(len(paths)-i-1, "%s: %v", shown[i], err)
		}
		// The answer is FileQueued (or a refusal); verdicts of files
		// queued before may come first, once a file passes faster than
		// the next is opened (a directory of small files).
		var m localapi.Message
		var err error
		before := len(queued)
		for {
			c.SetDeadline(time.Now().Add(5 * time.Minute)) // a version 2 daemon hashes the file first
			m, err = c.Read()
			c.SetDeadline(time.Time{})
			if _, isRoom := m.(*localapi.FileRoom); isRoom {
				continue // of a refusal before, sent again since
			}
			v, isV := m.(*localapi.FileVerdict)
			if err != nil || !isV {
				break
			}
			judge(v)
		}
		var le *localapi.Error
		switch {
		case boundRefusal(c, err, names[i]):
			// The daemon holds as many files as its descriptors allow:
			// send this one again once a place frees. At once if one
			// of ours was judged since the SendFile; against a daemon
			// of version 6, once it says so (FileRoom: any client's
			// file judged) or one of ours is judged; against one of
			// version 5, once one of ours is, or with none queued (the
			// files of other clients hold the places) a while later.
			switch {
			case len(queued) < before:
			case c.Version() >= 6:
				if err := wait(true); err != nil {
					return lost(err, len(paths)-i)
				}
			case len(queued) == 0:
				resendPause(time.Second)
			default:
				if err := verdict(); err != nil {
					return lost(err, len(paths)-i)
				}
			}
			continue
		case errors.As(err, &le) && le.Code == localapi.CodeRefused:
			prog.print(func() {
				fmt.Fprintf(stderr, "rbcastd sendfile: %s: refused: %s\n", shown[i], strings.TrimPrefix(le.Text, "sendfile "+names[i]+": "))
			})
			ok = false
			i++
			continue
		case err != nil:
			return unjudged(len(paths)-i-1, "%s: %v", shown[i], err)
		}
		q, isQ := m.(*localapi.FileQueued)
		if !isQ {
			return unjudged(len(paths)-i-1, "%s: the daemon answered SendFile with %v", shown[i], m.Type())
		}
		queued[q.ID] = &localapi.FileQueued{ID: q.ID, Size: q.Size, Hash: q.Hash, Name: q.Name}
		prog.add(q.ID)
		i++
	}
	for len(queued) > 0 {
		if err := verdict(); err != nil {
			return lost(err, 0)
		}
	}
	return ok
}

// verdictOK prints a file's verdict (through prog.print) and reports
// whether it is complete.
func verdictOK(q *localapi.FileQueued, v *localapi.FileVerdict, stdout, stderr io.Writer, prog *fileProgress) (ok bool) {
	prog.print(func() { ok = printVerdict(q, v, stdout, stderr) })
	return ok
}

// printVerdict prints a file's verdict and reports whether it is
// complete.
func printVerdict(q *localapi.FileQueued, v *localapi.FileVerdict, stdout, stderr io.Writer) bool {
	done := make([]string, len(v.Done))
	for i, id := range v.Done {
		done[i] = strconv.Itoa(int(id))
	}
	held := "held by members " + strings.Join(done, ", ")
	if len(done) == 0 {
		held = "held by no member"
	}
	hash, alg := q.Hash, frame.FileHashSHA256
	if v.Hash != ([localapi.FileHashLen]byte{}) {
		hash = v.Hash // hashed as it was sent (local API version 3)
		if v.HashAlg != 0 {
			alg = frame.FileHashAlg(v.HashAlg) // version 4
		}
	}
	fmt.Fprintf(stdout, "%s  %s  %d bytes, %s\n", reliable.FormatFileHash(alg, hash), q.Name, q.Size, held)
	ok := len(v.Missing) == 0 && v.Text == ""
	for _, m := range v.Missing {
		if m.Cause == localapi.FileCauseDeclined {
			// An rbcastd declines a file for this reason only
			// (internal/daemon's sink).
			fmt.Fprintf(stderr, "rbcastd sendfile: %s: member %d declined it (no recvfile client and no -inbox)\n", q.Name, m.Member)
			continue
		}
		if limit := refusedText(q, m); limit != "" {
			fmt.Fprintf(stderr, "rbcastd sendfile: %s: member %d refused it: %s\n", q.Name, m.Member, limit)
			continue
		}
		fmt.Fprintf(stderr, "rbcastd sendfile: %s: member %d does not hold it: %v (%d of %d blocks)\n", q.Name, m.Member, reliable.FileCauseText(m.Cause), m.Held, m.Blocks)
	}
	if v.Text != "" {
		fmt.Fprintf(stderr, "rbcastd sendfile: %s: %s\n", q.Name, v.Text)
	}
	return ok
}

// refusedText names the limit of a receiver that a file is beyond, with
// what the sender knows of it, or "" if m is not such a refusal.
func refusedText(q *localapi.FileQueued, m localapi.FileMiss) string {
	switch m.Cause {
	case localapi.FileCauseOverMTU:
		block := uint64(0)
		if m.Blocks > 0 {
			block = (q.Size + uint64(m.Blocks) - 1) / uint64(m.Blocks)
		}
		return fmt.Sprintf("blocks larger than its MTU (blocks of %d bytes: the members' MTUs differ)", block)
	case localapi.FileCauseTooLarge:
		return fmt.Sprintf("larger than it takes (%d bytes in %d blocks: more than its run -files-max-size, or than the most blocks it keeps track of)", q.Size, m.Blocks)
	case localapi.FileCauseNoSpace:
		return fmt.Sprintf("no room on its disk (%d bytes, less what it holds of the file; its log says how much room it has)", q.Size)
	case localapi.FileCauseNameTooLong:
		return fmt.Sprintf("name too long for its file system (%d bytes)", len(q.Name))
	case localapi.FileCauseTooBigForFS:
		return fmt.Sprintf("larger than its file system allows a file to be (%d bytes; its log names the limit)", q.Size)
	case localapi.FileCauseBadName:
		return fmt.Sprintf("name not a local file path there (%q: absolute, climbing out with \"..\", the directory itself, or under %s)", q.Name, filestore.PartialDir)
	}
	return ""
}

// fileProgress shows, on a terminal, each file's progress at each
// receiver, from the daemon's status (a connection of its own), redrawn
// every second. What sendfile prints meanwhile goes through print, so
// that no redraw lands between erasing the lines and what is printed
// in their place.
type fileProgress struct {
	sf    *socketFlags
	w     io.Writer
	ids   chan [2]int64 // id, 1: add, 0: done
	quit  chan struct{}
	ended chan struct{}
	// mu is the terminal's: held by a redraw, and by print while it
	// erases the lines and prints.
	mu    sync.Mutex
	lines int // lines drawn, under mu
}

func startFileProgress(sf *socketFlags, w io.Writer) *fileProgress {
	p := &fileProgress{sf: sf, w: w, ids: make(chan [2]int64, 1024), quit: make(chan struct{}), ended: make(chan struct{})}
	go p.run()
	return p
}

func (p *fileProgress) add(id uint32) {
	if p != nil {
		p.ids <- [2]int64{int64(id), 1}
	}
}

func (p *fileProgress) done(id uint32) {
	if p != nil {
		p.ids <- [2]int64{int64(id), 0}
	}
}

// print erases the lines drawn and runs f, which prints what is to stand
// where they stood, as one step against the redraw: the next redraw
// draws below what f printed. (Erasing first and printing after, a
// redraw could come between: its lines then stood above what was
// printed, and the redraw after erased as many lines up from below it,
// taking what was printed and leaving a progress line standing.)
func (p *fileProgress) print(f func()) {
	if p == nil {
		f()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.erase()
	f()
}

func (p *fileProgress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.ended
}

// erase erases the lines drawn; mu held.
func (p *fileProgress) erase() {
	for ; p.lines > 0; p.lines-- {
		fmt.Fprint(p.w, "\x1b[1A\x1b[2K")
	}
}

// draw replaces the lines drawn with lines, unless print is under way:
// then it draws nothing (the next redraw, a second later, does; the
// lines print erased stay erased until then).
func (p *fileProgress) draw(lines []string) {
	if !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	p.erase()
	for _, l := range lines {
		fmt.Fprintln(p.w, l)
	}
	p.lines = len(lines)
}

func (p *fileProgress) run() {
	defer close(p.ended)
	defer p.print(func() {})
	want := map[uint32]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case x := <-p.ids:
			if x[1] == 1 {
				want[uint32(x[0])] = true
			} else {
				delete(want, uint32(x[0]))
			}
			continue
		case <-t.C:
		}
		st, err := status(p.sf, 0)
		if err != nil || st.Files == nil {
			continue
		}
		var lines []string
		for _, tr := range st.Files.Transfers {
			if !tr.Sending || !want[tr.ID] {
				continue
			}
			lines = append(lines, progressLines(tr)...)
		}
		p.draw(lines)
	}
}

// progressLines describes a file sent and its receivers.
func progressLines(t daemon.FileTransfer) []string {
	out := []string{fmt.Sprintf("%s: %s, multicast %s of %s", t.Name, t.State, mb(int64(min(uint64(t.Held)*blockOf(t), t.Size))), mb(int64(t.Size)))}
	rs := t.Receivers
	sort.Slice(rs, func(i, j int) bool { return rs[i].Member < rs[j].Member })
	for _, r := range rs {
		state := r.State
		if r.Cause != "" && state != "declined" {
			state += " (" + r.Cause + ")"
		}
		out = append(out, "  "+receiverLine(r.Member, state, r.Bytes, t.Size, r.BytesPerSec, r.ETASeconds))
	}
	return out
}

// blockOf is a transfer's block size, from its size and block count.
func blockOf(t daemon.FileTransfer) uint64 {
	if t.Blocks == 0 {
		return 0
	}
	return (t.Size + uint64(t.Blocks) - 1) / uint64(t.Blocks)
}

func receiverLine(member int, state string, bytes, size uint64, bps, eta float64) string {
	left := "time left unknown"
	switch {
	case bytes >= size:
		left = "complete"
	case eta >= 0:
		left = fmt.Sprintf("%s left", (time.Duration(eta * float64(time.Second))).Round(time.Second))
	}
	return fmt.Sprintf("member %d: %s, %s of %s, %.1f MB/s, %s", member, state, mb(int64(bytes)), mb(int64(size)), bps/1e6, left)
}

// printFiles is the files section of 'rbcastd status'.
func printFiles(w io.Writer, f *daemon.FilesStatus) {
	if f == nil {
		return
	}
	where := "declined (no -inbox, no recvfile client)"
	switch {
	case len(f.RecvDirs) > 0:
		where = "stored in " + f.RecvDirs[0] + " (recvfile)"
	case f.Inbox != "":
		where = "stored in " + f.Inbox + " (-inbox)"
	}
	fmt.Fprintf(w, "files: group %d, arriving files %s\n", f.Group, where)
	if !f.Running {
		fmt.Fprintln(w, "  not running (the daemon is not a member)")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, t := range f.Transfers {
		if t.Sending {
			for _, l := range progressLines(t) {
				fmt.Fprintf(tw, "  sending %s\n", l)
			}
			continue
		}
		fmt.Fprintf(tw, "  receiving %s from member %d: %s\n", t.Name, t.Sender, receiverLine(f.Self, t.State, t.Bytes, t.Size, t.BytesPerSec, t.ETASeconds))
	}
	tw.Flush()
	k := f.Counters
	if f.Auth != nil {
		fmt.Fprintf(w, "  auth (the files' link): %s\n", authLine(f.Auth))
	}
	for _, m := range []string{f.KeyMismatch, f.Unauthenticated} {
		if m != "" {
			fmt.Fprintf(w, "  %s\n", m)
		}
	}
	fmt.Fprintf(w, "  sent %d files (%d blocks, %d repaired, %d to the group), received %d (%d incomplete, %d resumed), declined %d, refused %d, waited for room %d, %d MB stored, %d kernel drops\n",
		k.FilesSent, k.BlocksSent, k.BlocksRepaired, k.RepairsToGroup, k.FilesReceived, k.FilesIncomplete, k.Resumed, k.FilesDeclined, k.FilesRefused, k.FilesDeferred, k.StoredBytes/1_000_000, k.KernelDrops)
	for _, e := range f.Recent {
		h := e.Hash
		if h == "" && e.SHA256 != "" { // a daemon from before hashes had names
			h = "sha256:" + e.SHA256
		}
		if alg, hx, ok := strings.Cut(h, ":"); ok && len(hx) > 16 {
			h = alg + ":" + hx[:16] + "…"
		}
		fmt.Fprintf(w, "  %s %s %s (%d bytes, %s)", e.At, e.Kind, e.Name, e.Size, h)
		if len(e.Missing) > 0 {
			fmt.Fprintf(w, "; missing %s", strings.Join(e.Missing, "; "))
		}
		if e.Detail != "" {
			fmt.Fprintf(w, "; %s", e.Detail)
		}
		fmt.Fprintln(w)
	}
}
