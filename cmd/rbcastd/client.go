package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
	"golang.org/x/sys/unix"
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
-level names the delivery level the messages need: reliable (the
default) takes the group's own. In a group run with -order total
-membership views, agreed and safe send the messages at that level
whatever the group's own -level (one total order holds both; a safe
message, and every message after it in the order, is delivered once
every member of the view holds it). Otherwise fifo, agreed or safe must
be the level the daemon's group runs at (-order fifo; -order total), or
send refuses before sending anything, naming the group's level; so does
a daemon older than local API version 5, which has no level per message. fifo is
never offered per message in a total order.
With -level unreliable (a group run with -membership views, or -order
fifo; not a registered -order total group) each message
goes out once at the Unreliable level: to the members of the daemon's
view (a registered group: its live members), delivered at most once or not at all, in no order with the rest,
never acknowledged; send then exits 0 once the daemon has sent them all.
`

func sendCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("send", "[-socket PATH] [-lines] [-level reliable|unreliable|fifo|agreed|safe] [FILE|-]", sendText, stderr)
	sf.add(fs)
	lines := fs.Bool("lines", false, "one message per input line")
	level := fs.String("level", "reliable", "reliable (the group's own level); agreed or safe (per message in a group run with -order total -membership views; elsewhere refused unless the group runs at that level); fifo (refused unless the group runs at it); or unreliable (at most once, never acknowledged; -membership views or -order fifo)")
	quiet := fs.Bool("q", false, "do not print the summary line on stderr")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 1 {
		return usageErr(stderr, "send", "at most one FILE, got %d arguments", fs.NArg())
	}
	switch *level {
	case "reliable", "unreliable", "fifo", "agreed", "safe":
	default:
		return usageErr(stderr, "send", "-level is %q, want reliable, unreliable, fifo, agreed or safe", *level)
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
	if *level == "unreliable" {
		n, bytes, err := sendUnreliable(c, in, *lines)
		if err != nil {
			return fail(stderr, "send", err)
		}
		if !*quiet {
			fmt.Fprintf(stderr, "rbcastd send: %d messages, %d bytes sent unreliably (never acknowledged) in %v\n", n, bytes, time.Since(start).Round(time.Millisecond))
		}
		return exitOK
	}
	prog := newProgress(stderr, "sent", inputSize(in))
	n, bytes, err := send(c, in, *lines, *level, prog)
	prog.end()
	if err != nil {
		return fail(stderr, "send", err)
	}
	if !*quiet {
		el := time.Since(start)
		fmt.Fprintf(stderr, "rbcastd send: %d messages, %d bytes acknowledged in %v (%.1f MB/s)\n", n, bytes, el.Round(time.Millisecond), float64(bytes)/el.Seconds()/1e6)
	}
	return exitOK
}

// inputSize is the size of a regular file's unread rest (0: not a regular
// file, or unknown).
func inputSize(in io.Reader) int64 {
	f, ok := in.(*os.File)
	if !ok {
		return 0
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0
	}
	return fi.Size() - off
}

// sink takes a client's messages on their way to the daemon: a ring
// (local API version 2) or SendBatch packets (version 1). Messages are
// laid out in place: reserve returns room for up to k messages of n bytes
// (at least one), the input is read straight into it, commit takes each
// in order (every one but the last full), and flush sends what was
// committed.
type sink interface {
	reserve(n, k int) ([][]byte, error)
	commit(k int)
	flush() error
	sent() (msgs, bytes uint64) // flushed so far
	// heard returns the daemon's Error if it sent one; the input calls it
	// after a flush before a read that may wait.
	heard() error
}

// batcher fills SendBatch packets in place (one packet per message costs
// a system call each on both sides of the socket).
type batcher struct {
	c       *localapi.Conn
	p       []byte // the SendBatch: type byte, entries; never grows past its capacity
	n       int    // messages in p
	slots   [][]byte
	next    int    // the slot commit takes next
	msgs    uint64 // messages written
	written uint64
	prog    *progress
}

func newBatcher(c *localapi.Conn, prog *progress) *batcher {
	b := &batcher{c: c, p: make([]byte, 1, localapi.MaxBatch), prog: prog}
	b.p[0] = byte(localapi.TSendBatch)
	return b
}

func (b *batcher) reserve(n, k int) ([][]byte, error) {
	if len(b.p)+localapi.BatchEntryLen+n > cap(b.p) {
		if err := b.flush(); err != nil {
			return nil, err
		}
	}
	b.slots = b.slots[:0]
	for off := len(b.p); off+localapi.BatchEntryLen+n <= cap(b.p) && len(b.slots) < k; off += localapi.BatchEntryLen + n {
		b.slots = append(b.slots, b.p[off+localapi.BatchEntryLen:off+localapi.BatchEntryLen+n])
	}
	if len(b.slots) == 0 {
		return nil, fmt.Errorf("a message of %d bytes does not fit a packet of %d", n, cap(b.p))
	}
	return b.slots, nil
}

func (b *batcher) commit(k int) {
	off := len(b.p)
	b.p = b.p[:off+localapi.BatchEntryLen+k]
	binary.BigEndian.PutUint32(b.p[off:], uint32(k))
	b.n++
}

func (b *batcher) flush() error {
	if b.n == 0 {
		return nil
	}
	if err := b.c.WritePacket(b.p); err != nil {
		return err
	}
	k := uint64(len(b.p) - 1 - b.n*localapi.BatchEntryLen)
	b.msgs += uint64(b.n)
	b.written += k
	b.prog.add(int(k))
	b.p, b.n = b.p[:1], 0
	return nil
}

func (b *batcher) sent() (uint64, uint64) { return b.msgs, b.written }

// heard: a batcher's next write fails once the daemon has closed the
// connection, and the send reads its Error then.
func (b *batcher) heard() error { return nil }

// ringSink writes messages into the connection's send ring.
type ringSink struct {
	c             *localapi.Conn
	r             *localapi.RingSender
	msgs, written uint64
	pendMsgs      uint64
	pendBytes     uint64
	prog          *progress
}

func (s *ringSink) reserve(n, k int) ([][]byte, error) { return s.r.Reserve(n, k) }

func (s *ringSink) commit(k int) {
	s.r.Commit(k)
	s.pendMsgs++
	s.pendBytes += uint64(k)
}

func (s *ringSink) flush() error {
	if err := s.r.Publish(); err != nil {
		return err
	}
	s.msgs += s.pendMsgs
	s.written += s.pendBytes
	s.prog.add(int(s.pendBytes))
	s.pendMsgs, s.pendBytes = 0, 0
	return nil
}

// heard reads what the daemon sent meanwhile: an Error (it left the
// group, or joins it again) ends the send. The ring alone would not say
// so: a daemon that ends the connection while its side is awake (it
// wants no doorbell) leaves a slow input publishing into a ring nobody
// reads until the ring fills.
func (s *ringSink) heard() error {
	for s.c.Pending() {
		m, err := s.c.Read()
		if err != nil {
			return err
		}
		if _, ok := m.(*localapi.DaemonDoorbell); !ok {
			return fmt.Errorf("the daemon sent %v while messages were sent", m.Type())
		}
	}
	return nil
}

func (s *ringSink) sent() (uint64, uint64) { return s.msgs, s.written }

// openSink is the connection's send ring if the daemon speaks version
// 2, else a batcher.
func openSink(c *localapi.Conn, prog *progress) (sink, error) {
	if c.Version() < 2 {
		return newBatcher(c, prog), nil
	}
	r, err := c.SendRing(0)
	if ringRefused(err) {
		return newBatcher(c, prog), nil
	}
	if err != nil {
		return nil, err
	}
	return &ringSink{c: c, r: r, prog: prog}, nil
}

// ringRefused reports whether the daemon refused a ring but kept the
// connection (its clients' rings are at its bound): the socket serves.
func ringRefused(err error) bool {
	var e *localapi.Error
	return errors.As(err, &e) && e.Code == localapi.CodeTooLarge
}

// send streams in through c and flushes; it returns the number of
// messages and bytes acknowledged. Messages already read go out together;
// when the input has nothing more to read at once, what is batched goes
// out, so a slow input (a pipe, a terminal) is not held back. A regular
// file is read straight into the ring or the packets, in messages of the
// largest size.
func send(c *localapi.Conn, in io.Reader, lines bool, level string, prog *progress) (n uint64, bytes uint64, err error) {
	w, err := c.Hello(localapi.HelloWaitReady)
	if err != nil {
		return 0, 0, err
	}
	set, err := levelAllowed(level, w.Order, c.Version())
	if err != nil {
		return 0, 0, err
	}
	if set {
		// The daemon refuses a level its group cannot give (a registered
		// total order has Agreed alone) and closes the connection: nothing
		// after it is sent, and the Flush below reports why.
		if err := c.Write(&localapi.SendLevel{Level: levelOrders[level]}); err != nil {
			return 0, 0, err
		}
	}
	max := int(w.MaxMessage)
	b, err := openSink(c, prog)
	if err != nil {
		return 0, 0, daemonReason(c, err) // a refused SendLevel closes the connection
	}
	// fail turns a failed write into the daemon's reason, if it sent one.
	fail := func(werr error) (uint64, uint64, error) {
		msgs, bytes := b.sent()
		var e *localapi.Error
		if errors.As(daemonReason(c, werr), &e) {
			return msgs, bytes, e
		}
		return msgs, bytes, fmt.Errorf("sending message %d: %w", msgs+1, werr)
	}
	if lines {
		err = sendLines(b, in, max)
	} else {
		err = sendRaw(b, in, max)
	}
	if err != nil {
		var ie *inputError
		if errors.As(err, &ie) {
			msgs, bytes := b.sent()
			return msgs, bytes, ie.err
		}
		return fail(err)
	}
	if err := b.flush(); err != nil {
		return fail(err)
	}
	n, bytes = b.sent()
	if err := c.Write(&localapi.Flush{}); err != nil {
		return fail(err)
	}
	for {
		m, err := c.Read()
		if err != nil {
			return n, bytes, err
		}
		if _, ok := m.(*localapi.DaemonDoorbell); ok {
			continue // room in the ring, no longer needed
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
}

// sendUnreliable sends the input as SendUnreliable packets, one message
// per line or per read of at most MaxMessage bytes, then a Flush as a
// barrier: the daemon answers requests of a connection in order, so an
// Error about any of them comes before the Flushed.
func sendUnreliable(c *localapi.Conn, in io.Reader, lines bool) (n, bytes uint64, err error) {
	w, err := c.Hello(localapi.HelloWaitReady)
	if err != nil {
		return 0, 0, err
	}
	max := int(w.MaxMessage)
	out := func(msg []byte) error {
		if err := c.Write(&localapi.SendUnreliable{Data: msg}); err != nil {
			return fmt.Errorf("sending message %d: %w", n+1, err)
		}
		n++
		bytes += uint64(len(msg))
		return nil
	}
	if lines {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), max+1)
		for sc.Scan() {
			if len(sc.Bytes()) > max {
				return n, bytes, fmt.Errorf("line %d is %d bytes; the group takes at most %d per message", n+1, len(sc.Bytes()), max)
			}
			if err := out(sc.Bytes()); err != nil {
				return n, bytes, err
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return n, bytes, fmt.Errorf("line %d is longer than %d bytes, the most the group takes per message", n+1, max)
			}
			return n, bytes, fmt.Errorf("reading the input: %w", err)
		}
	} else {
		buf := make([]byte, max)
		for {
			k, rerr := in.Read(buf)
			if k > 0 {
				if err := out(buf[:k]); err != nil {
					return n, bytes, err
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return n, bytes, fmt.Errorf("reading the input: %w", rerr)
			}
		}
	}
	if err := c.Write(&localapi.Flush{}); err != nil {
		return n, bytes, err
	}
	for {
		m, err := c.Read()
		if err != nil {
			return n, bytes, err
		}
		if _, ok := m.(*localapi.Flushed); ok {
			return n, bytes, nil
		}
	}
}

// inputError is a failure of the input (not of the daemon's socket).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }

// sendRaw sends the input in messages of max bytes, read straight into
// the sink: a regular file with one readv per run of messages (a system
// call per message would cost more than the rest of the client),
// anything else one message per read. A message is shorter where a read
// gave less: at the end, and from a slow pipe or terminal, whose bytes go
// out as they come (before a read that would wait, what was read goes
// out).
func sendRaw(b sink, in io.Reader, max int) error {
	if f, ok := regularFile(in); ok {
		return sendFile(b, f, max)
	}
	ready := readable(in)
	pending := false
	for {
		if pending && !ready() {
			if err := b.flush(); err != nil {
				return err
			}
			if err := b.heard(); err != nil {
				return err
			}
			pending = false
		}
		slots, err := b.reserve(max, 1)
		if err != nil {
			return err
		}
		k, rerr := io.ReadAtLeast(in, slots[0], 1)
		if k > 0 {
			b.commit(k)
			pending = true
		}
		switch {
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return &inputError{fmt.Errorf("reading input: %w", rerr)}
		}
	}
}

// sendFile reads a regular file into runs of max-byte messages, one readv
// per run (up to a packet, or 64 messages of the ring).
func sendFile(b sink, f *os.File, max int) error {
	r, err := newVecReader(f)
	if err != nil {
		return &inputError{err}
	}
	for {
		iov, err := b.reserve(max, 64)
		if err != nil {
			return err
		}
		n, rerr := r.read(iov)
		if rerr != nil {
			return &inputError{fmt.Errorf("reading %s: %w", f.Name(), rerr)}
		}
		if n == 0 {
			return nil
		}
		for n > 0 {
			k := min(n, max)
			b.commit(k)
			n -= k
		}
		if err := b.flush(); err != nil {
			return err
		}
	}
}

// vecReader reads a file into the slots sendFile reserves with one readv
// each, from an iovec array made once: unix.Readv makes one per call,
// and a send of a large file spent a tenth of its CPU allocating them
// (and faulting in the fresh heap they took) and collecting them.
type vecReader struct {
	rc  syscall.RawConn
	vec []unix.Iovec
	fn  func(fd uintptr) bool // readv, made once (a closure per call escapes)
	n   int
	err error
}

func newVecReader(f *os.File) (*vecReader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &vecReader{rc: rc, vec: make([]unix.Iovec, 0, 64)}
	r.fn = r.readv
	return r, nil
}

// read fills iov in order (at most its first 1024 slices, readv's
// limit) and returns the bytes read: 0 at the end of the file.
func (r *vecReader) read(iov [][]byte) (int, error) {
	if len(iov) == 0 {
		return 0, errors.New("no room to read into")
	}
	r.vec = r.vec[:0]
	for _, d := range iov[:min(len(iov), 1024)] {
		v := unix.Iovec{Base: unsafe.SliceData(d)}
		v.SetLen(len(d))
		r.vec = append(r.vec, v)
	}
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	return r.n, r.err
}

func (r *vecReader) readv(fd uintptr) bool {
	for {
		k, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&r.vec[0])), uintptr(len(r.vec)))
		if e == unix.EINTR {
			continue
		}
		r.n, r.err = int(k), nil
		if e != 0 {
			r.n, r.err = 0, e
		}
		return true
	}
}

// regularFile returns in as a regular file, if it is one.
func regularFile(in io.Reader) (*os.File, bool) {
	f, ok := in.(*os.File)
	if !ok {
		return nil, false
	}
	fi, err := f.Stat()
	return f, err == nil && fi.Mode().IsRegular()
}

// readable returns what says whether a read of in would return without
// waiting: for a pipe or a terminal, whether it has bytes now (poll); for
// an io.Pipe (tests), never; for any other reader, always.
func readable(in io.Reader) func() bool {
	if _, ok := in.(*io.PipeReader); ok {
		return func() bool { return false }
	}
	f, ok := in.(*os.File)
	if !ok {
		return func() bool { return true }
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return func() bool { return true }
	}
	return func() bool {
		n := 0
		rc.Control(func(fd uintptr) {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ = unix.Poll(p, 0)
		})
		return n > 0
	}
}

// sendLines sends one message per line, without its newline; what was
// read goes out whenever the input has nothing more buffered.
func sendLines(b sink, in io.Reader, max int) error {
	const maxLine = 1 << 20
	br := bufio.NewReaderSize(in, maxLine)
	for line := 1; ; line++ {
		msg, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			return &inputError{fmt.Errorf("line %d is longer than 1 MiB; the daemon accepts at most %d bytes per message", line, max)}
		}
		msg = trimEOL(msg)
		if len(msg) == 0 && rerr == io.EOF {
			return nil
		}
		if rerr != nil && rerr != io.EOF {
			return &inputError{fmt.Errorf("reading input: %w", rerr)}
		}
		if len(msg) > max {
			return &inputError{fmt.Errorf("line %d is %d bytes; the daemon accepts at most %d bytes per message", line, len(msg), max)}
		}
		slots, err := b.reserve(len(msg), 1)
		if err != nil {
			return err
		}
		b.commit(copy(slots[0], msg))
		if rerr == io.EOF {
			return nil
		}
		if br.Buffered() == 0 {
			if err := b.flush(); err != nil {
				return err
			}
			if err := b.heard(); err != nil {
				return err
			}
		}
	}
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
daemon leaves first), or on SIGINT/SIGTERM (exit 0). In a stream (a
burst read since the deliver ring was last empty), recv sleeps -nap
between looks at the ring instead of being woken by the daemon for each
publish: fewer wake-ups, and a message of a stream may wait up to -nap.
`

func recvCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("recv", "[-socket PATH] (-from ID | -all) [-bytes N | -count N] [-format raw|lines] [-o FILE] [-nap D]", recvText, stderr)
	sf.add(fs)
	from := fs.String("from", "", "deliver only member `ID`'s messages")
	all := fs.Bool("all", false, "deliver every member's messages")
	nbytes := fs.Int64("bytes", 0, "stop after N payload bytes (raw: exactly N bytes are written)")
	count := fs.Int64("count", 0, "stop after N messages")
	format := fs.String("format", "", "raw or lines (default: raw with -from, lines with -all)")
	out := fs.String("o", "", "write to `FILE` instead of stdout")
	nap := fs.Duration("nap", defaultRecvNap, "in a stream, sleep this long between looks at the deliver ring instead of waiting for the daemon's doorbell (0: never)")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "recv", "unexpected argument %q", fs.Arg(0))
	}
	if *nap < 0 || *nap > maxRecvNap {
		return usageErr(stderr, "recv", "-nap is %v, want 0 to %v", *nap, maxRecvNap)
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
	prog := newProgress(stderr, "received", *nbytes)
	err = recv(c, sub, w, bw, *format == "lines", *nbytes, *count, *nap, prog)
	prog.end()
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

// defaultRecvNap is recv's -nap: in a stream a nap replaces the
// doorbells' wake-ups (docs/local-api-history.md, "Napping in a stream"), and is
// itself one, of recv and of the Go runtime's sysmon ("Where the goodput
// row's time goes"): a streaming recv wakes about once per nap. A default
// deliver ring (4 MiB) holds two naps of a stream at 1 GB/s.
const defaultRecvNap = 2 * time.Millisecond

// maxRecvNap bounds -nap: longer, a stream at the daemon's rate fills
// the deliver ring while the reader sleeps.
const maxRecvNap = 10 * time.Millisecond

// recv subscribes to from's messages and writes them to w until the
// limits are reached or the stream ends. The daemon gives the connection
// a send buffer of several MiB (daemon.DefaultSocketBuffer), so an output that
// blocks for a moment does not hold its deliveries back.
func recv(c *localapi.Conn, from uint16, raw io.Writer, w *bufio.Writer, lines bool, maxBytes, maxCount int64, nap time.Duration, prog *progress) error {
	if _, err := c.Hello(localapi.HelloBatch); err != nil {
		return err
	}
	var rr *localapi.RingReceiver
	if c.Version() >= 2 {
		var err error
		if rr, err = c.DeliverRing(0); ringRefused(err) {
			rr = nil
		} else if err != nil {
			return err
		}
		if rr != nil {
			rr.SetNap(nap)
		}
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
		prog.add(len(data))
		return err
	}
	ended := func(err error) error {
		var e *localapi.Error
		if errors.As(err, &e) && e.Code == localapi.CodeClosed && maxBytes == 0 && maxCount == 0 {
			return nil // the daemon left; nothing more was asked for
		}
		if maxBytes > 0 || maxCount > 0 {
			return fmt.Errorf("after %d messages, %d bytes: %w", count, got, err)
		}
		return err
	}
	if rr != nil {
		// The deliver ring: the messages are read where the daemon put
		// them (output to a file goes out from there, raw or as lines,
		// up to 1024 pieces or 1 MiB per writev), released as they are
		// written (at least every 1024) and before sleeping.
		vw := newVecWriter(raw, lines)
		out := func(d *localapi.Deliver) error {
			if vw == nil {
				return write(d)
			}
			data := d.Data
			if maxBytes > 0 && got+int64(len(data)) > maxBytes && !lines {
				data = data[:maxBytes-got]
			}
			vw.add(d.From, data)
			got += int64(len(d.Data))
			count++
			prog.add(len(data))
			return nil
		}
		release := func() error {
			if err := vw.flush(); err != nil {
				return err
			}
			return rr.Release()
		}
		for n := 1; !done(); n++ {
			from, data, ok, err := rr.Next(false)
			if err == nil && !ok {
				// Nothing waits: out with what is read first.
				if err := vw.flush(); err != nil {
					return err
				}
				if err := w.Flush(); err != nil {
					return err
				}
				from, data, ok, err = rr.Next(true)
			}
			if err != nil {
				return ended(err)
			}
			if err := out(&localapi.Deliver{From: from, Data: data}); err != nil {
				return err
			}
			if n%1024 == 0 || vw.full() {
				if err := release(); err != nil {
					return err
				}
			}
		}
		return release()
	}
	for !done() {
		m, err := c.Read()
		if err != nil {
			return ended(err)
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
		if w.Buffered() > 0 && !c.Pending() {
			// Nothing more waits: out with it before waiting.
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// vecWriter writes messages to a file with one writev per batch,
// straight from where they are (the deliver ring): no copy into a buffer.
// As lines, each message is three pieces: its sender and a tab (from a
// small buffer of its own), the message, a newline.
type vecWriter struct {
	rc    syscall.RawConn
	lines bool
	iov   [][]byte // what waits; a slice of buf
	buf   [][]byte
	pre   []byte // the lines' "from\t" pieces that iov points into
	bytes int
	vec   []unix.Iovec // writev's, made once (unix.Writev allocates them per call)
}

func newVecWriter(w io.Writer, lines bool) *vecWriter {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	v := &vecWriter{rc: rc, lines: lines}
	if lines {
		v.pre = make([]byte, 0, 4096)
	}
	return v
}

var newline = []byte{'\n'}

// add queues one message from from (the sender shows only as lines).
func (v *vecWriter) add(from uint16, d []byte) {
	if v.lines {
		// A full pre is replaced, not grown in place: what iov holds of
		// the old one stays as it was.
		if cap(v.pre)-len(v.pre) < 6 {
			v.pre = make([]byte, 0, 2*cap(v.pre))
		}
		start := len(v.pre)
		v.pre = strconv.AppendUint(v.pre, uint64(from), 10)
		v.pre = append(v.pre, '\t')
		v.iov = append(v.iov, v.pre[start:len(v.pre):len(v.pre)])
		v.bytes += len(v.pre) - start + 1
	}
	if len(d) > 0 {
		v.iov = append(v.iov, d)
		v.bytes += len(d)
	}
	if v.lines {
		v.iov = append(v.iov, newline)
	}
	v.buf = v.iov
}

// full says that enough waits for a writev: 1024 pieces (the kernel's
// limit) or 1 MiB.
func (v *vecWriter) full() bool { return v != nil && (len(v.iov) >= 1024 || v.bytes >= 1<<20) }

// flush writes what was added (a nil vecWriter has nothing).
func (v *vecWriter) flush() error {
	if v == nil {
		return nil
	}
	for len(v.iov) > 0 {
		v.vec = v.vec[:0]
		for _, d := range v.iov[:min(len(v.iov), 1024)] {
			iv := unix.Iovec{Base: &d[0]}
			iv.SetLen(len(d))
			v.vec = append(v.vec, iv)
		}
		var n int
		var werr error
		err := v.rc.Write(func(fd uintptr) bool {
			// A raw system call, though a write to a file may wait: recv
			// has nothing else to run meanwhile (its other goroutines,
			// the signal's and the progress line's, only act once the
			// write is over), and by Syscall the first writev after each
			// nap woke the runtime's sysmon, which, once a write outlasted
			// its 20 µs look, handed the one P to another thread and went
			// on looking every 20 µs (docs/local-api.md, "The data path").
			r, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v.vec[0])), uintptr(len(v.vec)))
			n, werr = int(r), nil
			if e != 0 {
				n, werr = 0, e
			}
			return werr != unix.EAGAIN
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
		for n > 0 && len(v.iov) > 0 { // a short write: go on from where it stopped
			k := min(n, len(v.iov[0]))
			v.iov[0] = v.iov[0][k:]
			n -= k
			if len(v.iov[0]) == 0 {
				v.iov = v.iov[1:]
			}
		}
	}
	v.iov, v.bytes, v.pre = v.buf[:0], 0, v.pre[:0]
	return nil
}

const statusText = `Prints the group's members with their state (alive, suspected: silent
for half the failure timeout, dead: failed, stalled or left), the order
mode, rates, retransmissions, NACKs, repair latency and kernel drops;
over views, the views installed here since start (rejoins' included);
the local API's counters (sends accepted, queued, pending, subscribers)
and the link's (frames the kernel queued, received, filtered, other
groups' frames reaching the protocol, send retries); key mismatches of
an authenticated group.
Under FIFO and over views it shows who lags behind whom, from the
acknowledgement vector every frame carries: for each member behind some
sender, how many frames it holds fewer than that sender's last, as this
daemon last heard them ("acks: ... (all in step)" when none is behind;
-json: ack_lag, every live member and sender).
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
	if st.Rejoining {
		ready = "joining the group again"
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
			at := m.MAC
			if m.Addr != "" {
				at = m.Addr
			}
			ms[i] = fmt.Sprintf("%d (%s, incarnation %d)", m.ID, at, m.Incarnation)
		}
		fmt.Fprintf(w, "view %s: %s\n", daemon.ViewName(v.ID), strings.Join(ms, ", "))
		for _, c := range v.Changes {
			fmt.Fprintf(w, "  view %s installed at %s, %d members\n", daemon.ViewName(c.ID), c.At, c.Members)
		}
	}
	if st.Membership == "views" {
		fmt.Fprintf(w, "views installed here since start: %d (every rejoin's included)\n", st.ViewsInstalled)
	}
	if r := st.LastRejoin; r != nil {
		back := "joining again"
		if r.BackAt != "" {
			back = "a member again at " + r.BackAt
		}
		fmt.Fprintf(w, "rejoins: %d; the last: the group went on without this daemon at %s (view %s, %d of its messages not held by every member): %s; %s\n",
			st.Rejoins, r.At, daemon.ViewName(r.View), r.Unacknowledged, r.Reason, back)
	}
	if a := st.Auth; a != nil {
		fmt.Fprintf(w, "auth: %s\n", authLine(a))
		for _, c := range a.Changes {
			fmt.Fprintf(w, "  key %s %s at %s\n", c.Key, c.Step, c.At)
		}
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
	printAckLag(w, st.AckLag)
	fmt.Fprintf(w, "rates: sent %.0f msg/s, delivered %.0f msg/s (%.2f MB/s)\n", st.SentPerSec, st.DeliveredPerSec, st.DeliveredBytesPerSec/1e6)
	fmt.Fprintf(w, "sent %d, delivered %d, retransmissions %d, nacks sent %d received %d, in flight %d/%d\n",
		st.Sent, st.Delivered, st.Retransmissions, st.NacksSent, st.NacksReceived, st.InFlight, st.Window)
	fmt.Fprintf(w, "repair latency p50 %.2f ms p99 %.2f ms, kernel drops %d, bad frames %d, clients %d\n",
		st.RepairP50ms, st.RepairP99ms, st.KernelDrops, st.BadFrames, st.Clients)
	fmt.Fprintf(w, "local: sends accepted %d, unreliable %d, queued %d, pending %d, held data frames %d, subscribers %d\n",
		st.Accepted, st.Unreliable, st.Queued, st.Pending, st.HeldData, st.Subscribers)
	fmt.Fprintf(w, "link: kernel packets %d, frames received %d, filtered %d, other groups' frames %d, send retries %d\n",
		st.KernelPackets, st.LinkFrames, st.LinkFiltered, st.ForeignGroupFrames, st.SendRetries)
	for _, f := range st.ForeignVersions {
		fmt.Fprintf(w, "warning: host %s speaks rbcast protocol version %d; its frames are dropped\n", f.Host, f.Version)
	}
	printFiles(w, st.Files)
}

// printAckLag prints who lags behind whom, from the acknowledgement
// matrix (every PBP frame carries its sender's whole ack vector): a row
// per member that is behind some sender, a column per sender some
// member is behind, each cell how many frames the member holds fewer
// than the sender's last, as this daemon last heard ("." for none).
// Nothing behind is one line; no matrix (the registered total order)
// prints nothing.
func printAckLag(w io.Writer, lags []daemon.SenderLag) {
	if len(lags) == 0 {
		return
	}
	var senders []int
	behind := map[[2]int]uint32{} // member, sender
	var members []int
	for _, l := range lags {
		for _, m := range l.Members {
			if m.Behind == 0 {
				continue
			}
			if len(senders) == 0 || senders[len(senders)-1] != l.Sender {
				senders = append(senders, l.Sender)
			}
			if !slices.Contains(members, m.Member) {
				members = append(members, m.Member)
			}
			behind[[2]int{m.Member, l.Sender}] = m.Behind
		}
	}
	if len(senders) == 0 {
		fmt.Fprintln(w, "acks: every member holds every sender's last frame, as last heard (all in step)")
		return
	}
	slices.Sort(members)
	fmt.Fprintln(w, "acks: frames each member is behind each sender's last, as last heard:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  member")
	for _, s := range senders {
		fmt.Fprintf(tw, "\tfrom %d", s)
	}
	fmt.Fprintln(tw)
	for _, m := range members {
		fmt.Fprintf(tw, "  %d", m)
		for _, s := range senders {
			if n := behind[[2]int{m, s}]; n > 0 {
				fmt.Fprintf(tw, "\t%d", n)
			} else {
				fmt.Fprint(tw, "\t.")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// levelNames are the delivery levels of a Welcome's order.
var levelNames = map[uint8]string{localapi.OrderFIFO: "fifo", localapi.OrderTotal: "agreed", localapi.OrderSafe: "safe"}

// daemonReason is the daemon's Error behind err, a failed write or read
// on c, if the daemon sent one before it closed the connection; else err.
func daemonReason(c *localapi.Conn, err error) error {
	var e *localapi.Error
	if errors.As(err, &e) {
		return e
	}
	c.SetDeadline(time.Now().Add(time.Second))
	if _, rerr := c.Read(); errors.As(rerr, &e) {
		return e
	}
	return err
}

// levelOrders are a SendLevel's levels, by send -level.
var levelOrders = map[string]uint8{"fifo": localapi.OrderFIFO, "agreed": localapi.OrderTotal, "safe": localapi.OrderSafe}

// levelAllowed checks send -level against the level the daemon's group
// runs at (its Welcome's order) and the local API version it speaks: a
// total order over views sends each message Agreed or Safe (set: send a
// SendLevel first; the daemon refuses it in a registered total order,
// which has Agreed alone); any other group has one reliable level,
// chosen by every member at start (rbcastd run -order and -level), and
// FIFO is never offered per message in a total order.
func levelAllowed(level string, order uint8, version uint16) (set bool, err error) {
	if level == "reliable" || level == levelNames[order] {
		return false, nil
	}
	perMessage := order != localapi.OrderFIFO && level != "fifo"
	if perMessage && version >= 5 {
		return true, nil
	}
	why := "a group has one reliable level, chosen when its members start"
	switch {
	case perMessage:
		why = fmt.Sprintf("the daemon speaks local API version %d, which has no level per message (version 5 sends agreed or safe in a group run with -order total -membership views)", version)
	case level == "fifo":
		why = "FIFO per message is not offered in a total order (a FIFO message would wait for its sender's earlier messages to be ordered, as late as an Agreed one)"
	}
	how := map[string]string{"fifo": "-order fifo", "agreed": "-order total", "safe": "-order total -membership views"}
	return false, fmt.Errorf("-level %s: the daemon's group runs at %s, and %s (rbcastd run %s); send without -level, or with -level %s", level, levelNames[order], why, how[level], levelNames[order])
}

// authLine is a link's keys and drops, as status shows them (the
// group's link, and the files').
func authLine(a *daemon.AuthStatus) string {
	enc := ""
	if a.Encrypt {
		enc = ", encrypted"
	}
	var drops []string
	for _, r := range daemon.AuthReasons {
		if n := a.Dropped[r]; n > 0 {
			drops = append(drops, fmt.Sprintf("%s %d", r, n))
		}
	}
	if len(drops) == 0 {
		drops = []string{"none"}
	}
	rot := ""
	if a.Rotating {
		rot = ", rotating"
	}
	mismatch := ""
	if a.MismatchesSent > 0 || a.MismatchesReceived > 0 {
		mismatch = fmt.Sprintf(", key mismatches sent %d received %d", a.MismatchesSent, a.MismatchesReceived)
	}
	return fmt.Sprintf("key %s (id %d)%s%s (accepting %s), %d frames verified, dropped: %s%s", a.Active, a.ActiveID, enc, rot, strings.Join(a.Accepted, ", "), a.Verified, strings.Join(drops, ", "), mismatch)
}
