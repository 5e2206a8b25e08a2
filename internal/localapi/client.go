package localapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/link/netyield"
	"golang.org/x/sys/unix"
)

// SocketDir is where the daemon's socket lives by default.
const SocketDir = "/run/rbcastd"

// DefaultSocket is the default socket path of group g.
func DefaultSocket(group uint32) string {
	return filepath.Join(SocketDir, fmt.Sprintf("group-%d.sock", group))
}

// Conn is a client's connection to the daemon.
type Conn struct {
	c    *net.UnixConn
	path string
	rbuf []byte
	wbuf []byte
	dec  Decoder
	r    *PacketReader
	rc   syscall.RawConn
	bell *Bell // rc's doorbells

	version uint16   // agreed by Hello
	mems    [][]byte // the rings' mappings, unmapped by Close
}

// DialError says why the daemon's socket could not be reached. Its
// message starts with what went wrong, not with a program's name (the
// command that dialled adds its own).
type DialError struct {
	Path string
	Err  error
}

func (e *DialError) Error() string {
	switch {
	case errors.Is(e.Err, syscall.ENOENT):
		return fmt.Sprintf("no daemon socket at %s (is `rbcastd run` running for this group? pick its socket with -socket)", e.Path)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nobody listens on %s (a stale socket: the daemon is not running)", e.Path)
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		return fmt.Sprintf("permission denied on %s (this user may not use the daemon's socket: see its mode and group)", e.Path)
	case errors.Is(e.Err, syscall.EPROTOTYPE):
		return fmt.Sprintf("%s is not a SOCK_SEQPACKET socket (not an rbcastd socket?)", e.Path)
	}
	return fmt.Sprintf("connecting to %s: %v", e.Path, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Dial connects to the daemon's socket (it does not say Hello).
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			var se *os.SyscallError
			if errors.As(oe.Err, &se) {
				err = se.Err
			} else {
				err = oe.Err
			}
		}
		return nil, &DialError{Path: path, Err: err}
	}
	cn := &Conn{path: path, rbuf: make([]byte, 1+MaxStatus+1)}
	if err := cn.attach(c); err != nil {
		c.Close()
		return nil, &DialError{Path: path, Err: err}
	}
	return cn, nil
}

// attach makes c the connection's socket.
func (cn *Conn) attach(c *net.UnixConn) error {
	r, err := NewPacketReader(c, 0)
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	cn.c, cn.r, cn.rc, cn.bell = c, r, rc, NewBell(rc)
	return nil
}

// Close closes the connection.
func (c *Conn) Close() error {
	err := c.c.Close()
	for _, m := range c.mems {
		UnmapRing(m)
	}
	c.mems = nil
	return err
}

// CloseWrite shuts the sending half down; the daemon sees the end.
func (c *Conn) CloseWrite() error { return c.c.CloseWrite() }

// Write sends one message.
func (c *Conn) Write(m Message) error {
	c.wbuf = m.Append(c.wbuf[:0])
	return c.WritePacket(c.wbuf)
}

// writeBell writes a Doorbell (Bell).
func (c *Conn) writeBell(m *Doorbell) error {
	c.wbuf = m.Append(c.wbuf[:0])
	return c.bell.Write(c.wbuf)
}

// WritePacket sends one message encoded already (a SendBatch a client
// fills in place, for example): p must be a whole message.
func (c *Conn) WritePacket(p []byte) error {
	_, err := c.c.Write(p)
	if errors.Is(err, syscall.EMSGSIZE) {
		return fmt.Errorf("a %v of %d bytes is larger than the socket carries: %w", Type(p[0]), len(p), err)
	}
	return err
}

// SetSpin has reads look for a packet this long, yielding the CPU between
// looks, before they sleep until one arrives: a client waiting for one
// answer at a time (a ping) then need not be woken, which costs tens of
// µs in a VM whose idle vCPUs halt (as the ring's Config.RxSpin). Zero,
// the default, never spins.
func (c *Conn) SetSpin(d time.Duration) { c.r.SetSpin(d) }

