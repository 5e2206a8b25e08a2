package linkbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
)

// childEnv names the backend a re-executed linkbench process receives
// with; its presence makes the process a receiver (see MaybeChild).
const childEnv = "RBCAST_LINKBENCH_RECEIVER"

// childWorkEnv set to anything has the receiver child do Options.Work.
const childWorkEnv = "RBCAST_LINKBENCH_WORK"

// childSpinEnv is Options.RxSpin for the receiver child's ring (unset:
// the backend's default).
const childSpinEnv = "RBCAST_LINKBENCH_SPIN"

// MaybeChild turns the current process into a benchmark receiver when it
// was started as one by RunThroughput with Processes set, and never
// returns then. Programs and test binaries that run throughput benchmarks
// call it first thing in main or TestMain.
func MaybeChild() {
	backend := os.Getenv(childEnv)
	if backend == "" {
		return
	}
	lifeline.Tie() // a receiver ends with the benchmark or test that started it
	var spin time.Duration
	if v := os.Getenv(childSpinEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d == 0 {
			fmt.Fprintf(os.Stderr, "linkbench receiver: %s=%q: want a non-zero duration\n", childSpinEnv, v)
			os.Exit(2)
		}
		spin = d
	}
	os.Exit(childMain(backend, os.Getenv("RBCAST_LINKBENCH_IFACE"), os.Getenv(childWorkEnv) != "", spin, os.Stdin, os.Stdout))
}

// childMain opens the link, says "ready", counts frames until its input
// closes, and writes its Receiver as JSON.
func childMain(backend, ifname string, work bool, spin time.Duration, in io.Reader, out io.Writer) int {
	open, ok := Backends[backend]
	if !ok {
		fmt.Fprintf(os.Stderr, "linkbench receiver: unknown backend %q\n", backend)
		return 2
	}
	if spin != 0 {
		open = func(n string) (link.Link, error) { return OpenRing(backend, n, spin) }
	}
	l, err := open(ifname)
	if err != nil {
		fmt.Fprintf(os.Stderr, "linkbench receiver: %v\n", err)
		return 1
	}
	defer l.Close()
	var done atomic.Bool
	go func() {
		io.Copy(io.Discard, in)
		done.Store(true)
	}()
	fmt.Fprintln(out, "ready")
	r := receive(l, &done, work)
	st, _ := l.Stats()
	r.KernelDrops = st.KernelDrops
	if err := json.NewEncoder(out).Encode(r); err != nil {
		return 1
	}
	return 0
}

// child is a receiver process running in a host's namespace.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startChild(h *netns.Host, backend string, work bool, spin time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := h.Command(context.Background(), exe)
	cmd.Env = append(os.Environ(), childEnv+"="+backend, "RBCAST_LINKBENCH_IFACE="+h.Iface)
	if work {
		cmd.Env = append(cmd.Env, childWorkEnv+"=1")
	}
	if spin != 0 {
		cmd.Env = append(cmd.Env, childSpinEnv+"="+spin.String())
	}
	stdin, out, err := StartReady(cmd, "receiver in "+h.Namespace)
	if err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: stdin, out: out}, nil
}

// StartReady starts cmd, a re-executed benchmark process, with its stderr
// on ours and pipes to its stdin and stdout, and waits for the "ready"
// line it prints once set up. If that line does not come, the process is
// killed and the error names it (what).
func StartReady(cmd *exec.Cmd, what string) (stdin io.WriteCloser, out *bufio.Reader, err error) {
	cmd.Stderr = os.Stderr
	if stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	out = bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("%s did not start (no ready line: %q, %v)", what, line, err)
	}
	return stdin, out, nil
}

func (c *child) finish() (Receiver, error) {
	var r Receiver
	c.stdin.Close()
	errc := make(chan error, 1)
	go func() { errc <- json.NewDecoder(c.out).Decode(&r) }()
	select {
	case err := <-errc:
		if werr := c.cmd.Wait(); err == nil {
			err = werr
		}
		return r, err
	case <-time.After(10 * time.Second):
		c.kill()
		return r, fmt.Errorf("receiver did not report within 10s")
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}
