//go:build linux

// Package linkbench measures link backends on a real network-namespace
// topology: frames/s and MB/s from one sender to N−1 receivers through a
// bridge, and one-frame latency. It drives every backend through the
// link.Link interface, so the numbers compare like with like. It needs
// root (namespaces, CAP_NET_RAW). cmd/linkbench prints its report.
package linkbench

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/link/udp"
	"github.com/rbcast/rbcast/testnet/netns"
)

// ringBackends are the ring backends' configurations.
var ringBackends = map[string]ring.Config{
	"ring-v3":      {Version: ring.V3, TxMode: ring.TxRing},
	"ring-v2":      {Version: ring.V2, TxMode: ring.TxRing},
	"ring-v3-mmsg": {Version: ring.V3, TxMode: ring.TxSendmmsg},
	"ring-v2-mmsg": {Version: ring.V2, TxMode: ring.TxSendmmsg},
}

// IsRing says whether name is a ring backend (one that takes an RxSpin).
func IsRing(name string) bool {
	_, ok := ringBackends[name]
	return ok
}

// OpenRing opens the ring backend name on ifname with RxSpin spin; a name
// that is not a ring backend is an error.
func OpenRing(name, ifname string, spin time.Duration) (link.Link, error) {
	cfg, ok := ringBackends[name]
	if !ok {
		return nil, fmt.Errorf("%q is not a ring backend", name)
	}
	cfg.RxSpin = spin
	return ring.Open(ifname, cfg)
}

// Backends maps a backend name to how it is opened.
var Backends = map[string]func(ifname string) (link.Link, error){
	"ring-v3":      func(n string) (link.Link, error) { return ring.Open(n, ringBackends["ring-v3"]) },
	"ring-v2":      func(n string) (link.Link, error) { return ring.Open(n, ringBackends["ring-v2"]) },
	"ring-v3-mmsg": func(n string) (link.Link, error) { return ring.Open(n, ringBackends["ring-v3-mmsg"]) },
	"ring-v2-mmsg": func(n string) (link.Link, error) { return ring.Open(n, ringBackends["ring-v2-mmsg"]) },
	"afpacket":     func(n string) (link.Link, error) { return afpacket.Open(n, afpacket.Config{}) },
	"plain":        openPlain,
	// link/udp multicast on the interface (hosts need addresses:
	// netns.Options.Addresses), with and without UDP GSO and GRO. Not in
	// BackendNames: the tables of docs/udp.md use them.
	"udp":       func(n string) (link.Link, error) { return udp.Open(UDPConfig(n, false)) },
	"udp-nogso": func(n string) (link.Link, error) { return udp.Open(UDPConfig(n, true)) },
}

// UDPConfig is the configuration of the "udp" backends on interface n:
// multicast group 239.77.88.1:7088, TTL 8 (so it crosses a routed
// topology's router), no loopback (one member per host).
func UDPConfig(n string, noOffload bool) udp.Config {
	return udp.Config{Group: netip.MustParseAddrPort("239.77.88.1:7088"), Interface: n, TTL: 8, NoLoopback: true, NoGSO: noOffload, NoGRO: noOffload}
}

// BackendNames lists the backends in report order.
// "ring-vN" sends through PACKET_TX_RING, "ring-vN-mmsg" through sendmmsg;
// both receive on the mmap'ed ring.
var BackendNames = []string{"ring-v2", "ring-v3", "ring-v2-mmsg", "ring-v3-mmsg", "afpacket", "plain"}