// ErrDaemonClosed is returned by Read when the daemon closed the
// connection without an Error message.
var ErrDaemonClosed = errors.New("the daemon closed the connection")

// Read returns the next message, valid (with its data fields) until the
// next Read; in steady state Read does not allocate. An Error message is
// returned as the *Error error.
func (c *Conn) Read() (Message, error) {
	n, err := c.ReadPacket(c.rbuf)
	if err != nil {
		return nil, err
	}
	m, err := c.dec.Decode(c.rbuf[:n])
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*Error); ok {
		return nil, e
	}
	return m, nil
}

// ReadPacket reads the next packet into buf, undecoded (a client that
// decodes elsewhere, with a Decoder of its own); buf should hold
// MaxBatch bytes, or 1+MaxStatus to take a StatusJSON.
func (c *Conn) ReadPacket(buf []byte) (int, error) {
	n, trunc, err := c.r.Read(buf)
	if errors.Is(err, io.EOF) {
		return 0, ErrDaemonClosed
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, ErrDaemonClosed // SOCK_SEQPACKET: the daemon closed
	}
	if trunc {
		return 0, fmt.Errorf("a message from the daemon exceeded %d bytes", len(buf))
	}
	return n, nil
}

// PacketReader reads the packets of a SOCK_SEQPACKET connection without
// allocating (net.UnixConn's ReadMsgUnix allocates the peer's address on
// every read). With a spin it first looks for a packet that long,
// yielding the CPU between looks, before it sleeps in the poller until one
// arrives (Conn.SetSpin; the daemon reads its clients the same way). It
// honours the connection's read deadline. One goroutine at a time may
// Read.
type PacketReader struct {
	rc  syscall.RawConn
	try func(fd uintptr) bool // r.recv, made once
	// spin is the read's poll (the poller once per readerPoller); its
	// start is zero until the read has spun.
	spin spinner
	// The read in progress.
	buf    []byte
	n      int
	errno  syscall.Errno
	spun   bool
	polled bool // the read has waited in the poller (for hops.SocketRead)
	// ready, if set, is looked at between the looks of a spin (sleep
	// false) and before the read sleeps in the poller (sleep true); true
	// ends the read with ErrReady (the daemon polls a client's send ring
	// so).
	ready    func(sleep bool) bool
	wasReady bool
}

// ErrReady is returned by PacketReader.Read when its ready function said
// so before a packet came.
var ErrReady = errors.New("localapi: ready before a packet came")

// SetReady has Read look at ready between the looks of a spin (sleep
// false) and before it sleeps (sleep true, which should prepare the
// other end to wake it: a ring's WaitData); Read returns ErrReady when
// it reports true. nil: no such look.
func (r *PacketReader) SetReady(ready func(sleep bool) bool) { r.ready = ready }

// readerPoller is how often a PacketReader's spin lets the network
// poller run (netyield.Spin). The daemon reads its clients with this
// spin, beside the ring link's, whose spin asks as often (link/ring's
// spinPoller): a goroutine the poller holds (another client's doorbell)
// runs within readerPoller.
const readerPoller = 20 * time.Microsecond

// SetSpin sets how long the next reads look for a packet before they
// sleep (0: never).
func (r *PacketReader) SetSpin(d time.Duration) { r.spin.d = d }

// NewPacketReader returns a reader of c's packets that spins for spin
// (0: never) before it sleeps.
func NewPacketReader(c *net.UnixConn, spin time.Duration) (*PacketReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &PacketReader{rc: rc, spin: spinner{d: spin, pace: netyield.Spin{Poller: readerPoller}}}
	r.try = r.recv
	return r, nil
}

