package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
)

// socketFlags are the flags every client shares.
type socketFlags struct {
	socket string
	group  uint64
}

func (s *socketFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&s.socket, "socket", "", "the daemon's socket `path` (default: $RBCASTD_SOCKET, else "+localapi.SocketDir+"/group-G.sock with -group, else the only socket in "+localapi.SocketDir+")")
	fs.Uint64Var(&s.group, "group", 0, "group `id` whose default socket to use")
}

// path picks the socket: -socket, $RBCASTD_SOCKET, -group's default, or
// the only socket in the default directory.
func (s *socketFlags) path() (string, error) {
	switch {
	case s.socket != "":
		return s.socket, nil
	case os.Getenv("RBCASTD_SOCKET") != "":
		return os.Getenv("RBCASTD_SOCKET"), nil
	case s.group != 0:
		return localapi.DefaultSocket(uint32(s.group)), nil
	}
	m, _ := filepath.Glob(filepath.Join(localapi.SocketDir, "*.sock"))
	switch len(m) {
	case 1:
		return m[0], nil
	case 0:
		return "", fmt.Errorf("no daemon socket in %s; say which with -socket PATH or -group G", localapi.SocketDir)
	}
	return "", fmt.Errorf("%d daemon sockets in %s (%v); say which with -socket PATH or -group G", len(m), localapi.SocketDir, m)
}

func dial(s *socketFlags) (*localapi.Conn, error) {
	p, err := s.path()
	if err != nil {
		return nil, err
	}
	return localapi.Dial(p)
}

const sendText = `Broadcasts FILE (or stdin, '-' or absent) through the daemon: as a
stream of messages of the largest size the group accepts (smaller when
the input had less ready: a slow input is sent as it comes, and a pipe
written in small pieces gives messages of about those pieces), or with
-lines one message per line (without its newline).
Waits for the group to start.
Exits 0 only once every message has been acknowledged by every live
member (under -order total: once the sequencer reports that every live
member holds it, which is later than its delivery back to this member;
a member that crashed stops counting once it is removed, after the
failure timeout). Non-zero, with the reason, otherwise.
`

func sendCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("send", "[-socket PATH] [-lines] [FILE|-]", sendText, stderr)
	sf.add(fs)
	lines := fs.Bool("lines", false, "one message per input line")
	quiet := fs.Bool("q", false, "do not print the summary line on stderr")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 1 {
		return usageErr(stderr, "send", "at most one FILE, got %d arguments", fs.NArg())
	}
	in := stdin
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fail(stderr, "send", err)
		}
		defer f.Close()
		in = f
	}
	c, err := dial(&sf)
	if err != nil {
		return fail(stderr, "send", err)
	}
	defer c.Close()
	start := time.Now()
	n, bytes, err := send(c, in, *lines)
	if err != nil {
		return fail(stderr, "send", err)
	}
	if !*quiet {
		el := time.Since(start)
		fmt.Fprintf(stderr, "rbcastd send: %d messages, %d bytes acknowledged in %v (%.1f MB/s)\n", n, bytes, el.Round(time.Millisecond), float64(bytes)/el.Seconds()/1e6)
	}
	return exitOK
}

// batcher packs messages into SendBatch packets (one packet per message
// costs a system call each on both sides of the socket).
type batcher struct {
	c     *localapi.Conn
	arena []byte   // the batch's data; never grows past its capacity
	msgs  [][]byte // views into arena
	size  int      // the packet's size so far
	n     uint64   // messages written
	bytes uint64
}

func newBatcher(c *localapi.Conn) *batcher {
	return &batcher{c: c, arena: make([]byte, 0, localapi.MaxBatch), size: 1}
}

