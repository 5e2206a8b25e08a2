package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// The halo program over the real network: 4 namespaces on a bridge, one
// process per host (ring links, registration with rank 0 the server),
// nftables loss on hosts 1..3 (5 % random, 10 % in bursts of 4, 5 %
// outgoing), in channel mode and with full replication. Every rank's
// result must equal the sequential program's bit for bit (-verify), and
// with channels no frame of a group a process has not joined may reach it
// (foreign=0: link/mux counts the frames of groups without a view, which
// the kernel filter keeps out), and every report gives the process's CPU
// over the solve (cpu_us). Needs root (skips otherwise).
func TestNetnsHalo(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "halo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbdhalo"})
	losses := []struct {
		dir  netns.Direction
		loss netns.Loss
	}{{}, {netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}},
		{netns.In, netns.Loss{Percent: 10, BurstLen: 4, EtherType: frame.EtherType}},
		{netns.Out, netns.Loss{Percent: 5, EtherType: frame.EtherType}}}
	for i, h := range topo.Hosts {
		if l := losses[i]; l.loss.Percent > 0 {
			if err := h.SetLoss(l.dir, l.loss); err != nil {
				t.Fatal(err)
			}
		}
	}
	foreign := regexp.MustCompile(` foreign=(\d+)`)
	cpu := regexp.MustCompile(` cpu_us=(\d+)`)
	for _, mode := range [][]string{{"-channels"}, nil} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmds := make([]*exec.Cmd, len(topo.Hosts))
		outs := make([]*strings.Builder, len(topo.Hosts))
		for i, h := range topo.Hosts {
			args := append([]string{"-n", "96", "-iters", "60", "-verify", "-timeout", "90s",
				"-iface", h.Iface, "-procs", "4", "-rank", string(rune('0' + i)), "-group", "201"}, mode...)
			cmds[i] = h.Command(ctx, bin, args...)
			outs[i] = &strings.Builder{}
			cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			err := c.Wait()
			out := outs[i].String()
			t.Logf("%v host %d: %s", mode, i, strings.TrimSpace(out))
			if err != nil || !strings.Contains(out, " verify=ok") {
				t.Errorf("%v host %d: %v, no verify=ok", mode, i, err)
			}
			// The process's CPU over the solve (getrusage), which
			// bench-channels divides by the iterations.
			if m := cpu.FindStringSubmatch(out); m == nil || m[1] == "0" {
				t.Errorf("%v host %d: no CPU time in the report (cpu_us): %v", mode, i, m)
			}
			if mode != nil {
				if m := foreign.FindStringSubmatch(out); m == nil || m[1] != "0" {
					t.Errorf("host %d: frames of channels not joined reached the process: %v", i, m)
				}
			}
		}
		cancel()
	}
}