// Read reads one packet into buf (which must not be empty). truncated
// says the packet was longer than buf: its first len(buf) bytes are in
// buf, the rest is lost. A zero n with a nil error is the peer's close.
func (r *PacketReader) Read(buf []byte) (n int, truncated bool, err error) {
	r.buf, r.n, r.errno, r.spin.start, r.spun, r.polled, r.wasReady = buf, 0, 0, time.Time{}, false, false, false
	if err := r.rc.Read(r.try); err != nil {
		return 0, false, &net.OpError{Op: "read", Net: "unixpacket", Err: err}
	}
	r.buf = nil
	if r.wasReady {
		return 0, false, ErrReady
	}
	if r.errno != 0 {
		return 0, false, &net.OpError{Op: "read", Net: "unixpacket", Err: os.NewSyscallError("recvfrom", r.errno)}
	}
	if r.n > len(buf) {
		return len(buf), true, nil
	}
	return r.n, false, nil
}

// recvfromSyscall makes recv's recvfrom (a variable: tests count the
// calls). Raw: the call never waits (MSG_DONTWAIT) and copies one
// packet, so nothing needs the P meanwhile; and as the first system call
// after the poller woke the reader, by Syscall it woke the runtime's
// sysmon from its sleep after every idle spell (docs/runtime.md, "The Go
// runtime's sysmon, and our system calls").
var recvfromSyscall = unix.RawSyscall6

// recv is one attempt of Read on the socket: a non-blocking recvfrom
// without the peer's address (MSG_TRUNC: the packet's whole length), then
// the spin; false has the poller wait until the socket is readable.
func (r *PacketReader) recv(fd uintptr) bool {
	for {
		n, _, e := recvfromSyscall(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)),
			unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		switch e {
		case 0:
			r.n = int(n)
			w := uint32(0)
			if !r.spin.start.IsZero() {
				w = 1
			}
			if r.polled {
				w = 2
			}
			hops.At(hops.SocketRead, w)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			r.errno = e
			return true
		}
		if r.spin.d <= 0 || r.spun {
			return r.sleep()
		}
		now := r.spin.pace.Now()
		if (r.spin.start.IsZero() && !r.spin.begin(now)) || r.spin.over(now) {
			r.spun = true
			return r.sleep()
		}
		if r.ready != nil && r.ready(false) {
			r.wasReady = true
			return true
		}
		if !r.spin.pace.Between(now, r.spin.d) {
			r.spun = true
		}
	}
}

// sleep is recv's end when no packet came: Read ends with ErrReady if
// ready says so, else it waits in the poller (false).
func (r *PacketReader) sleep() bool {
	if r.ready != nil && r.ready(true) {
		r.wasReady = true
		return true
	}
	r.polled = true
	return false
}

// Pending reports whether a packet waits to be read (SIOCINQ), so that
// a client may write out what it buffered before a Read that would wait.
func (c *Conn) Pending() bool {
	n := 0
	c.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// Hello says hello with flags (HelloWaitReady: the daemon answers once
// the group has started; HelloBatch: this client reads DeliverBatch) and
// returns the daemon's Welcome.
//
// It offers this build's Version; an earlier daemon refuses it
// (CodeVersion, and closes the connection), and Hello then connects again
// and says hello in the latest version the daemon's refusal names (a
// daemon of version 1 names none: version 1): Version tells which was
// agreed (rings need 2, SendLevel 5, CodeQueuedBound 6).
func (c *Conn) Hello(flags uint16) (*Welcome, error) {
	w, err := c.hello(Version, flags)
	var e *Error
	if errors.As(err, &e) && e.Code == CodeVersion {
		nc, derr := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: c.path, Net: "unixpacket"})
		if derr != nil {
			return nil, err
		}
		c.c.Close()
		if derr := c.attach(nc); derr != nil {
			nc.Close()
			return nil, err
		}
		w, err = c.hello(daemonVersion(e.Text), flags)
	}
	return w, err
}

// daemonVersion is the latest version a daemon's refusal of a Hello
// names ("this daemon speaks local API versions 1 to 4; ..."), below
// this build's, or MinVersion.
func daemonVersion(refusal string) uint16 {
	var lo, hi uint16
	if _, err := fmt.Sscanf(refusal, "this daemon speaks local API versions %d to %d", &lo, &hi); err != nil || hi < MinVersion || hi >= Version {
		return MinVersion
	}
	return hi
}