// Options describe one throughput run.
type Options struct {
	Backend string
	// Sender, when set, is the backend of the sending host only; the
	// receivers use Backend. It separates send-path from receive-path
	// costs.
	Sender   string
	Hosts    int // 1 sender + Hosts−1 receivers
	MTU      int
	Duration time.Duration
	Batch    int // frames per Send
	Prefix   string
	// Processes runs each receiver as a process of its own in its host's
	// namespace, as on real hosts; otherwise receivers are goroutines of
	// this process. The program must call MaybeChild first thing.
	Processes bool
	// Overlap has the sender fill the transmit ring (ring.Link.Stage)
	// while a second goroutine has the kernel transmit it (Kick), as the
	// reliable runtime sends; otherwise each Send fills and transmits in
	// turn on one goroutine. Only the ring backends can stage.
	Overlap bool
	// Work has both ends touch every frame as little as a reliable,
	// checksummed protocol must: the sender copies the payload into a
	// history slot (a ring of 256 frame buffers, which are what it sends)
	// and computes a CRC32C over the frame; each receiver computes the
	// CRC32C of every frame and copies its payload out, as Recv does. It
	// bounds what any such protocol can reach on the link (the ring still
	// makes its own copy into the TX slot).
	Work bool
	// RxSpin has the receivers' rings poll this long, yielding the CPU,
	// before sleeping (ring.Config.RxSpin: negative never); 0 leaves every
	// link at its backend's default (ring.DefaultRxSpin for the rings).
	// Other than 0: ring backends only (receiver processes too).
	RxSpin time.Duration
}

// stager is the ring link's split Send (link/ring Stage and Kick).
type stager interface {
	Stage(frames [][]byte) (int, error)
	Kick() error
}

// Throughput is the outcome of one run.
type Throughput struct {
	Options
	Sent        uint64
	SendRetries uint64
	Elapsed     time.Duration
	Receivers   []Receiver
}

// Receiver is what one receiver got.
type Receiver struct {
	Frames      uint64
	Corrupt     uint64 // Work: frames whose CRC32C did not match
	Checked     uint64 // Work: frames whose CRC32C matched, payload copied out
	Bytes       uint64 // whole Ethernet frames, header included
	Lost        uint64 // sequence numbers never seen
	KernelDrops uint64
	Elapsed     time.Duration // first to last frame
	// Err is the Recv error that ended the receiver before the run did
	// (links are closed only after it ends); its counts are short then.
	Err string `json:",omitempty"`
}

// MBps is the receiver's delivered rate in 10⁶ bytes per second over the
// sender's sending time.
func (r Receiver) MBps(elapsed time.Duration) float64 {
	return float64(r.Bytes) / elapsed.Seconds() / 1e6
}

// MeanMBps and MinMBps summarise the receivers.
func (t *Throughput) MeanMBps() float64 {
	var s float64
	for _, r := range t.Receivers {
		s += r.MBps(t.Elapsed)
	}
	return s / float64(len(t.Receivers))
}

// FramesPerSec is the sender's rate.
func (t *Throughput) FramesPerSec() float64 { return float64(t.Sent) / t.Elapsed.Seconds() }

// LossPct is the mean share of frames a receiver never got.
func (t *Throughput) LossPct() float64 {
	var lost, frames uint64
	for _, r := range t.Receivers {
		lost += r.Lost
		frames += r.Frames + r.Lost
	}
	if frames == 0 {
		return 0
	}
	return 100 * float64(lost) / float64(frames)
}

func openOn(h *netns.Host, open func(string) (link.Link, error)) (link.Link, error) {
	var l link.Link
	err := h.Do(func() error {
		var err error
		l, err = open(h.Iface)
		return err
	})
	return l, err
}

// RunThroughput builds a topology, blasts MTU-sized broadcast frames from
// host 0 for the duration, and counts what every other host receives.
func RunThroughput(o Options) (*Throughput, error) {
	if _, _, err := o.openers(); err != nil {
		return nil, err
	}
	topo, err := netns.New(netns.Options{Hosts: o.Hosts, MTU: o.MTU, Prefix: o.Prefix})
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	return RunThroughputOn(topo, o)
}

