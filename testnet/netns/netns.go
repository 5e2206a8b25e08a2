// Package netns builds real Ethernet segments out of Linux network namespaces
// for tests and benchmarks: a bridge namespace and N host namespaces, each host with a veth
// "eth0" on the bridge, and loss injected per host and direction.
//
// It is a thin Go face on the scripts in scripts/netns (up, down, loss), so
// there is one implementation of the topology, shared with shell users and CI
// (see docs/netns.md). Host.Do runs Go code inside a host's namespace, which
// is how one test process opens AF_PACKET sockets on several hosts.
//
// Everything here needs root (CAP_NET_ADMIN to build namespaces, CAP_NET_RAW
// for raw sockets). Tests build topologies with netnstest.Up, which skips
// the test when the process is not root and removes the topology at its
// end; this package does not import testing, so tools may use it.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Options describe a topology.
type Options struct {
	// Hosts is the number of host namespaces, 1..250; 0 means 2.
	Hosts int
	// MTU of every veth end and of the bridge, 68..65535; 0 means 1500.
	MTU int
	// Prefix starts every namespace and interface name. It must start with
	// "rb" and hold only lowercase letters and digits, at most 11 of them.
	// Empty means a fresh random prefix "rbt" (or $RBCAST_NETNS_PREFIX) +
	// 4 lowercase letters, so parallel tests do not collide.
	Prefix string
	// Addresses gives host i the IPv4 address 10.77.0.(i+1)/24 on eth0.
	Addresses bool
	// IPv6 leaves IPv6 on and, with addresses, gives host i fd77::(i+1)/64
	// too (fd77:1::(i+1)/64 on a routed topology's segment 1).
	IPv6 bool
	// Routed joins two segments with a router namespace (scripts/netns/up
	// -r): "smcroute" forwards multicast (239.0.0.0/8, ff05::/16,
	// ff0e::/16) and unicast, "none" unicast only; empty is one segment.
	// It implies Addresses; host i on segment S has 10.77.S.(i+1).
	Routed string
	// Split is how many hosts are on segment 0 of a routed topology; 0
	// means half, rounded up.
	Split int
}

// Topology is one segment built by New. Close removes it.
type Topology struct {
	Prefix string
	// BridgeNamespace holds the bridge Prefix+"br0" and the bridge ends of
	// the veths, Prefix+"v<i>".
	BridgeNamespace string
	MTU             int
	Hosts           []*Host
	// RouterNamespace is a routed topology's router, Prefix+"rt" ("" for
	// one segment).
	RouterNamespace string

	scripts   string
	closeOnce sync.Once
	closeErr  error
}

// Host is one host namespace of a Topology.
type Host struct {
	Index     int
	Namespace string
	Iface     string // always "eth0"
	MAC       net.HardwareAddr
	IP        net.IP // set when Options.Addresses (or Routed) was
	IP6       net.IP // set when Options.IPv6 was too
	Segment   int    // 0, or 1 for the second segment of a routed topology

	topo *Topology
}

var prefixRE = regexp.MustCompile(`^rb[a-z0-9]{0,9}$`)

