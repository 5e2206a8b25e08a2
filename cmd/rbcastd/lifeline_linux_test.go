package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Daemons a test started end with the test binary when go test's
// -timeout ends it (a panic: no cleanup runs). Before 2026-12-02 they ran
// on, each holding its namespace (netns.SweepStale leaves a namespace
// with a process in it alone). A child test binary starts a daemon on
// each host of this test's topology, prints their process ids and hangs
// until its -timeout 5s; then none of those processes runs and the
// namespaces are empty.
func TestNetnsDaemonsEndWithTimedOutTest(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 2})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDaemonsThenHang$", "-test.count=1", "-test.timeout=5s")
	cmd.Env = append(os.Environ(), "RBCASTD_TEST_HANG_IN="+topo.Hosts[0].Namespace+","+topo.Hosts[1].Namespace,
		"RBCASTD_TEST_HANG_DIR="+t.TempDir())
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	starts := map[int]string{} // a process's start time: its id may be reused once it ends
	t.Cleanup(func() {
		cmd.Process.Kill()
		for _, pid := range pids {
			if procStart(pid) == starts[pid] {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	var printed strings.Builder
	for sc := bufio.NewScanner(out); sc.Scan(); {
		printed.WriteString(sc.Text() + "\n")
		if p, ok := strings.CutPrefix(sc.Text(), "daemon pid "); ok {
			pid, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("the child printed %q", sc.Text())
			}
			pids, starts[pid] = append(pids, pid), procStart(pid)
		}
	}
	err = cmd.Wait()
	if all := printed.String() + errOut.String(); err == nil || !strings.Contains(all, "panic: test timed out after 5s") || len(pids) != 2 {
		t.Fatalf("the child: %v, pids %v, want its -timeout's panic and 2 daemons; it printed:\n%s", err, pids, all)
	}
	for _, pid := range pids {
		for deadline := time.Now().Add(10 * time.Second); procStart(pid) == starts[pid]; time.Sleep(10 * time.Millisecond) { // waits for the kernel; measures nothing
			if time.Now().After(deadline) {
				t.Fatalf("daemon %d still runs 10 s after the test that started it timed out", pid)
			}
		}
	}
	for _, h := range topo.Hosts {
		if out, err := exec.Command("ip", "netns", "pids", h.Namespace).Output(); err != nil || len(out) > 0 {
			t.Errorf("namespace %s: processes %q (%v), want none", h.Namespace, out, err)
		}
	}
}

// procStart is process pid's start time (/proc/PID/stat field 22), ""
// once it has ended (a zombie has too).
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19]
}

func TestHelperDaemonsThenHang(t *testing.T) {
	in, dir := os.Getenv("RBCASTD_TEST_HANG_IN"), os.Getenv("RBCASTD_TEST_HANG_DIR")
	if in == "" {
		t.Skip("run by TestNetnsDaemonsEndWithTimedOutTest")
	}
	for i, ns := range strings.Split(in, ",") {
		h := &netns.Host{Index: i, Namespace: ns, Iface: "eth0"}
		d := startLogged(t, rbcastdCmd(t.Context(), h, "run", "-i", h.Iface, "-group", "9", "-members", "2",
			"-socket", filepath.Join(dir, fmt.Sprintf("h%d.sock", i)), "-log-level", "warn"), fmt.Sprintf("daemon on host %d", i))
		fmt.Printf("daemon pid %d\n", d.cmd.Process.Pid)
	}
	for i := range 2 {
		_, err := status(&socketFlags{socket: filepath.Join(dir, fmt.Sprintf("h%d.sock", i))}, 4*time.Second)
		fmt.Printf("host %d: %v\n", i, err)
	}
	select {} // until -timeout
}
