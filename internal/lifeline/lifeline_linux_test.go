package lifeline

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// roleEnv makes this test binary a middle process or its tied child.
const roleEnv = "LIFELINE_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "child":
		Tie()
		fmt.Println("tied")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "middle":
		os.Exit(middle())
	}
	os.Exit(m.Run())
}

// middle starts a tied child from a goroutine that locks its thread
// and exits locked, so the runtime retires the thread that started the
// child (what netns.Host.Do does), prints the child's pid once the
// child says it is tied, then lives on while stdin is open (or exits at
// once with LIFELINE_TEST_EXIT=1).
func middle() int {
	// Keep the main thread, which the runtime never retires, from
	// starting the child.
	runtime.LockOSThread()
	started := make(chan *exec.Cmd)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=child")
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			panic(err)
		}
		if err := cmd.Start(); err != nil {
			panic(err)
		}
		if l, _ := bufio.NewReader(out).ReadString('\n'); l != "tied\n" {
			panic(fmt.Sprintf("the child said %q", l))
		}
		started <- cmd
	}()
	cmd := <-started
	fmt.Println(cmd.Process.Pid)
	if os.Getenv("LIFELINE_TEST_EXIT") == "1" {
		return 0
	}
	os.Stdin.Read(make([]byte, 1))
	return 0
}

// alive reports whether pid runs (a zombie or a reused id is not it).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X' {
		return false
	}
	return strings.Contains(s[:i], "lifeline")
}

// startMiddle runs a middle process and returns it and its child's pid.
func startMiddle(t *testing.T, exit bool) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=middle")
	if exit {
		cmd.Env = append(cmd.Env, "LIFELINE_TEST_EXIT=1")
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	l, _ := bufio.NewReader(out).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(l))
	if err != nil {
		t.Fatalf("the middle process printed %q, want its child's pid", l)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return cmd, pid
}

// A tied child ends when its parent ends.
func TestChildEndsWithParent(t *testing.T) {
	mid, pid := startMiddle(t, true)
	if err := mid.Wait(); err != nil {
		t.Fatalf("the middle process: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) { // waits for the kernel; measures nothing
		if time.Now().After(deadline) {
			t.Fatalf("child %d still runs 10 s after its parent ended", pid)
		}
	}
}

// A tied child lives on while its parent does, after the parent's thread
// that started it has ended: the case where SysProcAttr.Pdeathsig would
// have killed it.
func TestChildOutlivesStartingThread(t *testing.T) {
	_, pid := startMiddle(t, false)
	time.Sleep(300 * time.Millisecond) // a bound on a wrong kill, not a wait for an event
	if !alive(pid) {
		t.Fatalf("child %d ended while its parent runs", pid)
	}
}