// RunThroughputOn is RunThroughput on a topology the caller built (and
// keeps): o.Hosts and o.MTU are taken from it, o.Prefix is ignored. Loss
// set on its hosts stays in place, so the ceiling under loss can be
// measured beside a protocol on the same segment.
func RunThroughputOn(topo *netns.Topology, o Options) (*Throughput, error) {
	open, openSender, err := o.openers()
	if err != nil {
		return nil, err
	}
	if o.Batch == 0 {
		o.Batch = 64
	}
	o.Hosts, o.MTU, o.Prefix = len(topo.Hosts), topo.MTU, topo.Prefix
	return runOn(topo, o, open, openSender)
}

// openers looks up the receivers' backend and the sender's (the receivers'
// one unless o.Sender is set).
func (o Options) openers() (open, openSender func(string) (link.Link, error), err error) {
	open, ok := Backends[o.Backend]
	if !ok {
		return nil, nil, fmt.Errorf("unknown backend %q (have %v)", o.Backend, BackendNames)
	}
	openSender = open
	if o.RxSpin != 0 {
		if _, ok := ringBackends[o.Backend]; !ok {
			return nil, nil, fmt.Errorf("RxSpin %v: the receivers must be on a ring backend (have %q)", o.RxSpin, o.Backend)
		}
		open = func(n string) (link.Link, error) {
			return OpenRing(o.Backend, n, o.RxSpin)
		}
	}
	if o.Sender != "" {
		if openSender, ok = Backends[o.Sender]; !ok {
			return nil, nil, fmt.Errorf("unknown sender backend %q (have %v)", o.Sender, BackendNames)
		}
	}
	return open, openSender, nil
}

func runOn(topo *netns.Topology, o Options, open, openSender func(string) (link.Link, error)) (*Throughput, error) {
	sender, err := openOn(topo.Hosts[0], openSender)
	if err != nil {
		return nil, err
	}
	defer sender.Close()
	res := &Throughput{Options: o, Receivers: make([]Receiver, o.Hosts-1)}
	var finish func() error
	if o.Processes {
		finish, err = startChildren(topo, o.Backend, res, o.Work, o.RxSpin)
	} else {
		finish, err = startGoroutines(topo, open, res, o.Work)
	}
	if err != nil {
		return nil, err
	}
	finished := false
	defer func() {
		if !finished {
			finish()
		}
	}()
	// Let receivers reach their first Recv before the clock starts.
	time.Sleep(100 * time.Millisecond)

	frames := make([][]byte, o.Batch)
	src, err := srcMAC(sender)
	if err != nil {
		return nil, err
	}
	newFrame := func() []byte {
		b := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
		return append(b, make([]byte, sender.MTU())...) // o.MTU less the IP and UDP headers on udp
	}
	for i := range frames {
		frames[i] = newFrame()
	}
	// Work: the history slots the frames are built in, and the payload
	// the application hands over.
	var history [][]byte
	var payload []byte
	if o.Work {
		history = make([][]byte, max(workHistory, o.Batch))
		for i := range history {
			history[i] = newFrame()
		}
		payload = make([]byte, sender.MTU()-crcLen-8)
		for i := range payload {
			payload[i] = byte(i)
		}
	}
	next := 0
	send := sender.Send
	stopKicker := func() error { return nil }
	if o.Overlap {
		st, ok := sender.(stager)
		if !ok {
			name := o.Sender
			if name == "" {
				name = o.Backend
			}
			return nil, fmt.Errorf("backend %q cannot overlap staging and transmitting (no Stage/Kick)", name)
		}
		kick, kicked := make(chan struct{}, 1), make(chan error, 1)
		go func() {
			var first error
			for range kick {
				if err := st.Kick(); err != nil && first == nil {
					first = err
				}
			}
			if err := st.Kick(); err != nil && first == nil { // what the last Stage left
				first = err
			}
			kicked <- first
		}()
		send = func(frames [][]byte) (int, error) {
			n, err := st.Stage(frames)
			select {
			case kick <- struct{}{}:
			default:
			}
			return n, err
		}
		stopKicker = func() error { close(kick); return <-kicked }
	}
	start := time.Now()
	var seq uint64
	for time.Since(start) < o.Duration {
		for i := range frames {
			seq++
			if o.Work {
				f := history[next]
				next = (next + 1) % len(history)
				copy(f[frame.EthernetHeaderLen+8:], payload)
				frames[i] = f
			}
			f := frames[i]
			binary.BigEndian.PutUint64(f[frame.EthernetHeaderLen:], seq)
			if o.Work {
				end := len(f) - crcLen
				binary.BigEndian.PutUint32(f[end:], crc32.Checksum(f[frame.EthernetHeaderLen:end], castagnoli))
			}
		}
		n, err := send(frames)
		res.Sent += uint64(n)
		if err != nil {
			stopKicker()
			return nil, fmt.Errorf("send: %w", err)
		}
	}
	if err := stopKicker(); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	res.Elapsed = time.Since(start)
	st, _ := sender.Stats()
	res.SendRetries = st.SendRetries
	// Give receivers time to drain what is queued, then stop them.
	time.Sleep(300 * time.Millisecond)
	finished = true
	if err := finish(); err != nil {
		return nil, err
	}
	for i := range res.Receivers {
		if r := &res.Receivers[i]; r.Frames < seq {
			r.Lost = seq - r.Frames
		}
	}
	return res, nil
}

