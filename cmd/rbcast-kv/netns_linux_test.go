package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// The test binary is rbcast-kv when this is set (the netns test's
// children).
const mainEnv = "RBCAST_KV_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// kvCmd is rbcast-kv with args on host h.
func kvCmd(t *testing.T, h *netns.Host, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(context.Background(), exe, args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	return cmd
}

// TestNetnsKill: three replicas on a segment with 5 % loss at one of them,
// a client on a fourth host putting 600 keys one at a time; one replica
// is killed with SIGKILL while the puts run and restarted a second later.
// Every acknowledged put is applied exactly once (the applied logs of the
// replicas that ran throughout), the restarted replica serves reads of
// keys written before and after its restart (state transfer), and no put
// waits much longer than a client timeout plus the failure timeout.
func TestNetnsKill(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbkv", Addresses: true})
	if err := topo.Hosts[2].SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var addrs []string
	for _, h := range topo.Hosts[:3] {
		addrs = append(addrs, h.IP.String()+":7723")
	}
	servers := strings.Join(addrs, ",")
	replicas := make([]*exec.Cmd, 3)
	start := func(i, run int) {
		cmd := kvCmd(t, topo.Hosts[i], "serve", "-i", "eth0", "-group", "23", "-members", "3", "-listen", addrs[i],
			"-node", fmt.Sprint(i), "-failure-timeout", "300ms", "-applied", filepath.Join(dir, fmt.Sprintf("applied-%d-%d", i, run)))
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("log-%d-%d", i, run)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replicas[i] = cmd
	}
	t.Cleanup(func() {
		for _, c := range replicas {
			if c != nil {
				c.Process.Kill()
				c.Wait()
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log-*"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), b)
			}
		}
	})
	for i := range replicas {
		start(i, 1)
	}
	client := topo.Hosts[3]
	if out, err := kvCmd(t, client, "-servers", servers, "-deadline", "20s", "put", "hello", "world").CombinedOutput(); err != nil {
		t.Fatalf("the first put: %v: %s", err, out)
	}

	const puts = 600
	load := kvCmd(t, client, "-servers", servers, "-timeout", "300ms", "-client", "77", "load", "-n", fmt.Sprint(puts), "-prefix", "w")
	out, err := load.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var loadErr strings.Builder
	load.Stderr = &loadErr
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	var done string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "acked "); ok {
			acked[id] = true
		} else {
			done = line
		}
		switch len(acked) {
		case 150:
			replicas[1].Process.Kill() // SIGKILL
			replicas[1].Wait()
			replicas[1] = nil
			t.Logf("killed replica 1 after %d puts", len(acked))
			time.AfterFunc(time.Second, func() { start(1, 2) })
			acked["killed"] = true // once
		}
	}
	if err := load.Wait(); err != nil {
		t.Fatalf("load: %v: %s", err, loadErr.String())
	}
	delete(acked, "killed")
	t.Logf("load: %s; %d acknowledged", done, len(acked))
	if len(acked) != puts {
		t.Fatalf("%d puts acknowledged, want %d", len(acked), puts)
	}

	// The restarted replica serves what was written before it came back.
	for _, k := range []string{"hello", "w-0", "w-149", fmt.Sprintf("w-%d", puts-1)} {
		var got []byte
		var err error
		for try := 0; try < 20; try++ {
			got, err = kvCmd(t, client, "-servers", addrs[1], "-timeout", "500ms", "-deadline", "3s", "get", k).Output()
			if err == nil {
				break
			}
		}
		want := map[string]string{"hello": "world", "w-0": "0", "w-149": "149"}[k]
		if want == "" {
			want = fmt.Sprint(puts - 1)
		}
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("get %s from the restarted replica = %q, %v; want %q", k, got, err, want)
		}
	}

	// Every acknowledged put applied exactly once at each replica that ran
	// throughout, and nothing applied twice at any.
	for _, name := range []string{"applied-0-1", "applied-2-1", "applied-1-1", "applied-1-2"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fresh := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[2] == "fresh" {
				fresh[f[0]+" "+f[1]]++
			}
		}
		for id, n := range fresh {
			if n > 1 {
				t.Errorf("%s: request %s applied %d times", name, id, n)
			}
		}
		if strings.HasSuffix(name, "-1") && name != "applied-1-1" {
			for id := range acked {
				if fresh[id] != 1 {
					t.Errorf("%s: acknowledged request %s applied %d times", name, id, fresh[id])
				}
			}
		}
		t.Logf("%s: %d requests applied", name, len(fresh))
	}
}
