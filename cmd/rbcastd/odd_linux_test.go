package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// rbcastd run on interfaces it cannot use: loopback down and up (up, it
// has no Ethernet address to register by), a missing one, a down one, one
// whose MTU is too small, a tun device (no Ethernet frames at all), and a
// tap without carrier (usable, but nobody answers: -join-timeout), with
// both links and with and without -node. Each run exits 1 with an error
// that names the interface and what is wrong with it, and none panics
// (this used to panic in registration on loopback).
func TestOddInterfaces(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 1})
	h := topo.Hosts[0]
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", h.Namespace}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	// Created inside the host namespace, so they go with it.
	ip("link", "add", "rbqdown0", "type", "veth", "peer", "name", "rbqdown1")
	ip("link", "add", "rbqsmall0", "mtu", "500", "type", "veth", "peer", "name", "rbqsmall1", "mtu", "500")
	ip("link", "set", "rbqsmall0", "up")
	ip("tuntap", "add", "dev", "rbqtun0", "mode", "tun")
	ip("link", "set", "rbqtun0", "up")
	ip("tuntap", "add", "dev", "rbqtap0", "mode", "tap")
	ip("link", "set", "rbqtap0", "up")
	dir := t.TempDir()

	cases := []struct {
		iface, want string
		setup       []string // ip arguments run before this case
	}{
		{"lo", `interface "lo" is down`, []string{"link", "set", "lo", "down"}},
		{"lo", `interface "lo" has no Ethernet address (loopback has none), and members register by their unicast MAC`, []string{"link", "set", "lo", "up"}},
		{"rbqnothere0", `interface "rbqnothere0": no such network interface`, nil},
		{"rbqdown0", `interface "rbqdown0" is down (bring it up with ` + "`ip link set rbqdown0 up`)", nil},
		{"rbqsmall0", `interface "rbqsmall0": MTU 500 is too small for rbcast frames (need at least 576)`, nil},
		{"rbqtun0", `interface "rbqtun0" has no Ethernet address (a tun device or an IP tunnel carries no Ethernet frames)`, nil},
		{"rbqtap0", "the group did not start within -join-timeout 300ms", nil},
	}
	for _, c := range cases {
		if c.setup != nil {
			ip(c.setup...)
		}
		for _, linkKind := range []string{"ring", "afpacket"} {
			for _, node := range [][]string{{"-node", "0"}, nil} {
				args := append([]string{"run", "-i", c.iface, "-group", "3", "-members", "2", "-link", linkKind,
					"-socket", filepath.Join(dir, "odd.sock"), "-join-timeout", "300ms", "-log-level", "error"}, node...)
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				out, err := rbcastdCmd(ctx, h, args...).CombinedOutput()
				cancel()
				var ee *exec.ExitError
				switch {
				case strings.Contains(string(out), "panic") || strings.Contains(string(out), "goroutine "):
					t.Errorf("%q crashed:\n%s", args, out)
				case !errors.As(err, &ee) || ee.ExitCode() != exitFail:
					t.Errorf("%q: %v, want exit status 1:\n%s", args, err, out)
				case !strings.Contains(string(out), "rbcastd run: ") || !strings.Contains(string(out), c.want):
					t.Errorf("%q said\n%s\nwant %q", args, out, c.want)
				}
			}
		}
	}
}
