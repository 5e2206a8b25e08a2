package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestNetnsWrongKey: two daemons found an authenticated group; a third
// with another key is refused, and its run ends with the key-mismatch
// error naming both keys (not a timeout). Then the two rotate to the
// third's key with rbcastd rekey (install, activate, retire on each), and
// the third, started again, joins.
func TestNetnsWrongKey(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbak" + fmt.Sprint(time.Now().UnixNano()%100000)})
	const group = 43
	c := &cluster{t: t, topo: topo, dir: t.TempDir(), group: group}
	keyA, keyB := filepath.Join(c.dir, "a.key"), filepath.Join(c.dir, "b.key")
	var ka, kb *auth.Key
	for {
		var err error
		if ka, err = auth.Generate(keyA, nil); err != nil {
			t.Fatal(err)
		}
		if kb, err = auth.Generate(keyB+".tmp", nil); err != nil {
			t.Fatal(err)
		}
		if ka.ID() != kb.ID() {
			break
		}
	}
	if err := exec.Command("mv", keyB+".tmp", keyB).Run(); err != nil {
		t.Fatal(err)
	}
	args := func(i int, key string) []string {
		return []string{"run", "-i", topo.Hosts[i].Iface, "-group", fmt.Sprint(group), "-members", "2", "-node", fmt.Sprint(i),
			"-socket", c.socket(i), "-failure-timeout", "1s", "-log-level", "warn", "-key-file", key}
	}
	start := func(i int, key string) *loggedDaemon {
		return startLogged(t, rbcastdCmd(context.Background(), topo.Hosts[i], args(i, key)...), fmt.Sprintf("daemon on host %d", i))
	}
	start(0, keyA)
	start(1, keyA)
	for i := range 2 {
		if _, err := status(&socketFlags{socket: c.socket(i)}, 20*time.Second); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}

	d := start(2, keyB)
	log := d.log
	select {
	case <-d.done:
		if d.err == nil {
			t.Fatalf("the daemon with another key ran and exited 0:\n%s", log)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon with another key still runs after 20s:\n%s", log)
	}
	for _, want := range []string{"key mismatch", "refused our frames", "the group uses another key",
		fmt.Sprintf("it uses key %s, this member key %s", ka, kb)} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the refused daemon's error lacks %q:\n%s", want, log)
		}
	}
	// Either member may be the one that answers with a KeyMismatch (the
	// first to see a frame under the unknown key, rate-limited per
	// station); both drop its frames.
	var mismatches uint64
	for i := range 2 {
		a := c.status(i).Auth
		if a == nil || a.Dropped["unknown_key"]+a.Dropped["bad_tag"] == 0 {
			t.Errorf("host %d auth status after the refusal: %+v, want frames under the other key dropped", i, a)
			continue
		}
		mismatches += a.MismatchesSent
	}
	if mismatches == 0 {
		t.Errorf("neither member sent a KeyMismatch to the refused daemon")
	}

	// Rotate the group to key B with the command line, then host 2 joins.
	for _, step := range [][]string{{"install", keyB}, {"activate", keyB}, {"retire"}} {
		for i := range 2 {
			var out bytes.Buffer
			cmd := c.cli(t.Context(), i, append([]string{"rekey"}, step...)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err != nil {
				t.Fatalf("host %d: rekey %v: %v\n%s", i, step, err, out.String())
			}
			if step[0] == "retire" && !strings.Contains(out.String(), fmt.Sprintf("key %s (id %d) active, accepting [%s]", kb, kb.ID(), kb)) {
				t.Errorf("host %d: rekey retire printed %q", i, out.String())
			}
		}
	}
	out, err := c.cli(t.Context(), 0, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("auth: key %s (id %d)", kb, kb.ID())) || !strings.Contains(string(out), fmt.Sprintf("key %s retired at", ka)) {
		t.Errorf("status after the rotation (%v):\n%s", err, out)
	}
	d2 := start(2, keyB)
	if st, err := status(&socketFlags{socket: c.socket(2)}, 20*time.Second); err != nil || st.View == nil || len(st.View.Members) != 3 {
		t.Fatalf("host 2 with the group's new key: %v, %+v\n%s", err, st, d2.log)
	}
	select {
	case <-d2.done:
		t.Fatalf("host 2 exited: %v\n%s", d2.err, d2.log)
	default:
	}
}
