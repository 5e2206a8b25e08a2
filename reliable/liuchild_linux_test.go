package reliable

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/cpupin"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/testnet/netns"
)

// Liu's children as processes of their own (BenchmarkLiuTables): each
// child host's member is the test binary re-executed in the host's
// namespace with liuChildEnv set (TestMain runs liuChild), bound to a CPU
// other than the parent's, so that the parent's sends are timed on a CPU
// and a Go runtime of their own, as Liu's parent had a workstation of its
// own. The parent drives a child through lines on its stdin, each
// answered on its stdout:
//
//	join <group> <level> <size>   join the group of the level (fifo, agreed or safe) → joined
//	leave                         leave it at once (abort) → left
//
// and EOF ends the child. For its whole life a child also serves the TCP
// unicast side (port 7401): it reads each 900-byte message, runs the task
// the message names and replies, as it does for each group delivery,
// with the message's id in a UDP datagram to the parent (port 7400).

const liuChildEnv = "RBCAST_LIU_CHILD"

// liuChildSpec is what a child is told (JSON in the environment).
type liuChildSpec struct {
	Self   int           // the host index, the member id it asks for
	IP     net.IP        // its host's address (UDP 7400, TCP 7401)
	Parent string        // the parent's UDP address, host:port
	Spin   time.Duration // the ring's RxSpin (-1: no polling)
	CPU    int           // cpupin rank: the CPU it is bound to among those allowed
	Pin    bool          // bind it to CPU (and GOMAXPROCS 1); false: neither
}

// liuChild runs a child until its input ends; the exit code says how.
func liuChild(specJSON string, cmds io.Reader, out io.Writer) int {
	var spec liuChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "liu child: bad %s: %v\n", liuChildEnv, err)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "liu child %d: %v\n", spec.Self, err)
		return 1
	}
	if spec.Pin {
		if _, err := cpupin.Pin(spec.CPU); err != nil {
			return fail(err)
		}
	}
	l, err := linkbench.OpenRing("ring-v2", "eth0", spec.Spin)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	parent, err := net.ResolveUDPAddr("udp4", spec.Parent)
	if err != nil {
		return fail(err)
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: spec.IP, Port: 7400})
	if err != nil {
		return fail(err)
	}
	defer udp.Close()
	ln, err := net.Listen("tcp4", net.JoinHostPort(spec.IP.String(), "7401"))
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	// answer runs the task a message names and replies with its id.
	answer := func(msg []byte) {
		if len(msg) >= 8 {
			liuWork(binary.BigEndian.Uint32(msg[4:8]))
			udp.WriteToUDP(msg[:4], parent)
		}
	}
	go func() { // the TCP unicast side: one connection, from the parent
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.(*net.TCPConn).SetNoDelay(true)
		buf := make([]byte, liuSize)
		for {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return
			}
			answer(buf)
		}
	}()
	// in is the group the child is in: its Group, and its receiver's end.
	var in struct {
		g    *Group
		stop context.CancelFunc
		done chan struct{}
	}
	leave := func() {
		if in.g == nil {
			return
		}
		in.g.abort()
		<-in.g.Done()
		in.stop()
		<-in.done
		in.g = nil
	}
	defer leave()
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(cmds)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 0 && f[0] == "join" && in.g == nil:
			cfg, err := liuJoinConfig(f, spec.Self)
			if err != nil {
				return fail(err)
			}
			jctx, joined := context.WithTimeout(context.Background(), liuJoinWait)
			g, err := Join(jctx, l, cfg)
			joined()
			if err != nil {
				return fail(fmt.Errorf("joining group %d (%s): %w", cfg.Group, f[2], err))
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			in.g, in.stop, in.done = g, stop, done
			go func() {
				defer close(done)
				buf := make([]byte, 0, 2048)
				for {
					_, data, err := g.RecvAppend(ctx, buf[:0])
					if err != nil {
						return
					}
					answer(data)
				}
			}()
			fmt.Fprintln(out, "joined")
		case len(f) == 1 && f[0] == "leave":
			leave()
			fmt.Fprintln(out, "left")
		default:
			return fail(fmt.Errorf("command %q: want join <group> <level> <size> (when in no group) or leave", sc.Text()))
		}
	}
	return 0
}