// New builds a topology by running scripts/netns/up. If anything fails it
// runs scripts/netns/down, so nothing is left behind.
func New(opts Options) (*Topology, error) {
	if opts.Hosts == 0 {
		opts.Hosts = 2
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if opts.Hosts < 1 || opts.Hosts > 250 {
		return nil, fmt.Errorf("netns: Options.Hosts = %d: want 1..250", opts.Hosts)
	}
	if opts.MTU < 68 || opts.MTU > 65535 {
		return nil, fmt.Errorf("netns: Options.MTU = %d: want 68..65535", opts.MTU)
	}
	switch opts.Routed {
	case "":
		if opts.Split != 0 {
			return nil, fmt.Errorf("netns: Options.Split = %d without Routed", opts.Split)
		}
	case "smcroute", "none":
		opts.Addresses = true
		if opts.Hosts < 2 {
			return nil, fmt.Errorf("netns: Options.Hosts = %d: a routed topology needs at least 2", opts.Hosts)
		}
		if opts.Split == 0 {
			opts.Split = (opts.Hosts + 1) / 2
		}
		if opts.Split < 1 || opts.Split >= opts.Hosts {
			return nil, fmt.Errorf("netns: Options.Split = %d: want 1..%d", opts.Split, opts.Hosts-1)
		}
	default:
		return nil, fmt.Errorf("netns: Options.Routed = %q: want \"smcroute\", \"none\" or empty", opts.Routed)
	}
	if opts.Prefix == "" {
		opts.Prefix = randomPrefix()
	} else if !prefixRE.MatchString(opts.Prefix) {
		return nil, fmt.Errorf("netns: Options.Prefix = %q: want \"rb\" followed by at most 9 lowercase letters or digits", opts.Prefix)
	}
	scripts, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	topo := &Topology{
		Prefix:          opts.Prefix,
		BridgeNamespace: opts.Prefix + "br",
		MTU:             opts.MTU,
		scripts:         scripts,
	}
	// Refuse before up does, so the failure path below never runs down on
	// namespaces that someone else made.
	if left, err := Leftovers(opts.Prefix); err != nil {
		return nil, err
	} else if len(left) > 0 {
		return nil, fmt.Errorf("netns: namespaces for prefix %q already exist: %s (remove them with scripts/netns/down -p %s)", opts.Prefix, strings.Join(left, " "), opts.Prefix)
	}
	if err := recordOwner(opts.Prefix); err != nil {
		return nil, err
	}
	args := []string{"-n", strconv.Itoa(opts.Hosts), "-p", opts.Prefix, "-m", strconv.Itoa(opts.MTU)}
	if opts.Addresses {
		args = append(args, "-a")
	}
	if opts.IPv6 {
		args = append(args, "-6")
	}
	if opts.Routed != "" {
		args = append(args, "-r", opts.Routed, "-s", strconv.Itoa(opts.Split))
		topo.RouterNamespace = opts.Prefix + "rt"
	}
	out, err := topo.script("up", args...)
	if err != nil {
		// up cleans up after itself, but not if it was killed; be sure.
		if derr := topo.Close(); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	if err := topo.fill(out, opts); err != nil {
		if derr := topo.Close(); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, err
	}
	return topo, nil
}

// fill builds Hosts from up's output (one namespace name per line) and reads
// each host's MAC address from inside its namespace.
func (t *Topology) fill(out string, opts Options) error {
	names := strings.Fields(out)
	if len(names) != opts.Hosts {
		return fmt.Errorf("netns: up printed %d host namespaces, want %d: %q", len(names), opts.Hosts, out)
	}
	for i, name := range names {
		if want := t.Prefix + "h" + strconv.Itoa(i); name != want {
			return fmt.Errorf("netns: up printed host namespace %q at index %d, want %q", name, i, want)
		}
		h := &Host{Index: i, Namespace: name, Iface: "eth0", topo: t}
		err := h.Do(func() error {
			ifi, err := net.InterfaceByName(h.Iface)
			if err != nil {
				return err
			}
			h.MAC = ifi.HardwareAddr
			return nil
		})
		if err != nil {
			return fmt.Errorf("netns: reading %s's MAC address in %s: %w", h.Iface, name, err)
		}
		if opts.Routed != "" && i >= opts.Split {
			h.Segment = 1
		}
		if opts.Addresses {
			h.IP = net.IPv4(10, 77, byte(h.Segment), byte(i+1)).To4()
			if opts.IPv6 {
				h.IP6 = net.ParseIP(fmt.Sprintf("fd77:%x::%x", h.Segment, i+1))
			}
		}
		t.Hosts = append(t.Hosts, h)
	}
	return nil
}

// Close removes every namespace of the topology (scripts/netns/down) and
// checks none is left. Sockets still open in a namespace keep the kernel
// object alive, but its name is gone. Close is idempotent.
func (t *Topology) Close() error {
	t.closeOnce.Do(func() {
		if _, err := t.script("down", "-p", t.Prefix); err != nil {
			t.closeErr = err
			return
		}
		left, err := Leftovers(t.Prefix)
		if err != nil {
			t.closeErr = err
			return
		}
		if len(left) > 0 {
			t.closeErr = fmt.Errorf("netns: after down -p %s these namespaces remain: %s", t.Prefix, strings.Join(left, " "))
			return
		}
		removeOwner(t.Prefix)
	})
	return t.closeErr
}

// Leftovers lists the namespaces up would create for prefix that exist now:
// prefix+"br", prefix+"rt" and prefix+"h<N>". Other names that merely start with prefix are
// not listed, as down does not touch them either.
func Leftovers(prefix string) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: listing namespaces: %w", err)
	}
	own := regexp.MustCompile("^" + regexp.QuoteMeta(prefix) + `(br|rt|h[0-9]+)$`)
	var names []string
	for _, e := range entries {
		if own.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// script runs scripts/netns/<name> and returns its standard output. The
// error carries the script's standard error, which names what was wrong.
func (t *Topology) script(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(t.scripts, name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ScriptsDir finds scripts/netns of this module: $RBCAST_NETNS_SCRIPTS if set,
// else relative to this source file, else by walking up from the working
// directory to the go.mod of github.com/rbcast/rbcast. Tests of any package
// run with their package directory as working directory, so the walk finds it
// even when the binary was built with -trimpath.
func ScriptsDir() (string, error) {
	if dir := os.Getenv("RBCAST_NETNS_SCRIPTS"); dir != "" {
		return dir, nil
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "netns")
		if _, err := os.Stat(filepath.Join(dir, "up")); err == nil {
			return filepath.Clean(dir), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("netns: finding scripts/netns: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(mod, []byte("module github.com/rbcast/rbcast\n")) {
			return filepath.Join(dir, "scripts", "netns"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("netns: cannot find scripts/netns: no go.mod of github.com/rbcast/rbcast above %s (set RBCAST_NETNS_SCRIPTS)", wd)
		}
	}
}

// randomPrefix is "rbt", or $RBCAST_NETNS_PREFIX when that is "rb" and
// up to 5 lowercase letters or digits (so that concurrent runs of several
// people on one machine can tell their namespaces apart), then 4 random
// lowercase letters.
func randomPrefix() string {
	var b [4]byte
	rand.Read(b[:])
	p := []byte(prefixBase())
	for _, c := range b {
		p = append(p, 'a'+c%26)
	}
	return string(p)
}

// prefixBase is what randomPrefix adds its 4 letters to.
func prefixBase() string {
	if e := os.Getenv("RBCAST_NETNS_PREFIX"); len(e) <= 7 && prefixRE.MatchString(e) {
		return e
	}
	return "rbt"
}

// Command returns a command that runs name with args inside the host's
// namespace (ip netns exec).
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Namespace, name}, args...)...)
}

// KillAll sends SIGKILL to every process in the host's namespace (`ip
// netns pids`) and returns how many it signalled. A job that a runner
// kills by its process group can leave processes that are in no group of
// the runner's: GNU timeout puts itself and its command in a group of its
// own, and OpenMPI's orted daemons detach into sessions of their own; in
// the namespace they all stay (bench/mpi/compare ends a try that way).
func (h *Host) KillAll() (int, error) {
	pids, err := nsPids(h.Namespace)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err == nil {
			n++
		} else if !errors.Is(err, unix.ESRCH) {
			return n, fmt.Errorf("netns: kill %d in %s: %w", pid, h.Namespace, err)
		}
	}
	return n, nil
}