func (c *Conn) hello(version, flags uint16) (*Welcome, error) {
	if err := c.Write(&Hello{Version: version, Flags: flags}); err != nil {
		return nil, err
	}
	m, err := c.Read()
	if err != nil {
		return nil, err
	}
	w, ok := m.(*Welcome)
	if !ok {
		return nil, fmt.Errorf("the daemon answered Hello with %v", m.Type())
	}
	c.version = w.Version
	cp := *w // the caller's, not the decoder's
	return &cp, nil
}

// Version is the local API version Hello agreed on (0 before Hello).
func (c *Conn) Version() uint16 { return c.version }

// openRing asks the daemon for a ring (RingSetup) and maps the memory
// that comes with its RingReady.
func (c *Conn) openRing(which uint8, size int) (*Ring, error) {
	if c.version < 2 {
		return nil, fmt.Errorf("the daemon speaks local API version %d; rings need version 2", c.version)
	}
	if err := c.Write(&RingSetup{Ring: which, Size: uint32(size)}); err != nil {
		return nil, err
	}
	buf := make([]byte, 1+MaxText+errorMin)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, cm := range cms {
			if f, err := unix.ParseUnixRights(&cm); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n == 0 {
		return nil, ErrDaemonClosed
	}
	m, err := Decode(buf[:n])
	if err != nil {
		return nil, err
	}
	switch m := m.(type) {
	case *Error:
		return nil, m
	case *RingReady:
		if m.Ring != which || len(fds) != 1 {
			return nil, fmt.Errorf("the daemon answered RingSetup with ring %d and %d file descriptors", m.Ring, len(fds))
		}
		mem, err := MapRingMemory(fds[0], int(m.Size))
		if err != nil {
			return nil, err
		}
		c.mems = append(c.mems, mem)
		return NewRing(which, mem, int(m.Size)) // the records' bounds are the ring's

	}
	return nil, fmt.Errorf("the daemon answered RingSetup with %v", m.Type())
}

// The clients' doorbells, made once: a message passed as an interface
// escapes, and these go out often.
var (
	sendBell    = &Doorbell{Ring: RingSend}
	deliverBell = &Doorbell{Ring: RingDeliver}
)

// RingSender sends messages through a send ring (version 2): the client
// writes them into memory the daemon reads, with no system call per
// packet. Messages are sent in order with those of Write; a Flush (or
// any request) on the connection comes after every message published
// before it.
type RingSender struct {
	c     *Conn
	r     *Ring
	slots [][]byte
	bells uint64
}

// Doorbells is how many Doorbells Publish has written: the daemon slept
// (its wantData set) when they were published, rather than polling.
func (s *RingSender) Doorbells() uint64 { return s.bells }

// SendRing opens a send ring with a data area of size bytes (DefaultRing
// when 0).
func (c *Conn) SendRing(size int) (*RingSender, error) {
	if size == 0 {
		size = DefaultRing
	}
	r, err := c.openRing(RingSend, size)
	if err != nil {
		return nil, err
	}
	return &RingSender{c: c, r: r}, nil
}

// Reserve returns room for up to k messages of n bytes each (at least
// one), waiting for room if the ring is full; fill them and Commit each,
// in order (every one but the last committed full: Ring.Commit).
func (s *RingSender) Reserve(n, k int) ([][]byte, error) {
	for {
		var err error
		s.slots, err = s.r.Reserve(s.slots, n, k)
		if err == nil {
			return s.slots, nil
		}
		if !errors.Is(err, ErrRingFull) {
			return nil, err
		}
		if err := s.Publish(); err != nil {
			return nil, err
		}
		if err := s.waitSpace(n); err != nil {
			return nil, err
		}
	}
}

// Commit adds the next reserved message, its first k bytes.
func (s *RingSender) Commit(k int) { s.r.Commit(0, k) }

// Add copies d into the ring as a message, waiting for room.
func (s *RingSender) Add(d []byte) error {
	for {
		err := s.r.Add(0, d)
		if !errors.Is(err, ErrRingFull) {
			return err
		}
		if err := s.Publish(); err != nil {
			return err
		}
		if err := s.waitSpace(len(d)); err != nil {
			return err
		}
	}
}

// Publish makes the messages added so far visible to the daemon, ringing
// it if it sleeps.
func (s *RingSender) Publish() error {
	if s.r.Publish() {
		s.bells++
		return s.c.writeBell(sendBell)
	}
	return nil
}

// waitSpace sleeps until the daemon has made room for a message of n
// bytes (its DaemonDoorbell), or says why not (an Error: a message
// refused, the group stopped).
func (s *RingSender) waitSpace(n int) error {
	for {
		sleep, err := s.r.WaitSpace(n)
		if err != nil || !sleep {
			return err
		}
		m, err := s.c.Read()
		if err != nil {
			return err
		}
		if d, ok := m.(*DaemonDoorbell); !ok || d.Ring != RingSend {
			return fmt.Errorf("the daemon sent %v while the send ring was full", m.Type())
		}
	}
}

// RingReceiver reads the group's deliveries from a deliver ring (version
// 2) after a Subscribe on the same connection.
type RingReceiver struct {
	c     *Conn
	r     *Ring
	ended error // the daemon's Error ending the stream, once read
	spin  spinner
	waits uint64
	nap   napper
}

// napper has a reader of a stream sleep on a timer between looks
// instead of asking for a doorbell (RingReceiver.SetNap).
type napper struct {
	d     time.Duration
	got   int                 // bytes read since the ring was last found empty
	naps  uint64              // naps taken
	found uint64              // naps after which a record waited
	sleep func(time.Duration) // napSleep (a test's fake)
}

// napSleep is a nap that keeps the P: a raw nanosleep, then
// runtime.Gosched, which runs what became runnable meanwhile (the
// signal's goroutine, a progress line's timer) and tells the runtime the
// goroutine is not stuck. By time.Sleep the process's one P went idle at
// every nap, so the runtime's sysmon slept until the nap's timer and woke
// with it, a second thread's wake-up per nap; with the P kept busy,
// sysmon backs off to a look every 10 ms (docs/local-api.md, "The data
// path"). A signal that interrupts the nanosleep (the runtime's
// preemption signal, SIGURG, among them) does not end the nap early: it
// sleeps on for what is left. A collection waits for the nap at most: at
// one P (recv's) it runs only while the reader has given the P away, and
// the reader's own code between naps lets a collection's request stop it
// at more.
func napSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for {
		var rem unix.Timespec
		_, _, e := unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), uintptr(unsafe.Pointer(&rem)), 0)
		if e != unix.EINTR {
			break
		}
		ts = rem
	}
	runtime.Gosched()
}

