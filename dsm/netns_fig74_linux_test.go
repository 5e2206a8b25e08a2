package dsm_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/lifeline"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// fig74Segs is thesis fig. 7.4's layout (TestFig7_4Transcript): s1
// joined by p0 and p1 (channel c1), s2 by p1 and p2 (c2); every process
// on the global channel c_g.
var fig74Segs = map[uint32][]int{1: {0, 1}, 2: {1, 2}}

// fig74Rounds is how many rounds of chanProgram the processes run.
const fig74Rounds = 20

// fig74Env names the environment variable that makes TestNetnsFig74Rank
// one process of TestNetnsFig74: its rank.
const fig74Env = "RBDSM_FIG74_RANK"

// Fig. 7.4's topology on the real network, as real processes: three
// namespaces on a bridge, each running this test binary as one member
// (TestNetnsFig74Rank: a ring link on eth0, registration with rank 0 the
// server, Channels), nftables loss at two of them (5 % random in, 10 % in
// bursts of 4) and on the way out of the third (5 %). They run
// chanProgram on fig74Segs: every read after a barrier equals the
// sequential program's value, in the process; then each prints a digest
// of its segments' memory, which must equal the sequential program's
// final memory byte for byte. p0 and p2 open one channel each and p1 two,
// as in the figure, every marker is counted, and no frame of a channel a
// process has not joined reaches it (foreign 0: p0 never sees c2's
// frames, nor p2 c1's). Needs root (skips otherwise).
func TestNetnsFig74(t *testing.T) {
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbmfig"})
	losses := []struct {
		dir  netns.Direction
		loss netns.Loss
	}{{netns.Out, netns.Loss{Percent: 5, EtherType: frame.EtherType}},
		{netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}},
		{netns.In, netns.Loss{Percent: 10, BurstLen: 4, EtherType: frame.EtherType}}}
	for i, h := range topo.Hosts {
		if err := h.SetLoss(losses[i].dir, losses[i].loss); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	cmds := make([]*exec.Cmd, len(topo.Hosts))
	outs := make([]*strings.Builder, len(topo.Hosts))
	// On every way out of the test (a child that does not start, a
	// Fatal, a panic) each child started and not yet waited for is killed
	// and waited for here, before Up's cleanup deletes the namespaces: no
	// process outlives the test. (The context's cancel alone has one of
	// exec's goroutines kill them, some time later, and nothing waits:
	// with a failed start they were still running when the namespaces
	// were deleted.)
	t.Cleanup(func() {
		cancel()
		for _, c := range cmds {
			if c != nil && c.Process != nil && c.ProcessState == nil {
				c.Process.Kill()
				c.Wait()
			}
		}
	})
	for i, h := range topo.Hosts {
		c := h.Command(ctx, exe, "-test.run=^TestNetnsFig74Rank$", "-test.count=1", "-test.timeout=45s")
		c.Env = append(os.Environ(), fmt.Sprintf("%s=%d", fig74Env, i), "RBDSM_FIG74_IFACE="+h.Iface)
		outs[i] = &strings.Builder{}
		c.Stdout, c.Stderr = outs[i], outs[i]
		if err := c.Start(); err != nil {
			t.Fatalf("p%d: %v", i, err)
		}
		cmds[i] = c
	}
	want := fig74Memory(fig74Segs, fig74Rounds)
	line := regexp.MustCompile(`(?m)^fig74 rank=(\d) (.*)$`)
	for i, c := range cmds {
		err := c.Wait()
		out := outs[i].String()
		m := line.FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Errorf("p%d: %v, no report:\n%s", i, err, out)
			continue
		}
		t.Logf("p%d (loss %v %+v): %s", i, losses[i].dir, losses[i].loss, m[2])
		f := map[string]string{}
		for _, kv := range strings.Fields(m[2]) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if m[1] != strconv.Itoa(i) {
			t.Errorf("host %d ran rank %s", i, m[1])
		}
		if w := fig74Digest(want[i]); f["memory"] != w {
			t.Errorf("p%d: memory digest %s, want the sequential program's %s", i, f["memory"], w)
		}
		var chans []string
		for _, key := range slices.Sorted(maps.Keys(fig74Segs)) {
			if slices.Contains(fig74Segs[key], i) {
				chans = append(chans, strconv.Itoa(int(key)))
			}
		}
		if got, wantCh := f["channels"], strings.Join(chans, ","); got != wantCh {
			t.Errorf("p%d: channels %s, want %s (fig. 7.4)", i, got, wantCh)
		}
		if want := strconv.Itoa(len(chans) * 2 * fig74Rounds); f["markers"] != want {
			t.Errorf("p%d: %s markers sent, want %s (one per channel and barrier after the fixing one)", i, f["markers"], want)
		}
		if f["foreign"] != "0" || f["bad"] != "0" {
			t.Errorf("p%d: foreign frames %s, bad messages %s, want 0 and 0", i, f["foreign"], f["bad"])
		}
	}
}

