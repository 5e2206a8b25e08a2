package netns_test

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// killedOwner builds a topology in a child process (prefix, or a random
// one when empty) and kills the child with SIGKILL, as go test's -timeout
// ends a test binary: the topology stays, its cleanup never run. It
// returns the topology's prefix.
func killedOwner(t *testing.T, prefix string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBuildsAndHangs$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RBCAST_NETNS_CHILD=hang", "RBCAST_NETNS_CHILD_PREFIX="+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := ""
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if p, ok := strings.CutPrefix(sc.Text(), "built "); ok {
			got = p
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got == "" {
		t.Fatal("the child printed no prefix")
	}
	t.Cleanup(func() { exec.Command(scriptPath(t, "down"), "-p", got).Run() })
	if left, _ := netns.Leftovers(got); len(left) != 3 {
		t.Fatalf("after the child was killed: namespaces %v, want its 3", left)
	}
	return got
}

func TestHelperBuildsAndHangs(t *testing.T) {
	if os.Getenv("RBCAST_NETNS_CHILD") != "hang" {
		t.Skip("run by the sweep tests")
	}
	topo, err := netns.New(netns.Options{Hosts: 2, Prefix: os.Getenv("RBCAST_NETNS_CHILD_PREFIX")})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("built " + topo.Prefix + "\n")
	time.Sleep(time.Hour)
}

// A random-prefix topology whose builder was killed is swept, but only
// once no process is in it; a live process's topology and namespaces
// New did not record are left alone.
func TestSweepStaleRandom(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("RBCAST_NETNS_PREFIX", "rbts") // random prefixes rbts + 4 letters
	// Up first: its once-a-process sweep must not take the stale
	// topology before a process is in it.
	live := netnstest.Up(t, netns.Options{Hosts: 1}).Prefix
	stale := killedOwner(t, "")
	const unrecorded = "rbtsqqqqh0"
	if out, err := exec.Command("ip", "netns", "add", unrecorded).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", unrecorded).Run() })

	// A process in one of the stale topology's namespaces: in use.
	inside := exec.Command("ip", "netns", "exec", stale+"h1", "sleep", "600")
	if err := inside.Start(); err != nil {
		t.Fatal(err)
	}
	defer inside.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "pids", stale+"h1").Output()
		if len(strings.Fields(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process in %sh1 10 s after the start", stale)
		}
	}
	if swept, err := netns.SweepStaleRandom(); err != nil || len(swept) != 0 {
		t.Fatalf("with a process in %sh1: swept %v, %v; want nothing", stale, swept, err)
	}
	if left, _ := netns.Leftovers(stale); len(left) != 3 {
		t.Fatalf("with a process in %sh1: namespaces %v, want all 3", stale, left)
	}
	inside.Process.Kill()
	inside.Wait()

	swept, err := netns.SweepStaleRandom()
	if err != nil {
		t.Fatal(err)
	}
	if len(swept) != 1 || swept[0].Prefix != stale || !slices.Equal(swept[0].Namespaces, []string{stale + "br", stale + "h0", stale + "h1"}) {
		t.Fatalf("swept %+v, want %s's 3 namespaces only", swept, stale)
	}
	if left, _ := netns.Leftovers(stale); len(left) != 0 {
		t.Fatalf("after the sweep: %v remain", left)
	}
	if left, _ := netns.Leftovers(live); len(left) != 2 {
		t.Fatalf("the live test's topology %s: namespaces %v, want its 2", live, left)
	}
	if err := exec.Command("ip", "netns", "pids", unrecorded).Run(); err != nil {
		t.Fatalf("the unrecorded namespace %s is gone: %v", unrecorded, err)
	}
}

// A fixed prefix whose builder was killed: netnstest.Up sweeps it, where
// New alone refuses the names as taken.
func TestUpSweepsOwnPrefix(t *testing.T) {
	netnstest.RequireRoot(t)
	const prefix = "rbnstale"
	killedOwner(t, prefix)
	if _, err := netns.New(netns.Options{Hosts: 2, Prefix: prefix}); err == nil || !strings.Contains(err.Error(), "already exist") {
		t.Fatalf("New over the stale topology: %v, want a refusal", err)
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 2, Prefix: prefix})
	if len(topo.Hosts) != 2 {
		t.Fatalf("Up over the stale topology built %d hosts, want 2", len(topo.Hosts))
	}
}