// NapBurst is how much a reader must have read since it last found its
// ring empty for its next empty ring to be a stream's (RingReceiver.SetNap).
const NapBurst = 32 << 10

// Sleeps is how many times Next has slept until a packet came (a
// DaemonDoorbell, mostly): the deliveries its polls did not find.
func (rr *RingReceiver) Sleeps() uint64 { return rr.waits }

// SetSpin has Next(true) poll the ring this long, yielding the CPU
// between looks, before it sleeps until a DaemonDoorbell (0, the
// default: never). While it polls, the ring's wantData stays clear, so
// the daemon publishes without writing a doorbell and the client is not
// woken: a client waiting for one message at a time (a ping) saves the
// doorbell's write and its own wake-up. The poll backs off when the CPU
// is contended, as Conn.SetSpin's.
func (rr *RingReceiver) SetSpin(d time.Duration) { rr.spin.d = d }

// SetNap has Next(true), finding the ring empty after a burst (at least
// NapBurst bytes read since it last found it empty: a stream, not single
// messages), sleep d on a timer and look again, instead of setting
// wantData and sleeping until a DaemonDoorbell. While it naps wantData
// stays clear, so the daemon publishes without writing a doorbell and
// the client wakes once per nap, whatever the daemon published
// meanwhile, not once per publish. What the nap found starts the next
// burst; a nap that finds nothing, or too short a burst, goes back to
// the doorbell. The cost is latency in a stream only: a message
// published just after the reader lay down waits up to d. 0, the
// default: never. A ring of size bytes holds what d lets pile up only
// while d × rate stays below it.
func (rr *RingReceiver) SetNap(d time.Duration) { rr.nap.d = d }