// liuJoinConfig is the Config of the command "join <group> <level>
// <size>" (its fields f) for the child of host index self.
func liuJoinConfig(f []string, self int) (Config, error) {
	line := strings.Join(f, " ")
	if len(f) != 4 {
		return Config{}, fmt.Errorf("command %q: want join <group> <level> <size>", line)
	}
	gid, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return Config{}, fmt.Errorf("command %q: group %q is not a number below 2^32", line, f[1])
	}
	size, err := strconv.Atoi(f[3])
	if err != nil || size < 2 {
		return Config{}, fmt.Errorf("command %q: size %q is not a number of members, 2 or more", line, f[3])
	}
	cfg := Config{Group: uint32(gid), Views: true, Size: size, RequestID: frame.MemberID(self), Logger: quiet}
	switch f[2] {
	case "fifo":
	case "agreed", "safe":
		cfg.Order, cfg.Safe = Total, f[2] == "safe"
	default:
		return Config{}, fmt.Errorf("command %q: level %q is none of fifo, agreed, safe", line, f[2])
	}
	return cfg, nil
}

// liuKid is the parent's handle on a child process.
type liuKid struct {
	host *netns.Host
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
}

// startLiuKid starts the child spec describes on host h and waits for its
// "ready".
func startLiuKid(h *netns.Host, spec liuChildSpec) (*liuKid, error) {
	cmd, err := childCommand(h, liuChildEnv, spec)
	if err != nil {
		return nil, err
	}
	if spec.Pin { // one CPU: one P, as the runtime would size itself on a host of one
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	in, out, err := linkbench.StartReady(cmd, fmt.Sprintf("Liu child %d on %s", spec.Self, h.Namespace))
	if err != nil {
		return nil, err
	}
	return &liuKid{host: h, cmd: cmd, in: in, out: out}, nil
}

// say sends the child a command.
func (k *liuKid) say(format string, a ...any) error {
	if _, err := fmt.Fprintf(k.in, format+"\n", a...); err != nil {
		return fmt.Errorf("Liu child on %s: %w", k.host.Namespace, err)
	}
	return nil
}

// expect reads the child's answer and checks it is want.
func (k *liuKid) expect(want string) error {
	line, err := k.out.ReadString('\n')
	if err != nil || line != want+"\n" {
		return fmt.Errorf("Liu child on %s: answered %q (%v), want %q", k.host.Namespace, line, err, want)
	}
	return nil
}

// stop ends the child: EOF, then a kill if it has not exited within 5 s.
func (k *liuKid) stop() error {
	k.in.Close()
	done := make(chan error, 1)
	go func() { done <- k.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("Liu child on %s: %w", k.host.Namespace, err)
		}
		return nil
	case <-time.After(5 * time.Second):
		k.cmd.Process.Kill()
		<-done
		return fmt.Errorf("Liu child on %s: still running 5 s after its input ended; killed", k.host.Namespace)
	}
}

func TestLiuJoinConfig(t *testing.T) {
	cfg, err := liuJoinConfig(strings.Fields("join 2001 safe 9"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Group != 2001 || cfg.Size != 9 || cfg.RequestID != 3 || !cfg.Views || cfg.Order != Total || !cfg.Safe {
		t.Errorf("join 2001 safe 9 for host 3 gave %+v", cfg)
	}
	if cfg, err := liuJoinConfig(strings.Fields("join 7 fifo 2"), 1); err != nil || cfg.Order != FIFO || cfg.Safe {
		t.Errorf("join 7 fifo 2: %+v, %v", cfg, err)
	}
	for line, want := range map[string]string{
		"join 7 fifo":            `command "join 7 fifo": want join <group> <level> <size>`,
		"join x fifo 2":          `command "join x fifo 2": group "x" is not a number below 2^32`,
		"join 4294967296 fifo 2": `command "join 4294967296 fifo 2": group "4294967296" is not a number below 2^32`,
		"join 7 weak 2":          `command "join 7 weak 2": level "weak" is none of fifo, agreed, safe`,
		"join 7 fifo 1":          `command "join 7 fifo 1": size "1" is not a number of members, 2 or more`,
	} {
		if _, err := liuJoinConfig(strings.Fields(line), 1); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %s", line, err, want)
		}
	}
}
