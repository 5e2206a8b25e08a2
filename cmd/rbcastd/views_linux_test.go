package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// A group whose membership changes, under 5 % loss into every host:
// while host 1 streams to everyone, host 0's daemon (member 0, the view's
// coordinator) and then host 3's are killed with SIGKILL and restarted.
// Each restarted daemon rejoins the running group; the stable receiver
// (host 2) gets the whole stream, hash-equal; a restarted receiver gets a
// contiguous suffix of it that runs to its end; the stream stalls no
// longer than the failure timeout and a margin; every host ends in the
// same view of four, holding the restarted daemons' new incarnations.
func TestNetnsViewsChurn(t *testing.T) {
	for _, cr := range []carriage{ringCarriage, udpCarriage} {
		t.Run(cr.name, func(t *testing.T) {
			netnstest.RequireRoot(t)
			prefix := "rbvw"
			if cr.udp {
				prefix = "rbvu"
			}
			viewsChurn(t, netnstest.Up(t, netns.Options{Hosts: 4, Prefix: prefix, Addresses: cr.udp}), cr)
		})
	}
}

func viewsChurn(t *testing.T, topo *netns.Topology, cr carriage) {
	const (
		group   = 31
		chunk   = 64 << 10
		chunks  = 100
		total   = chunk * chunks
		pace    = 60 * time.Millisecond
		failure = time.Second
		margin  = 1500 * time.Millisecond
	)
	for _, h := range topo.Hosts {
		if err := h.SetLoss(netns.In, cr.loss(netns.Loss{Percent: 5, EtherType: frame.EtherType})); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, topo: topo, dir: t.TempDir(), group: group}
	start := func(i int) *loggedDaemon {
		h := topo.Hosts[i]
		args := []string{"run", "-i", h.Iface, "-group", fmt.Sprint(group), "-members", fmt.Sprint(len(topo.Hosts)),
			"-socket", c.socket(i), "-failure-timeout", failure.String(), "-log-level", "warn", "-node", fmt.Sprint(i)}
		args = append(args, cr.args(topo, group)...)
		d := startLogged(t, rbcastdCmd(context.Background(), h, args...), fmt.Sprintf("daemon on host %d", i))
		d.name = fmt.Sprintf("daemon pid %d on host %d", d.cmd.Process.Pid, i)
		return d
	}
	daemons := make([]*loggedDaemon, len(topo.Hosts))
	for i := range topo.Hosts {
		daemons[i] = start(i)
	}
	ready := func(i int) daemon.Status {
		t.Helper()
		st, err := status(&socketFlags{socket: c.socket(i)}, 20*time.Second)
		if err != nil {
			t.Fatalf("host %d: %v\n%s", i, err, daemons[i].log)
		}
		if st.View == nil || st.Self != i {
			t.Fatalf("host %d: member %d, view %+v; want member %d of a view", i, st.Self, st.View, i)
		}
		return *st
	}
	incarnations := map[int]uint32{}
	for i := range topo.Hosts {
		st := ready(i)
		for _, m := range st.View.Members {
			if m.ID == i {
				incarnations[i] = m.Incarnation
			}
			// Over UDP, status names every member's address (multicast
			// members send from a port of their own).
			if ip := topo.Hosts[m.ID].IP.String(); cr.udp && !strings.HasPrefix(m.Addr, ip+":") {
				t.Errorf("host %d's status: member %d at %q, want %s:PORT", i, m.ID, m.Addr, ip)
			}
		}
	}

	data := randomFile(t, filepath.Join(c.dir, "stream"), 31, total)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const sender = 1
	stableOut := filepath.Join(c.dir, "out2")
	stable := c.cli(ctx, 2, "recv", "-from", fmt.Sprint(sender), "-format", "raw", "-bytes", fmt.Sprint(total), "-o", stableOut)
	var stableLog bytes.Buffer
	stable.Stdout, stable.Stderr = &stableLog, &stableLog
	if err := stable.Start(); err != nil {
		t.Fatal(err)
	}
	var stableErr error
	stableDone := make(chan struct{})
	go func() { stableErr = stable.Wait(); close(stableDone) }()
	waitSubscribers(t, c, 1, 2)

	// The sender writes the stream at a pace, so that it is still under
	// way while members are killed and come back.
	send := c.cli(ctx, sender, "send")
	in, err := send.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var sendLog bytes.Buffer
	send.Stdout, send.Stderr = &sendLog, &sendLog
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	sendDone := make(chan error, 1)
	go func() {
		for off := 0; off < total; off += chunk {
			if _, err := in.Write(data[off : off+chunk]); err != nil {
				in.Close()
				send.Wait() // before sendLog is read: Wait ends its copying
				sendDone <- fmt.Errorf("writing to send: %w", err)
				return
			}
			time.Sleep(pace)
		}
		in.Close()
		sendDone <- send.Wait()
	}()

	// The longest time the stable receiver's output did not grow.
	var stallMu sync.Mutex
	var stall time.Duration
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		last, lastAt := int64(-1), time.Now()
		for {
			select {
			case <-stableDone:
				return
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			fi, err := os.Stat(stableOut)
			if err != nil {
				continue
			}
			if fi.Size() >= total {
				return
			}
			if fi.Size() != last {
				last, lastAt = fi.Size(), time.Now()
				continue
			}
			stallMu.Lock()
			stall = max(stall, time.Since(lastAt))
			stallMu.Unlock()
		}
	}()

	// Kill and restart the coordinator, then host 3.
	restartedOut := map[int]string{}
	var restartedRecv []*exec.Cmd
	victims := []int{0, 3}
	for _, victim := range victims {
		time.Sleep(700 * time.Millisecond)
		daemons[victim].kill()
		killed := time.Now()
		for {
			if !inView(c.status(2), victim) {
				break
			}
			if time.Since(killed) > failure+margin+time.Second {
				t.Fatalf("member %d still in host 2's view %v after SIGKILL", victim, time.Since(killed))
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: member %d left the view %v after SIGKILL (failure timeout %v)", cr.name, victim, time.Since(killed).Round(time.Millisecond), failure)
		daemons[victim] = start(victim)
		st := ready(victim)
		for _, m := range st.View.Members {
			if m.ID == victim && m.Incarnation == incarnations[victim] {
				t.Errorf("host %d rejoined with the incarnation of its killed run, %d", victim, m.Incarnation)
			}
		}
		t.Logf("%s: host %d rejoined as member %d in view %d, %v after the kill", cr.name, victim, st.Self, st.View.ID, time.Since(killed).Round(time.Millisecond))
		out := filepath.Join(c.dir, fmt.Sprintf("out%d", victim))
		r := c.cli(ctx, victim, "recv", "-from", fmt.Sprint(sender), "-format", "raw", "-o", out)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		restartedOut[victim], restartedRecv = out, append(restartedRecv, r)
	}
	defer func() {
		for _, r := range restartedRecv {
			r.Process.Kill()
			r.Wait()
		}
	}()

	if err := <-sendDone; err != nil {
		t.Fatalf("send at host %d: %v\n%s", sender, err, sendLog.String())
	}
	<-stableDone
	if stableErr != nil {
		t.Fatalf("recv at host 2: %v\n%s", stableErr, stableLog.String())
	}
	<-watchDone
	got, _ := os.ReadFile(stableOut)
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("host 2 (in every view): %d of %d bytes, SHA-256 differs: %s", len(got), total, whereDiffers(data, got))
	}
	stallMu.Lock()
	t.Logf("%s: %d bytes to the stable receiver, hash equal; longest stall %v", cr.name, total, stall.Round(time.Millisecond))
	if stall > failure+margin {
		t.Errorf("the stream stalled %v at the stable receiver, want at most the failure timeout %v + %v", stall, failure, margin)
	}
	stallMu.Unlock()
	for _, victim := range victims {
		var out []byte
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, _ = os.ReadFile(restartedOut[victim])
			if len(out) > 0 && bytes.HasSuffix(data, out) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %d (restarted): %d bytes, not a suffix of the stream that runs to its end: %s", victim, len(out), whereDiffers(data, out))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: host %d (restarted) received the last %d of %d bytes, contiguous", cr.name, victim, len(out), total)
	}

	// Every host ends in one view of the four.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var views []string
		for i := range topo.Hosts {
			st := c.status(i)
			var ids []int
			for _, m := range st.View.Members {
				ids = append(ids, m.ID)
			}
			views = append(views, fmt.Sprintf("%d:%v", st.View.ID, ids))
		}
		if slices.Equal(slices.Compact(slices.Clone(views)), views[:1]) && views[0] == fmt.Sprintf("%d:[0 1 2 3]", c.status(0).View.ID) {
			t.Logf("%s: every host in view %s", cr.name, views[0])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("views differ or lack a member: %v", views)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// whereDiffers says how out, meant to be a suffix of data, is not.
func whereDiffers(data, out []byte) string {
	if len(out) > len(data) {
		return fmt.Sprintf("%d bytes more than the stream", len(out)-len(data))
	}
	tail := data[len(data)-len(out):]
	i := 0
	for i < len(out) && out[i] == tail[i] {
		i++
	}
	if i == len(out) {
		return "equal"
	}
	at := -1
	if n := min(4096, len(out)-i); n > 0 {
		at = bytes.Index(data, out[i:i+n])
	}
	j := i
	for j < len(out) && out[j] != tail[j] {
		j++
	}
	k := j
	for k < len(out) && out[k] == tail[k] {
		k++
	}
	zeros := bytes.Count(out[i:j], []byte{0})
	return fmt.Sprintf("differs from the stream's tail at byte %d of %d (stream offset %d) for %d bytes (%d zeros), then equal for %d; the bytes there are at stream offset %d; got %x, want %x", i, len(out), len(data)-len(out)+i, j-i, zeros, k-j, at, out[i:min(i+32, len(out))], tail[i:min(i+32, len(out))])
}

// -order total over views (Agreed) under 5 % loss: three hosts send
// lines while all four receive every member's; host 3's daemon is killed
// with SIGKILL midway. The survivors deliver the same sequence, every
// sender's lines in its order; what host 3 delivered before it died is a
// prefix of it.
func TestNetnsViewsAgreed(t *testing.T) {
	for _, level := range []string{"agreed", "safe"} {
		t.Run(level, func(t *testing.T) {
			netnstest.RequireRoot(t)
			viewsAgreed(t, netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbv" + level[:1]}), level)
		})
	}
}

func viewsAgreed(t *testing.T, topo *netns.Topology, level string) {
	const (
		group = 32
		lines = 400
	)
	for _, h := range topo.Hosts {
		if err := h.SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
			t.Fatal(err)
		}
	}
	c := startCluster(t, topo, ringCarriage, group, everyNode("-order", "total", "-membership", "views", "-level", level))
	for i, id := range c.ids {
		if id != i {
			t.Fatalf("host %d is member %d, want %d", i, id, i)
		}
	}
	if st := c.status(0); st.View == nil || st.Order != "total" {
		t.Fatalf("host 0: order %s, view %+v; want a view, order total", st.Order, st.View)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	outs, recvs := c.recvAll(ctx, &wg, errs, "lines", 3*lines, 3)
	waitSubscribers(t, c, 1)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var in bytes.Buffer
			for n := range lines {
				fmt.Fprintf(&in, "host %d line %d\n", i, n)
			}
			s := c.cli(ctx, i, "send", "-lines")
			s.Stdin = &in
			if out, err := s.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("send at host %d: %w\n%s", i, err, out)
			}
		}()
	}
	for {
		b, _ := os.ReadFile(outs[0])
		if bytes.Count(b, []byte("\n")) >= lines {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("host 0 received %d lines", bytes.Count(b, []byte("\n")))
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.daemons[3].cmd.Process.Kill()
	wg.Wait()
	recvs[3].Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	seqs := sameSequences(t, outs, 3)
	if k := len(seqs[3]); k > len(seqs[0]) || !slices.Equal(seqs[3], seqs[0][:k]) {
		t.Fatalf("host 3 (killed) delivered %d lines that are not a prefix of the survivors' (first difference %s)", k, firstLineDiff(seqs[0], seqs[3]))
	}
	t.Logf("%s: three survivors delivered the same %d lines; the killed host a prefix of %d", level, len(seqs[0]), len(seqs[3]))
}

// sameSequences reads the lines every host's recv -format lines wrote
// (outs, by host) and checks that the first n hosts delivered one
// sequence, each sender's lines ("host H line L") in its order; it
// returns every host's lines.
func sameSequences(t *testing.T, outs []string, n int) [][]string {
	t.Helper()
	var seqs [][]string
	for _, out := range outs {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var seq []string
		if len(b) > 0 {
			seq = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		}
		seqs = append(seqs, seq)
	}
	for i := 1; i < n; i++ {
		if !slices.Equal(seqs[i], seqs[0]) {
			t.Fatalf("hosts 0 and %d delivered different sequences (%d and %d lines; first difference %s)", i, len(seqs[0]), len(seqs[i]), firstLineDiff(seqs[0], seqs[i]))
		}
	}
	next := map[string]int{}
	for _, l := range seqs[0] {
		from, payload, _ := strings.Cut(l, "\t")
		if want := fmt.Sprintf("host %s line %d", from, next[from]); payload != want {
			t.Fatalf("from member %s: %q, want %q (each sender's lines in its order)", from, payload, want)
		}
		next[from]++
	}
	return seqs
}

func firstLineDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at line %d: %q / %q", i+1, a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// TestNetnsSendLevel: in an Agreed group over views (5 % loss), one
// host sends with -level safe, one with -level agreed and one with the
// group's own level, all at once: every member delivers the same
// sequence, each sender's lines in its order. -level fifo is refused
// there, naming the group's level, before anything is sent.
func TestNetnsSendLevel(t *testing.T) {
	netnstest.RequireRoot(t)
	topo := netnstest.Up(t, netns.Options{Hosts: 3, Prefix: "rbsl"})
	const (
		group = 33
		lines = 300
	)
	for _, h := range topo.Hosts {
		if err := h.SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
			t.Fatal(err)
		}
	}
	c := startCluster(t, topo, ringCarriage, group, everyNode("-order", "total", "-membership", "views", "-level", "agreed"))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if out, err := c.cli(ctx, 0, "send", "-lines", "-level", "fifo").CombinedOutput(); err == nil || !strings.Contains(string(out), "-level fifo: the daemon's group runs at agreed, and FIFO per message is not offered in a total order") {
		t.Fatalf("send -level fifo into an Agreed group: %v %s", err, out)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	outs, _ := c.recvAll(ctx, &wg, errs, "lines", 3*lines, 3)
	waitSubscribers(t, c, 1)
	for i, level := range []string{"safe", "agreed", "reliable"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var in bytes.Buffer
			for n := range lines {
				fmt.Fprintf(&in, "host %d line %d\n", i, n)
			}
			s := c.cli(ctx, i, "send", "-lines", "-level", level)
			s.Stdin = &in
			if out, err := s.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("send -level %s at host %d: %w\n%s", level, i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	seqs := sameSequences(t, outs, 3)
	if len(seqs[0]) != 3*lines {
		t.Fatalf("delivered %d lines, want %d", len(seqs[0]), 3*lines)
	}
}