// Naps is how many naps Next took, and after how many of them a record
// waited (SetNap).
func (rr *RingReceiver) Naps() (naps, found uint64) { return rr.nap.naps, rr.nap.found }

// napped naps once when the reader read a burst since the ring was last
// empty, and reports whether a record waits after it.
func (rr *RingReceiver) napped() bool {
	burst := rr.nap.got
	rr.nap.got = 0
	if rr.nap.d <= 0 || burst < NapBurst {
		return false
	}
	sleep := rr.nap.sleep
	if sleep == nil {
		sleep = napSleep
	}
	rr.nap.naps++
	sleep(rr.nap.d)
	if rr.r.Waiting() {
		rr.nap.found++
		return true
	}
	return false
}

// DeliverRing opens a deliver ring with a data area of size bytes
// (DefaultRing when 0); Subscribe then fills it.
func (c *Conn) DeliverRing(size int) (*RingReceiver, error) {
	if size == 0 {
		size = DefaultRing
	}
	r, err := c.openRing(RingDeliver, size)
	if err != nil {
		return nil, err
	}
	return &RingReceiver{c: c, r: r, spin: spinner{pace: netyield.Spin{Poller: spinPoller}}}, nil
}

// Next returns the next delivered message; its data is in the ring,
// valid until Release. With wait false it returns ok false when none
// waits; with wait true it releases what was read and sleeps until one
// comes. Once the daemon ends the stream (an Error after its last
// deliveries), Next returns what is left in the ring, then that Error.
// Other messages on the connection (Subscribed) are skipped.
func (rr *RingReceiver) Next(wait bool) (from uint16, data []byte, ok bool, err error) {
	w := uint32(hops.RingPolled)
	for {
		from, data, ok, err = rr.r.Next()
		if err != nil || ok {
			rr.nap.got += len(data)
			if ok && wait {
				hops.At(hops.SocketRead, w)
			}
			return from, data, ok, err
		}
		if rr.ended != nil {
			return 0, nil, false, rr.ended
		}
		if !wait {
			return 0, nil, false, nil
		}
		if err := rr.Release(); err != nil {
			return 0, nil, false, err
		}
		if rr.napped() {
			continue
		}
		if rr.spin.d > 0 && rr.poll() {
			continue
		}
		sleep, err := rr.r.WaitData()
		if err != nil {
			return 0, nil, false, err
		}
		if !sleep {
			continue
		}
		// A DaemonDoorbell, or Subscribed: look again.
		rr.waits++
		w = hops.RingWoken
		if _, err := rr.c.Read(); err != nil {
			var e *Error
			if !errors.As(err, &e) && !errors.Is(err, ErrDaemonClosed) {
				return 0, nil, false, err
			}
			rr.ended = err // after the records still in the ring
		}
	}
}

// poll looks at the ring until a record may wait (true) or the spin is
// over (false), without a system call per look.
func (rr *RingReceiver) poll() bool {
	if !rr.spin.begin(rr.spin.pace.Now()) {
		return false
	}
	for {
		if rr.r.Waiting() {
			return true
		}
		if !rr.spin.yield() {
			return rr.r.Waiting()
		}
	}
}

// Release frees the messages Next returned, ringing the daemon if it
// waits for room.
func (rr *RingReceiver) Release() error {
	if rr.r.Release() {
		return rr.c.writeBell(deliverBell)
	}
	return nil
}

// SetDeadline bounds the connection's reads and writes (zero: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// RingMemories returns the mappings of c's rings (for tests that play a
// hostile client).
func RingMemories(c *Conn) [][]byte { return c.mems }