// PanicError is what Do panics with, in the caller's goroutine, when fn
// panicked: the original value and the stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("panic in netns.Host.Do: %v\n\n%s", p.Value, p.Stack)
}

// Do runs fn on a locked OS thread switched into the host's network
// namespace, then switches the thread back. Sockets opened inside fn stay in
// the host's namespace after Do returns: this is how one test process opens
// AF_PACKET sockets on several hosts. Goroutines started by fn do not run
// in the namespace.
//
// fn runs in a fresh goroutine so that a thread whose namespace cannot be
// restored is never handed back to the Go scheduler: it stays locked and
// exits with the goroutine. If fn panics, the namespace is restored and Do
// panics in the caller's goroutine with a *PanicError.
func (h *Host) Do(fn func() error) error {
	target, err := unix.Open("/run/netns/"+h.Namespace, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: opening namespace %s: %w", h.Namespace, err)
	}
	defer unix.Close(target)

	type result struct {
		err   error
		panic *PanicError
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("netns: opening this thread's namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			// The thread may be half-switched for all we know; do not unlock.
			done <- result{err: fmt.Errorf("netns: entering namespace %s: %w", h.Namespace, err)}
			return
		}
		var r result
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panic = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			r.err = fn()
		}()
		if err := restore(orig); err != nil {
			// Leave the thread locked: it exits when this goroutine ends.
			r.err = errors.Join(r.err, fmt.Errorf("netns: leaving namespace %s: %w (thread discarded)", h.Namespace, err))
		} else {
			runtime.UnlockOSThread()
		}
		done <- r
	}()
	r := <-done
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// restore switches the current thread back to the namespace orig and checks
// that it arrived there.
func restore(orig int) error {
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return err
	}
	var want, got unix.Stat_t
	if err := unix.Fstat(orig, &want); err != nil {
		return err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil {
		return err
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return fmt.Errorf("thread is in namespace inode %d, want %d", got.Ino, want.Ino)
	}
	return nil
}