// add copies d into the batch, first writing the batch out if d does not
// fit.
func (b *batcher) add(d []byte) error {
	if b.size+localapi.BatchEntryLen+len(d) > localapi.MaxBatch {
		if err := b.flush(); err != nil {
			return err
		}
	}
	off := len(b.arena)
	b.arena = append(b.arena, d...)
	b.msgs = append(b.msgs, b.arena[off:len(b.arena):len(b.arena)])
	b.size += localapi.BatchEntryLen + len(d)
	return nil
}

// flush writes what is batched.
func (b *batcher) flush() error {
	var err error
	switch len(b.msgs) {
	case 0:
		return nil
	case 1:
		err = b.c.Write(&localapi.Send{Data: b.msgs[0]})
	default:
		err = b.c.Write(&localapi.SendBatch{Msgs: b.msgs})
	}
	if err != nil {
		return err
	}
	b.n += uint64(len(b.msgs))
	for _, m := range b.msgs {
		b.bytes += uint64(len(m))
	}
	b.arena, b.msgs, b.size = b.arena[:0], b.msgs[:0], 1
	return nil
}

// send streams in through c and flushes; it returns the number of
// messages and bytes acknowledged. Messages already read go out together
// in one packet; when the input has nothing more buffered, what is
// batched goes out at once, so a slow input (a pipe, a terminal) is not
// held back.
func send(c *localapi.Conn, in io.Reader, lines bool) (n uint64, bytes uint64, err error) {
	w, err := c.Hello(localapi.HelloWaitReady)
	if err != nil {
		return 0, 0, err
	}
	max := int(w.MaxMessage)
	b := newBatcher(c)
	// fail turns a failed write into the daemon's reason, if it sent one.
	fail := func(werr error) (uint64, uint64, error) {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, rerr := c.Read(); rerr != nil {
			var e *localapi.Error
			if errors.As(rerr, &e) {
				return b.n, b.bytes, e
			}
		}
		return b.n, b.bytes, fmt.Errorf("sending message %d: %w", b.n+1, werr)
	}
	const maxLine = 1 << 20
	br := bufio.NewReaderSize(in, maxLine)
	line := uint64(0)
	chunk := make([]byte, max) // the batcher copies it
	for {
		var msg []byte
		var rerr error
		if lines {
			msg, rerr = br.ReadSlice('\n')
			if errors.Is(rerr, bufio.ErrBufferFull) {
				return b.n, b.bytes, fmt.Errorf("line %d is longer than 1 MiB; the daemon accepts at most %d bytes per message", line+1, max)
			}
			msg = trimEOL(msg)
			if len(msg) == 0 && rerr == io.EOF {
				break
			}
			line++
			if len(msg) > max {
				return b.n, b.bytes, fmt.Errorf("line %d is %d bytes; the daemon accepts at most %d bytes per message", line, len(msg), max)
			}
		} else {
			// A message of the largest size, or of what the input had
			// read into the buffer so far: a slow input's bytes go out as
			// they come instead of waiting for a whole message's worth. A
			// Read returns at most what one read of the input gave, so a
			// message is also cut where the buffer runs dry (once per MiB
			// of a file; at every write of a pipe written in smaller
			// pieces than a message).
			var k int
			for k == 0 && rerr == nil {
				k, rerr = br.Read(chunk)
			}
			msg = chunk[:k]
			if k == 0 && rerr == io.EOF {
				break
			}
		}
		if rerr != nil && rerr != io.EOF {
			return b.n, b.bytes, fmt.Errorf("reading input: %w", rerr)
		}
		if err := b.add(msg); err != nil {
			return fail(err)
		}
		if rerr == io.EOF {
			break
		}
		if br.Buffered() == 0 {
			if err := b.flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := b.flush(); err != nil {
		return fail(err)
	}
	n, bytes = b.n, b.bytes
	if err := c.Write(&localapi.Flush{}); err != nil {
		return fail(err)
	}
	m, err := c.Read()
	if err != nil {
		return n, bytes, err
	}
	f, ok := m.(*localapi.Flushed)
	if !ok {
		return n, bytes, fmt.Errorf("the daemon answered Flush with %v", m.Type())
	}
	if f.Accepted != n {
		return n, bytes, fmt.Errorf("the daemon accepted %d of %d messages", f.Accepted, n)
	}
	return n, bytes, nil
}

// trimEOL drops a line's "\n" or "\r\n", as bufio.ScanLines does.
func trimEOL(b []byte) []byte {
	b = bytesTrimSuffix(b, '\n')
	return bytesTrimSuffix(b, '\r')
}

func bytesTrimSuffix(b []byte, c byte) []byte {
	if len(b) > 0 && b[len(b)-1] == c {
		return b[:len(b)-1]
	}
	return b
}

const recvText = `Writes what the group delivers from now on: with -from ID, member ID's
messages; with -all, every member's. -format raw writes the messages'
bytes back to back (with -from ID: exactly the bytes member ID sent with
'rbcastd send', in order); -format lines writes one line per message,
'<sender-id><TAB><payload>', in delivery order. Subscribes at once, before
the group starts: a receiver started before the senders misses nothing.
Stops after -bytes N payload bytes or -count N messages (exit 1 if the
daemon leaves first), or on SIGINT/SIGTERM (exit 0).
`

func recvCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("recv", "[-socket PATH] (-from ID | -all) [-bytes N | -count N] [-format raw|lines] [-o FILE]", recvText, stderr)
	sf.add(fs)
	from := fs.String("from", "", "deliver only member `ID`'s messages")
	all := fs.Bool("all", false, "deliver every member's messages")
	nbytes := fs.Int64("bytes", 0, "stop after N payload bytes (raw: exactly N bytes are written)")
	count := fs.Int64("count", 0, "stop after N messages")
	format := fs.String("format", "", "raw or lines (default: raw with -from, lines with -all)")
	out := fs.String("o", "", "write to `FILE` instead of stdout")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "recv", "unexpected argument %q", fs.Arg(0))
	}
	sub := localapi.AllMembers
	switch {
	case *from != "" && *all:
		return usageErr(stderr, "recv", "-from and -all exclude each other")
	case *from == "" && !*all:
		return usageErr(stderr, "recv", "say whose messages: -from ID or -all")
	case *from != "":
		id, err := strconv.ParseUint(*from, 10, 16)
		if err != nil || id >= uint64(localapi.AllMembers) {
			return usageErr(stderr, "recv", "-from is %q, want a member id 0..%d", *from, localapi.AllMembers-1)
		}
		sub = uint16(id)
	}
	if *nbytes < 0 || *count < 0 {
		return usageErr(stderr, "recv", "-bytes and -count must not be negative")
	}
	if *nbytes > 0 && *count > 0 {
		return usageErr(stderr, "recv", "-bytes and -count exclude each other")
	}
	if *format == "" {
		*format = "raw"
		if *all {
			*format = "lines"
		}
	}
	if *format != "raw" && *format != "lines" {
		return usageErr(stderr, "recv", "-format is %q, want raw or lines", *format)
	}
	c, err := dial(&sf)
	if err != nil {
		return fail(stderr, "recv", err)
	}
	defer c.Close()
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fail(stderr, "recv", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 256*1024)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		c.SetDeadline(time.Now()) // unblocks Read
	}()
	err = recv(c, sub, bw, *format == "lines", *nbytes, *count)
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	if ctx.Err() != nil {
		return exitOK
	}
	if err != nil {
		return fail(stderr, "recv", err)
	}
	return exitOK
}