// startGoroutines opens a receiving link on every host but the first and
// counts frames on a goroutine each.
func startGoroutines(topo *netns.Topology, open func(string) (link.Link, error), res *Throughput, work bool) (func() error, error) {
	var recvs []link.Link
	closeAll := func() {
		for _, l := range recvs {
			l.Close()
		}
	}
	for _, h := range topo.Hosts[1:] {
		l, err := openOn(h, open)
		if err != nil {
			closeAll()
			return nil, err
		}
		recvs = append(recvs, l)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	for i, l := range recvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.Receivers[i] = receive(l, &done, work)
		}()
	}
	return func() error {
		done.Store(true)
		wg.Wait()
		for i, l := range recvs {
			st, _ := l.Stats()
			res.Receivers[i].KernelDrops = st.KernelDrops
		}
		closeAll()
		return receiverErr(topo.Hosts[1:], res.Receivers)
	}, nil
}

// startChildren starts a receiver process in every host but the first.
func startChildren(topo *netns.Topology, backend string, res *Throughput, work bool, spin time.Duration) (func() error, error) {
	var kids []*child
	for _, h := range topo.Hosts[1:] {
		c, err := startChild(h, backend, work, spin)
		if err != nil {
			for _, k := range kids {
				k.kill()
			}
			return nil, err
		}
		kids = append(kids, c)
	}
	return func() error {
		var first error
		for i, k := range kids {
			r, err := k.finish()
			res.Receivers[i] = r
			if err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
		return receiverErr(topo.Hosts[1:], res.Receivers)
	}, nil
}

func receive(l link.Link, done *atomic.Bool, work bool) Receiver {
	var r Receiver
	buf := make([]link.Frame, 256)
	var app []byte // Work: where Recv would copy a payload to
	var first, last time.Time
	for !done.Load() {
		n, err := l.Recv(time.Now().Add(50*time.Millisecond), buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			r.Err = err.Error()
			break
		}
		if first.IsZero() {
			first = time.Now()
		}
		for _, f := range buf[:n] {
			r.Frames++
			r.Bytes += uint64(len(f.Data))
			if work {
				d := f.Data
				end := len(d) - crcLen
				if end < frame.EthernetHeaderLen+8 || crc32.Checksum(d[frame.EthernetHeaderLen:end], castagnoli) != binary.BigEndian.Uint32(d[end:]) {
					r.Corrupt++
					continue
				}
				app = append(app[:0], d[frame.EthernetHeaderLen+8:end]...)
				r.Checked++
			}
		}
		last = time.Now()
	}
	r.Elapsed = last.Sub(first)
	return r
}

// Latency is the outcome of a ping-pong run.
type Latency struct {
	Backend    string
	RoundTrips int
	P50, P99   time.Duration // one way: half the round trip
	Mean       time.Duration
}

// RunLatency measures one-frame latency between two hosts: host 0 sends a
// 64-byte frame, host 1 echoes it, host 0 waits for the echo; one way is
// half the round trip. Only one frame is ever in flight. A spin other than
// 0 is both rings' RxSpin (ring backends only; negative: never).
func RunLatency(backend string, roundTrips int, prefix string, spin time.Duration) (*Latency, error) {
	if _, ok := Backends[backend]; !ok {
		return nil, fmt.Errorf("unknown backend %q (have %v)", backend, BackendNames)
	}
	topo, err := netns.New(netns.Options{Hosts: 2, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	return runLatency(topo, backend, roundTrips, spin)
}

func runLatency(topo *netns.Topology, backend string, roundTrips int, spin time.Duration) (*Latency, error) {
	open, ok := Backends[backend]
	if !ok {
		return nil, fmt.Errorf("unknown backend %q (have %v)", backend, BackendNames)
	}
	if spin != 0 {
		if !IsRing(backend) {
			return nil, fmt.Errorf("spin %v: latency needs a ring backend (have %q)", spin, backend)
		}
		open = func(n string) (link.Link, error) { return OpenRing(backend, n, spin) }
	}
	a, err := openOn(topo.Hosts[0], open)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	b, err := openOn(topo.Hosts[1], open)
	if err != nil {
		return nil, err
	}
	defer b.Close()

	stop := make(chan struct{})
	echoDone := make(chan error, 1)
	go func() {
		buf := make([]link.Frame, 16)
		out := make([][]byte, 1)
		reply := make([]byte, 0, 64)
		src, err := srcMAC(b)
		if err != nil {
			echoDone <- err
			return
		}
		for {
			select {
			case <-stop:
				echoDone <- nil
				return
			default:
			}
			n, err := b.Recv(time.Now().Add(50*time.Millisecond), buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				echoDone <- err
				return
			}
			for _, f := range buf[:n] {
				reply = frame.AppendEthernet(reply[:0], frame.Broadcast, src, frame.EtherType)
				reply = append(reply, f.Data[frame.EthernetHeaderLen:]...)
				out[0] = reply
				if _, err := b.Send(out); err != nil {
					echoDone <- err
					return
				}
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	srcA, err := srcMAC(a)
	if err != nil {
		close(stop)
		<-echoDone
		return nil, err
	}
	ping := frame.AppendEthernet(nil, frame.Broadcast, srcA, frame.EtherType)
	ping = append(ping, make([]byte, 50)...)
	out := [][]byte{ping}
	buf := make([]link.Frame, 16)
	rtts := make([]time.Duration, 0, roundTrips)
	for i := range roundTrips + 20 {
		binary.BigEndian.PutUint64(ping[frame.EthernetHeaderLen:], uint64(i))
		t0 := time.Now()
		if _, err := a.Send(out); err != nil {
			close(stop)
			return nil, err
		}
		got := false
		for !got {
			n, err := a.Recv(t0.Add(time.Second), buf)
			if err != nil {
				close(stop)
				return nil, fmt.Errorf("round trip %d: %w", i, err)
			}
			for _, f := range buf[:n] {
				if binary.BigEndian.Uint64(f.Data[frame.EthernetHeaderLen:]) == uint64(i) {
					got = true
				}
			}
		}
		if i >= 20 { // warm-up excluded
			rtts = append(rtts, time.Since(t0))
		}
	}
	close(stop)
	if err := <-echoDone; err != nil {
		return nil, err
	}
	slices.Sort(rtts)
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	q := func(p float64) time.Duration { return rtts[int(p*float64(len(rtts)-1))] / 2 }
	return &Latency{Backend: backend, RoundTrips: len(rtts), P50: q(0.5), P99: q(0.99), Mean: sum / time.Duration(2*len(rtts))}, nil
}

// Ints parses a comma-separated list of positive integers ("2,4,8"),
// as the benchmark tools' flags give group sizes, MTUs and windows.
// Spaces around a number and empty entries are ignored; a list with no
// number at all is an error, and so is anything that is not a positive
// integer, named in the error. bench/mpi/compare, where an empty list
// means "none", checks for that first.
func Ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no numbers in %q", s)
	}
	return out, nil
}

// Sweep is what linkbench and tcpfanout measure over, from the flags
// both take: the group sizes (-hosts), the MTUs (-mtu), each run's
// sending time (-duration) and the runs of each configuration (-reps).
type Sweep struct {
	Duration    time.Duration
	Reps        int
	hosts, mtus string
}

// SweepFlags registers -hosts, -mtu, -duration and -reps on fs.
func SweepFlags(fs *flag.FlagSet) *Sweep {
	s := &Sweep{}
	fs.StringVar(&s.hosts, "hosts", "2,4,8", "group sizes N (1 sender, N-1 receivers)")
	fs.StringVar(&s.mtus, "mtu", "1500,9000", "MTUs")
	fs.DurationVar(&s.Duration, "duration", 3*time.Second, "sending time per run")
	fs.IntVar(&s.Reps, "reps", 1, "repetitions per configuration (the table shows min–max)")
	return s
}

// Lists parses -hosts (Hosts) and -mtu (MTUs) once the command line is;
// the error names the flag.
func (s *Sweep) Lists() (hosts, mtus []int, err error) {
	if hosts, err = Hosts(s.hosts); err != nil {
		return nil, nil, fmt.Errorf("-hosts: %w", err)
	}
	if mtus, err = MTUs(s.mtus); err != nil {
		return nil, nil, fmt.Errorf("-mtu: %w", err)
	}
	return hosts, mtus, nil
}

// Hosts parses a list of group sizes (-hosts): each 2 (a sender and a
// receiver) up to the 250 hosts a netns topology holds.
func Hosts(s string) ([]int, error) {
	return inRange(s, 2, 250, "a number of hosts")
}

// MTUs parses a list of MTUs (-mtu): each from link.MinMTU up to 65535,
// the largest a veth takes.
func MTUs(s string) ([]int, error) {
	return inRange(s, link.MinMTU, 65535, "an MTU")
}

func inRange(s string, lo, hi int, what string) ([]int, error) {
	ns, err := Ints(s)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if n < lo || n > hi {
			return nil, fmt.Errorf("%d is not %s in %d..%d", n, what, lo, hi)
		}
	}
	return ns, nil
}

// MaxBatch is the largest Options.Batch a command accepts: the sender
// holds a frame buffer per frame of a batch.
const MaxBatch = 4096

// Work's constants: history slots the sender builds frames in, the CRC's
// length and table.
const (
	workHistory = 256
	crcLen      = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// receiverErr names the first receiver that a Recv error ended before the
// run did: its counts are short, and a ceiling taken from them would be
// low without saying so.
func receiverErr(hosts []*netns.Host, rs []Receiver) error {
	for i, r := range rs {
		if r.Err != "" {
			return fmt.Errorf("receiver on %s stopped early: %s", hosts[i].Namespace, r.Err)
		}
	}
	return nil
}

// srcMAC is l's address as the source of the frames a benchmark builds;
// a link without a 6-byte one (loopback) is refused rather than panicking
// in the conversion.
func srcMAC(l link.Link) ([6]byte, error) {
	hw := l.HardwareAddr()
	if len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("the link has no 6-byte Ethernet address (%q): benchmark frames need one as their source", hw.String())
	}
	return [6]byte(hw), nil
}