// Direction selects which traffic of a host SetLoss affects.
type Direction int

const (
	In   Direction = iota // frames arriving at the host's eth0
	Out                   // frames the host sends on eth0
	Both                  // both directions, each with the given loss
)

func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	case Both:
		return "both"
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// Loss is a loss model for SetLoss.
type Loss struct {
	// Percent is the average share of frames dropped, 0..100 (below 100
	// with bursts). Zero removes loss; 100 cuts the host off.
	Percent float64
	// BurstLen is the mean number of consecutive drops; 0 means independent
	// (random) losses. See docs/netns.md for how bursts are made.
	BurstLen int
	// EtherType restricts loss to frames of that EtherType; 0 means all.
	EtherType uint16
	// UDP restricts loss to UDP datagrams (IPv4 and IPv6): link/udp's
	// carriage, sparing ARP, neighbour discovery and IGMP/MLD. Not with
	// EtherType.
	UDP bool
}

// SetLoss replaces the loss on the host's eth0 in the given direction
// (scripts/netns/loss). The other direction is left as it was.
func (h *Host) SetLoss(dir Direction, l Loss) error {
	if dir != In && dir != Out && dir != Both {
		return fmt.Errorf("netns: SetLoss on %s: bad direction %v", h.Namespace, dir)
	}
	if l.Percent < 0 || l.Percent > 100 || l.BurstLen > 0 && l.Percent == 100 {
		return fmt.Errorf("netns: SetLoss on %s: Percent = %v: want 0 <= Percent <= 100 (< 100 with bursts)", h.Namespace, l.Percent)
	}
	if l.BurstLen < 0 {
		return fmt.Errorf("netns: SetLoss on %s: BurstLen = %d: want >= 0", h.Namespace, l.BurstLen)
	}
	return h.topo.loss(strconv.Itoa(h.Index), dir.String(), l)
}

// RouterDirection selects which forwarded traffic SetRouterLoss affects.
type RouterDirection int

const (
	From0    RouterDirection = iota // from segment 0 to segment 1
	From1                           // from segment 1 to segment 0
	BothWays                        // each way, each with the given loss
)

func (d RouterDirection) String() string {
	switch d {
	case From0:
		return "0to1"
	case From1:
		return "1to0"
	case BothWays:
		return "both"
	}
	return "RouterDirection(" + strconv.Itoa(int(d)) + ")"
}

// SetRouterLoss replaces the loss of what a routed topology's router
// forwards in the given direction (scripts/netns/loss router).
func (t *Topology) SetRouterLoss(dir RouterDirection, l Loss) error {
	if t.RouterNamespace == "" {
		return fmt.Errorf("netns: SetRouterLoss on %s: the topology has no router (Options.Routed)", t.Prefix)
	}
	if dir != From0 && dir != From1 && dir != BothWays {
		return fmt.Errorf("netns: SetRouterLoss on %s: bad direction %v", t.Prefix, dir)
	}
	if l.Percent < 0 || l.Percent > 100 || l.BurstLen > 0 && l.Percent == 100 || l.BurstLen < 0 {
		return fmt.Errorf("netns: SetRouterLoss on %s: Percent = %v, BurstLen = %d: want 0 <= Percent <= 100 (< 100 with bursts), BurstLen >= 0", t.Prefix, l.Percent, l.BurstLen)
	}
	return t.loss("router", dir.String(), l)
}

// loss runs scripts/netns/loss for host (an index or "router").
func (t *Topology) loss(host, dir string, l Loss) error {
	args := []string{"-p", t.Prefix}
	if l.EtherType != 0 {
		args = append(args, "-t", fmt.Sprintf("0x%04x", l.EtherType))
	}
	if l.UDP {
		args = append(args, "-u")
	}
	args = append(args, host, dir)
	pct := strconv.FormatFloat(l.Percent, 'f', -1, 64)
	switch {
	case l.Percent == 0:
		args = append(args, "none")
	case l.BurstLen == 0:
		args = append(args, "random", pct)
	default:
		args = append(args, "burst", pct, strconv.Itoa(l.BurstLen))
	}
	_, err := t.script("loss", args...)
	return err
}