func recv(c *localapi.Conn, from uint16, w *bufio.Writer, lines bool, maxBytes, maxCount int64) error {
	if _, err := c.Hello(localapi.HelloBatch); err != nil {
		return err
	}
	if err := c.Write(&localapi.Subscribe{From: from}); err != nil {
		return err
	}
	var got, count int64
	done := func() bool { return maxBytes > 0 && got >= maxBytes || maxCount > 0 && count >= maxCount }
	write := func(d *localapi.Deliver) error {
		data := d.Data
		if maxBytes > 0 && got+int64(len(data)) > maxBytes && !lines {
			data = data[:maxBytes-got]
		}
		var err error
		if lines {
			w.WriteString(strconv.Itoa(int(d.From)))
			w.WriteByte('\t')
			w.Write(data)
			err = w.WriteByte('\n')
		} else {
			_, err = w.Write(data)
		}
		got += int64(len(d.Data))
		count++
		return err
	}
	for {
		if done() {
			return nil
		}
		m, err := c.Read()
		if err != nil {
			var e *localapi.Error
			if errors.As(err, &e) && e.Code == localapi.CodeClosed && maxBytes == 0 && maxCount == 0 {
				return nil // the daemon left; nothing more was asked for
			}
			if maxBytes > 0 || maxCount > 0 {
				return fmt.Errorf("after %d messages, %d bytes: %w", count, got, err)
			}
			return err
		}
		switch d := m.(type) {
		case *localapi.Deliver:
			if err := write(d); err != nil {
				return err
			}
		case *localapi.DeliverBatch:
			for i := range d.Msgs {
				if done() {
					return nil
				}
				if err := write(&d.Msgs[i]); err != nil {
					return err
				}
			}
		}
	}
}