// TestNetnsFig74Rank is one process of TestNetnsFig74, which runs this
// binary with RBDSM_FIG74_RANK set in each namespace; skipped otherwise.
func TestNetnsFig74Rank(t *testing.T) {
	rank, err := strconv.Atoi(os.Getenv(fig74Env))
	if err != nil {
		t.Skipf("one process of TestNetnsFig74 (%s unset)", fig74Env)
	}
	lifeline.Tie() // a rank ends with the test process that started it
	l, err := ring.Open(os.Getenv("RBDSM_FIG74_IFACE"), ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := dsm.Join(ctx, l, dsm.Config{Channels: true, Group: reliable.Config{Group: 0xf74, Size: 3, Server: rank == 0,
		RequestID: frame.MemberID(rank), Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatalf("p%d: Join: %v", rank, err)
	}
	if n.Rank() != rank {
		n.Exit()
		t.Fatalf("asked for rank %d, registration gave %d", rank, n.Rank())
	}
	var mine map[uint32]*dsm.Segment
	err = chanProgramSegs(fig74Segs, nil, fig74Rounds, func(ctx context.Context, n *dsm.Node, id int) error { return n.Barrier(ctx, id) },
		func(m map[uint32]*dsm.Segment) { mine = m })(n)
	var mem []byte
	if err == nil {
		mem, err = fig74Read(mine)
	}
	st := n.Stats()
	if xerr := n.Exit(); err == nil {
		err = xerr
	}
	if err != nil {
		t.Fatalf("p%d: %v", rank, err)
	}
	fmt.Printf("fig74 rank=%d memory=%s channels=%s markers=%d foreign=%d bad=%d applied=%d retrans=%d\n", rank,
		fig74Digest(mem), fig74Keys(slices.Sorted(maps.Keys(st.Channels))),
		st.Markers, st.Group.Link.Filtered, st.BadMessages, st.AppliedUpdates, st.Group.Protocol.Retransmitted)
}

// fig74Read returns the memory of the member's segments, in key order.
func fig74Read(mine map[uint32]*dsm.Segment) ([]byte, error) {
	var mem []byte
	buf := make([]byte, chanSize)
	for _, key := range slices.Sorted(maps.Keys(mine)) {
		for loc := range chanLocs {
			got, err := mine[key].Read(loc, buf)
			if err != nil {
				return nil, err
			}
			mem = append(mem, got...)
		}
	}
	return mem, nil
}

// fig74Memory is the sequential program's final memory of each rank's
// segments of segs after rounds rounds of chanProgram, in key order: at
// each location its owner's (loc mod the ranks) last write, zero where
// the owner is not a member.
func fig74Memory(segs map[uint32][]int, rounds int) [][]byte {
	const ranks = 3
	out := make([][]byte, ranks)
	for r := range ranks {
		var mem []byte
		for _, key := range slices.Sorted(maps.Keys(segs)) {
			if !slices.Contains(segs[key], r) {
				continue
			}
			for loc := range chanLocs {
				if owner := loc % ranks; slices.Contains(segs[key], owner) {
					mem = append(mem, chanValue(owner, rounds-1, loc)...)
				} else {
					mem = append(mem, make([]byte, chanSize)...)
				}
			}
		}
		out[r] = mem
	}
	return out
}

// fig74Digest is mem's SHA-256, in hex.
func fig74Digest(mem []byte) string { return fmt.Sprintf("%x", sha256.Sum256(mem)) }

// fig74Keys is keys as "1,2".
func fig74Keys(keys []uint32) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = strconv.Itoa(int(k))
	}
	return strings.Join(s, ",")
}
