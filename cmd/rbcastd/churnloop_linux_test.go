package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Issue 19's netns churn test: four daemons of an Agreed group over views
// (-order total -membership views), 3 % loss into every host, every member
// streaming numbered lines, and for a minute (15 s with -short;
// RBCAST_CHURN_SECONDS to change it) a loop that kills one daemon with
// SIGKILL, waits for the view without it at every survivor, restarts it
// (the same -node: a new incarnation), waits until every member has it in
// its view, and lets the group stream a while. The victims go round the
// hosts from host 0: the first daemon started, and whenever it is back the
// lowest id, so the view's coordinator and the sequencer (the orderer of
// Agreed).
//
// Every incarnation's receiver subscribes as soon as its daemon's socket
// answers and records what it delivers from then on, without view ids (the
// local API has none); checkChurn then checks what those records support:
// FIFO per sender incarnation with no gap or duplicate; one sequence of
// which every record is a contiguous window (so two incarnations delivered
// the same messages in the same order over the span both were members, and
// none skipped a message while it was one), but for a killed incarnation's
// last messages, from the first place the others did not deliver alike
// (Agreed is not uniform for a member that then crashes: checkChurn);
// every message delivered by two incarnations
// at least; the incarnations alive at the end all at its end, holding
// everything their senders wrote. And two times are bounded by the failure
// timeout and a margin: from each kill to the view without the victim at
// every survivor, and the longest time a member's record did not grow
// while the senders streamed.
func TestNetnsViewsChurnLoop(t *testing.T) {
	netnstest.RequireRoot(t)
	dur := 60 * time.Second
	if testing.Short() {
		dur = 15 * time.Second // four kills at least, whatever the duration
	}
	if s := os.Getenv("RBCAST_CHURN_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("RBCAST_CHURN_SECONDS=%q: want whole seconds, at least 1", s)
		}
		dur = time.Duration(n) * time.Second
	}
	topo := netnstest.Up(t, netns.Options{Hosts: 4, Prefix: "rbcl"})
	const (
		group   = 34
		pace    = 5 * time.Millisecond // a line per sender every pace
		failure = time.Second
		margin  = 1500 * time.Millisecond
		settle  = 1500 * time.Millisecond // streaming in the full view between kills
	)
	for _, h := range topo.Hosts {
		if err := h.SetLoss(netns.In, netns.Loss{Percent: 3, EtherType: frame.EtherType}); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, topo: topo, dir: t.TempDir(), group: group}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type life struct {
		host, run   int
		d           *loggedDaemon
		out         string
		recv        *exec.Cmd
		recvLog     *syncbuf.Buffer
		recvDone    chan struct{}
		in          io.WriteCloser
		send        *exec.Cmd
		sendLog     *syncbuf.Buffer
		stop        chan struct{}
		sendDone    chan error
		written     int // lines written to send (once sendDone)
		incarnation uint32
		ready       time.Time
		killed      bool
	}
	var mu sync.Mutex // lives and their ready/killed for the stall watcher
	var lives []*life
	runs := make([]int, len(topo.Hosts))
	current := make([]*life, len(topo.Hosts))

	startDaemon := func(i int) *life {
		h := topo.Hosts[i]
		os.Remove(c.socket(i)) // a killed daemon's
		args := []string{"run", "-i", h.Iface, "-group", fmt.Sprint(group), "-members", fmt.Sprint(len(topo.Hosts)),
			"-socket", c.socket(i), "-failure-timeout", failure.String(), "-log-level", churnLogLevel(), "-node", fmt.Sprint(i),
			"-order", "total", "-membership", "views", "-level", "agreed"}
		l := &life{host: i, run: runs[i], out: filepath.Join(c.dir, fmt.Sprintf("h%d-r%d", i, runs[i]))}
		runs[i]++
		l.d = startLogged(t, rbcastdCmd(context.Background(), h, args...), fmt.Sprintf("daemon on host %d run %d", i, l.run))
		// The receiver subscribes once the socket answers: a founder's
		// before the group starts, a restarted daemon's usually some
		// milliseconds after it joined (it records a suffix of what its
		// incarnation delivered; checkChurn asks no more of it).
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := status(&socketFlags{socket: c.socket(i)}, 0); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %d run %d: the socket does not answer\n%s", i, l.run, l.d.log)
			}
			time.Sleep(5 * time.Millisecond)
		}
		l.recv = c.cli(ctx, i, "recv", "-all", "-format", "lines", "-o", l.out)
		l.recvLog = &syncbuf.Buffer{}
		l.recv.Stdout, l.recv.Stderr = l.recvLog, l.recvLog
		if err := l.recv.Start(); err != nil {
			t.Fatal(err)
		}
		l.recvDone = make(chan struct{})
		go func() { l.recv.Wait(); close(l.recvDone) }()
		for c.status(i).Subscribers < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("host %d run %d: recv did not subscribe: %s", i, l.run, l.recvLog)
			}
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		lives = append(lives, l)
		mu.Unlock()
		current[i] = l
		return l
	}
	// ready waits until host i's daemon is a member, and every other live
	// daemon has it in its view with its incarnation.
	ready := func(l *life) {
		st, err := status(&socketFlags{socket: c.socket(l.host)}, 20*time.Second)
		if err != nil || st.View == nil || st.Self != l.host {
			t.Fatalf("host %d run %d: %v, %+v\n%s", l.host, l.run, err, st, l.d.log)
		}
		for _, m := range st.View.Members {
			if m.ID == l.host {
				l.incarnation = m.Incarnation
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for _, o := range current {
			if o == nil || o == l {
				continue
			}
			for {
				st := c.status(o.host)
				if hasIncarnation(st.View, l.host, l.incarnation) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("host %d run %d (incarnation %d) not in host %d's view %+v", l.host, l.run, l.incarnation, o.host, st.View)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		mu.Lock()
		l.ready = time.Now()
		mu.Unlock()
	}
	startSend := func(l *life) {
		l.send = c.cli(ctx, l.host, "send", "-lines", "-q")
		in, err := l.send.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		l.in = in
		l.sendLog = &syncbuf.Buffer{}
		l.send.Stdout, l.send.Stderr = l.sendLog, l.sendLog
		if err := l.send.Start(); err != nil {
			t.Fatal(err)
		}
		l.stop, l.sendDone = make(chan struct{}), make(chan error, 1)
		go func() {
			tick := time.NewTicker(pace)
			defer tick.Stop()
			var b []byte
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					in.Close()
					err := l.send.Wait()
					l.written = n
					l.sendDone <- err
					return
				case <-tick.C:
				}
				b = fmt.Appendf(b[:0], "h%d r%d s%d\n", l.host, l.run, n)
				if _, err := in.Write(b); err != nil {
					in.Close()
					l.send.Wait()
					l.written = n
					l.sendDone <- fmt.Errorf("writing line %d: %w", n, err)
					return
				}
			}
		}()
	}

	// The founders: host 0 first.
	for i := range topo.Hosts {
		startDaemon(i)
	}
	for _, l := range current {
		ready(l)
	}
	for _, l := range current {
		startSend(l)
	}

	// The longest time a ready, live incarnation's record did not grow.
	type stallAt struct {
		d    time.Duration
		who  string
		when time.Duration // since the loop began
	}
	var stall stallAt
	began := time.Now()
	watchStop, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		type seen struct {
			size int64
			at   time.Time
		}
		last := map[*life]seen{}
		for {
			select {
			case <-watchStop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			mu.Lock()
			for _, l := range lives {
				if l.killed || l.ready.IsZero() {
					continue
				}
				fi, _ := os.Stat(l.out)
				s, ok := last[l]
				now := time.Now()
				if !ok || sizeOf(fi) != s.size {
					last[l] = seen{sizeOf(fi), now}
					continue
				}
				from := s.at
				if from.Before(l.ready) {
					from = l.ready
				}
				if d := now.Sub(from); d > stall.d {
					stall = stallAt{d, fmt.Sprintf("host %d run %d", l.host, l.run), s.at.Sub(began)}
				}
			}
			mu.Unlock()
		}
	}()

	var kills []string
	var worstChange time.Duration
	for k := 0; k < 4 || time.Since(began) < dur; k++ {
		time.Sleep(settle)
		victim := k % len(topo.Hosts)
		l := current[victim]
		// The orderer of Agreed and the view's coordinator: the lowest id.
		orderer := -1
		if st := c.status((victim + 1) % len(topo.Hosts)); st.View != nil {
			orderer = slices.MinFunc(st.View.Members, func(a, b daemon.ViewMember) int { return a.ID - b.ID }).ID
		}
		mu.Lock()
		l.killed = true
		mu.Unlock()
		l.d.kill()
		killed := time.Now()
		current[victim] = nil
		// The view without it at every survivor.
		for _, o := range current {
			if o == nil {
				continue
			}
			for inView(c.status(o.host), victim) {
				if time.Since(killed) > failure+margin+10*time.Second {
					t.Fatalf("kill %d: member %d still in host %d's view %v after SIGKILL", k, victim, o.host, time.Since(killed))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		change := time.Since(killed)
		worstChange = max(worstChange, change)
		if change > failure+margin {
			t.Errorf("kill %d (member %d): the view without it at every survivor %v after SIGKILL, want at most the failure timeout %v + %v", k, victim, change, failure, margin)
		}
		select {
		case <-l.recvDone:
		case <-time.After(10 * time.Second):
			t.Fatalf("host %d run %d: recv still running 10 s after its daemon was killed", l.host, l.run)
		}
		close(l.stop)
		<-l.sendDone
		n := startDaemon(victim)
		ready(n)
		startSend(n)
		kills = append(kills, fmt.Sprintf("member %d (orderer and coordinator %d): view without it %v, back as incarnation %d %v after the kill",
			victim, orderer, change.Round(time.Millisecond), n.incarnation, time.Since(killed).Round(time.Millisecond)))
	}
	time.Sleep(settle) // the last incarnation streams too
	loop := time.Since(began)
	close(watchStop)
	<-watchDone

	// Stop the senders: each exits 0 once every live member holds its lines.
	sent := map[int]int{}
	for _, l := range current {
		close(l.stop)
	}
	for _, l := range current {
		select {
		case err := <-l.sendDone:
			if err != nil {
				t.Fatalf("send at host %d run %d: %v\n%s", l.host, l.run, err, l.sendLog)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("send at host %d run %d did not end 30 s after its input did", l.host, l.run)
		}
		sent[l.host] = l.written
	}
	// Wait until the live receivers' records stop growing and end alike.
	deadline := time.Now().Add(30 * time.Second)
	var lasts []string
	for {
		var now, ends []string
		for _, l := range current {
			end, size := lastLine(t, l.out)
			now, ends = append(now, fmt.Sprintf("%q at %d", end, size)), append(ends, end)
		}
		if slices.Equal(now, lasts) && len(slices.Compact(ends)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			for _, l := range current {
				if end, _ := lastLine(t, l.out); end == "" {
					l.recv.Process.Signal(syscall.SIGQUIT)
					time.Sleep(time.Second)
				}
				st := c.status(l.host)
				t.Logf("host %d run %d: %d subscribers, delivered %d; recv said: %s", l.host, l.run, st.Subscribers, st.Delivered, l.recvLog)
			}
			t.Fatalf("the live receivers' records still end differently or grow 30 s after the senders ended: last lines %s", now)
		}
		lasts = now
		time.Sleep(300 * time.Millisecond)
	}
	for _, l := range current {
		l.recv.Process.Signal(syscall.SIGTERM)
		<-l.recvDone
	}
	var finalView uint32
	if st := c.status(0); st.View != nil {
		finalView = st.View.ID
	}

	var recs []churnRecord
	for _, l := range lives {
		b, err := os.ReadFile(l.out)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		if len(b) > 0 {
			lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		}
		recs = append(recs, churnRecord{host: l.host, run: l.run, killed: l.killed, lines: lines})
	}
	res, err := checkChurn(recs, sent)
	for _, k := range kills {
		t.Logf("%s", k)
	}
	if err != nil {
		for i, l := range lives {
			n := len(recs[i].lines)
			t.Logf("host %d run %d (killed %v) delivered %d, the last %q; recv said: %s", l.host, l.run, l.killed, n, recs[i].lines[max(0, n-3):], l.recvLog)
		}
		t.Fatal(err)
	}
	t.Logf("%v of churn: %d kills, %d incarnations, final view %#x (number %d); %d messages in one sequence (SHA-256 %x); %d delivered by a killed incarnation at its end out of it, %d of those by the others at later places",
		loop.Round(time.Second), len(kills), len(lives), finalView, finalView>>8, res.messages, res.hash[:8], res.extras, res.replaced)
	t.Logf("kill to the view without the victim at every survivor: at most %v; longest a member's record did not grow: %v (%s, %v into the loop)",
		worstChange.Round(time.Millisecond), stall.d.Round(time.Millisecond), stall.who, stall.when.Round(time.Millisecond))
	if stall.d > failure+margin {
		t.Errorf("a member delivered nothing for %v (%s, %v into the loop) while the senders streamed, want at most the failure timeout %v + %v", stall.d, stall.who, stall.when, failure, margin)
	}
}

func hasIncarnation(v *daemon.ViewStatus, id int, inc uint32) bool {
	if v == nil {
		return false
	}
	for _, m := range v.Members {
		if m.ID == id && m.Incarnation == inc {
			return true
		}
	}
	return false
}

// lastLine is the file's last line ("" if none) and its size.
func lastLine(t *testing.T, path string) (string, int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return string(b[bytes.LastIndexByte(b, '\n')+1:]), len(b)
}

// churnLogLevel is the daemons' -log-level: RBCAST_CHURN_LOG, else warn.
func churnLogLevel() string {
	if l := os.Getenv("RBCAST_CHURN_LOG"); l != "" {
		return l
	}
	return "warn"
}