const statusText = `Prints the group's members with their state (alive, suspected: silent
for half the failure timeout, dead: failed, stalled or left), the order
mode, rates, retransmissions, NACKs, repair latency and kernel drops.
With -wait-ready D it first waits up to D for the group to start (and for
the daemon's socket to appear), and exits 1 if it has not.
`

func statusCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("status", "[-socket PATH] [-json] [-wait-ready DURATION]", statusText, stderr)
	sf.add(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	wait := fs.Duration("wait-ready", 0, "wait up to this long for the group to start; exit 1 on timeout")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "status", "unexpected argument %q", fs.Arg(0))
	}
	if *wait < 0 {
		return usageErr(stderr, "status", "-wait-ready must not be negative")
	}
	st, err := status(&sf, *wait)
	if err != nil {
		return fail(stderr, "status", err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	printStatus(stdout, st)
	return exitOK
}

func status(sf *socketFlags, wait time.Duration) (*daemon.Status, error) {
	deadline := time.Now().Add(wait)
	var c *localapi.Conn
	for {
		var err error
		c, err = dial(sf)
		if err == nil {
			break
		}
		if wait == 0 || time.Now().After(deadline) {
			if wait > 0 {
				return nil, fmt.Errorf("not ready after %v: %w", wait, err)
			}
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	if wait > 0 {
		c.SetDeadline(deadline)
	}
	var flags uint16
	if wait > 0 {
		flags = localapi.HelloWaitReady
	}
	if _, err := c.Hello(flags); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("the group has not started after %v (-wait-ready)", wait)
		}
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Write(&localapi.Status{}); err != nil {
		return nil, err
	}
	m, err := c.Read()
	if err != nil {
		return nil, err
	}
	sj, ok := m.(*localapi.StatusJSON)
	if !ok {
		return nil, fmt.Errorf("the daemon answered Status with %v", m.Type())
	}
	var st daemon.Status
	if err := json.Unmarshal(sj.JSON, &st); err != nil {
		return nil, fmt.Errorf("the daemon's status: %w", err)
	}
	return &st, nil
}

func printStatus(w io.Writer, st *daemon.Status) {
	ready := "waiting for members to register"
	if st.Membership == "views" {
		ready = "joining (or founding) the group"
	}
	if st.Ready {
		ready = "started"
	}
	if st.JoinErr != "" {
		ready = "failed to start: " + st.JoinErr
	}
	who := fmt.Sprintf("member %d of %d", st.Self, st.Size)
	switch {
	case st.View != nil:
		who = fmt.Sprintf("member %d of %d", st.Self, len(st.View.Members))
	case st.Self < 0:
		who = fmt.Sprintf("%d members expected", st.Size)
	}
	fmt.Fprintf(w, "group %d, %s, %s, order %s, mode %s, up %s\n", st.Group, who, ready, st.Order, st.Mode, st.Uptime)
	if st.Sequencer != nil {
		fmt.Fprintf(w, "sequencer: member %d, epoch %d\n", *st.Sequencer, st.Epoch)
	}
	if v := st.View; v != nil {
		ms := make([]string, len(v.Members))
		for i, m := range v.Members {
			ms[i] = fmt.Sprintf("%d (%s, incarnation %d)", m.ID, m.MAC, m.Incarnation)
		}
		fmt.Fprintf(w, "view %d: %s\n", v.ID, strings.Join(ms, ", "))
		for _, c := range v.Changes {
			fmt.Fprintf(w, "  view %d installed at %s, %d members\n", c.ID, c.At, c.Members)
		}
	}
	if a := st.Auth; a != nil {
		enc := ""
		if a.Encrypt {
			enc = ", encrypted"
		}
		var drops []string
		for _, r := range []string{"unauthenticated", "algorithm", "unknown_key", "bad_tag", "replay", "too_old", "earlier_incarnation"} {
			if n := a.Dropped[r]; n > 0 {
				drops = append(drops, fmt.Sprintf("%s %d", r, n))
			}
		}
		if len(drops) == 0 {
			drops = []string{"none"}
		}
		fmt.Fprintf(w, "auth: key %s%s (accepting %s), %d frames verified, dropped: %s\n", a.Active, enc, strings.Join(a.Accepted, ", "), a.Verified, strings.Join(drops, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "member\tstate\tdelivered\tbytes\trepairs\trepair p50\trepair p99\tlast heard")
	for _, m := range st.Members {
		state := m.State
		if m.Reason != "" {
			state += " (" + m.Reason + ")"
		}
		if m.Self {
			fmt.Fprintf(tw, "%d (self)\t%s\t\t\t\t\t\t\n", m.ID, state)
			continue
		}
		heard := "never" // LastHeardMs is omitted (0) until a frame from m arrives
		switch {
		case m.DiedAt != "" && m.SilentBeforeDeathMs > 0:
			heard = fmt.Sprintf("removed at %s, silent %.0f ms before", m.DiedAt, m.SilentBeforeDeathMs)
		case m.DiedAt != "": // never heard here before its removal
			heard = fmt.Sprintf("removed at %s", m.DiedAt)
		case m.LastHeardMs > 0:
			heard = fmt.Sprintf("%.0f ms ago", m.LastHeardMs)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%.2f ms\t%.2f ms\t%s\n", m.ID, state, m.Delivered, m.DeliveredBytes, m.Repairs, m.RepairP50ms, m.RepairP99ms, heard)
	}
	tw.Flush()
	fmt.Fprintf(w, "rates: sent %.0f msg/s, delivered %.0f msg/s (%.2f MB/s)\n", st.SentPerSec, st.DeliveredPerSec, st.DeliveredBytesPerSec/1e6)
	fmt.Fprintf(w, "sent %d, delivered %d, retransmissions %d, nacks sent %d received %d, in flight %d/%d\n",
		st.Sent, st.Delivered, st.Retransmissions, st.NacksSent, st.NacksReceived, st.InFlight, st.Window)
	fmt.Fprintf(w, "repair latency p50 %.2f ms p99 %.2f ms, kernel drops %d, bad frames %d, clients %d\n",
		st.RepairP50ms, st.RepairP99ms, st.KernelDrops, st.BadFrames, st.Clients)
	for _, f := range st.ForeignVersions {
		fmt.Fprintf(w, "warning: host %s speaks rbcast protocol version %d; its frames are dropped\n", f.Host, f.Version)
	}
}
