package reliable

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/linkbench"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// BenchmarkLiuTables re-runs the message-passing measurements of Liu's
// thesis, chapter 6 (Tables 6.4–6.7), on a netns segment: a parent and 1
// to 8 children, 900-byte messages, the parent sending by unicast (a UDP
// datagram to each child, as REM's unicast did), by weak multicast (the
// Unreliable level: Group.SendUnreliable) and by strong multicast (Send,
// then until every child acknowledged it: Liu's strong primitive blocks
// until the confirmations are in).
//
//   - send time (Table 6.4): how long the send primitive keeps the sender;
//   - response time (Table 6.5): from the send until every child's reply
//     is back (each child answers by UDP unicast, as in the thesis);
//   - the speedup of weak multicast over unicast (Table 6.6) and the
//     overhead of strong over weak (Table 6.7) follow from them.
//
// Tables 6.1–6.3 time a CPU-bound task split over the children; on a
// machine with two cores the children's loops would queue for the CPU and
// the table would measure that, so they are not re-run.
//
// RBCAST_LIU_N sets the iterations per cell (default 300; medians are
// reported), RBCAST_REPORT_OUT a file for the markdown table. Root. The
// members are goroutines of the benchmark process, each on its host's
// link, with rings that do not poll (RBCAST_BENCH_SPIN overrides).
func BenchmarkLiuTables(b *testing.B) {
	netnstest.RequireRoot(b)
	iters := 300
	if n := envInt(b, "RBCAST_LIU_N"); n > 0 {
		iters = n
	}
	const children = 8
	topo := netnstest.Up(b, netns.Options{Hosts: children + 1, Prefix: "rbliu", Addresses: true})
	// Nine members in one process on a machine of two cores: rings that
	// poll before sleeping would take the CPU from the others (and the
	// unicast side's sockets block), so they do not poll, unless
	// RBCAST_BENCH_SPIN says otherwise.
	spin := time.Duration(-1)
	if _, ok := envDuration(b, "RBCAST_BENCH_SPIN"); ok {
		spin = benchSpin(b)
	}
	links := make([]link.Link, len(topo.Hosts))
	for i, h := range topo.Hosts {
		if err := h.Do(func() error {
			var err error
			links[i], err = linkbench.OpenRing("ring-v2", h.Iface, spin)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	var rows []liuResult
	for n := 1; n <= children; n++ {
		r := liuRun(b, topo, links[:n+1], iters)
		r.n = n
		rows = append(rows, r)
		b.Logf("%d children: send %v / %v / %v, response %v / %v / %v (unicast / weak / strong), weak replies lost %d",
			n, r.sendU, r.sendW, r.sendS, r.respU, r.respW, r.respS, r.lostW)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Microseconds())/1000) }
	var out strings.Builder
	fmt.Fprintf(&out, "Liu, Tables 6.4–6.7 re-run: 900-byte messages, medians of %d iterations, milliseconds (load %s)\n\n", iters, loadavg())
	fmt.Fprintf(&out, "| children | send: unicast | weak | strong | response: unicast | weak | strong | weak vs unicast (6.6) | strong vs weak (6.7) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		speedup := float64(r.respU-r.respW) / float64(r.respU) * 100
		overhead := float64(r.respS-r.respW) / float64(r.respW) * 100
		fmt.Fprintf(&out, "| %d | %s | %s | %s | %s | %s | %s | %+.1f %% | %+.1f %% |\n", r.n, ms(r.sendU), ms(r.sendW), ms(r.sendS), ms(r.respU), ms(r.respW), ms(r.respS), speedup, overhead)
	}
	b.Log("\n" + out.String())
	if p := os.Getenv("RBCAST_REPORT_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

type liuResult struct {
	n                                        int
	sendU, sendW, sendS, respU, respW, respS time.Duration
	lostW                                    int
}

// liuRun measures one row: host 0 is the parent, the others children.
func liuRun(b *testing.B, topo *netns.Topology, links []link.Link, iters int) liuResult {
	n := len(links) - 1
	members := make([]frame.MemberInfo, len(links))
	for i := range links {
		members[i] = frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(topo.Hosts[i].MAC), Incarnation: 1}
	}
	gid := 1000 + benchGroups.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Views, so that the weak primitive exists; a static first view of
	// every member (each asks for its host's id and founds with all).
	groups := make([]*Group, len(links))
	errs := make(chan error, len(links))
	for i, l := range links {
		go func() {
			g, err := Join(ctx, l, Config{Group: gid, Views: true, Size: len(links), RequestID: frame.MemberID(i), Logger: quiet})
			groups[i] = g
			errs <- err
		}()
	}
	for range links {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, g := range groups {
			g.abort()
			<-g.Done()
		}
	}()
	// UDP sockets: the parent's (replies, and unicast sends), each child's.
	udp := func(h *netns.Host) *net.UDPConn {
		var c *net.UDPConn
		if err := h.Do(func() error {
			var err error
			c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: h.IP, Port: 7400})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return c
	}
	parent := udp(topo.Hosts[0])
	defer parent.Close()
	parentAddr := &net.UDPAddr{IP: topo.Hosts[0].IP, Port: 7400}
	childAddrs := make([]*net.UDPAddr, n)
	for i := 1; i <= n; i++ {
		c := udp(topo.Hosts[i])
		defer c.Close()
		childAddrs[i-1] = &net.UDPAddr{IP: topo.Hosts[i].IP, Port: 7400}
		reply := func(msg []byte) {
			if len(msg) >= 4 {
				c.WriteToUDP(msg[:4], parentAddr)
			}
		}
		go func() { // unicast: the parent's datagrams
			buf := make([]byte, 2048)
			for {
				k, _, err := c.ReadFromUDP(buf)
				if err != nil {
					return
				}
				reply(buf[:k])
			}
		}()
		go func() { // multicast: the group's messages, weak or strong
			buf := make([]byte, 0, 2048)
			for {
				_, data, err := groups[i].RecvAppend(ctx, buf[:0])
				if err != nil {
					return
				}
				reply(data)
			}
		}()
	}
	msg := make([]byte, 900)
	replies := func(id uint32) (lost bool) {
		buf := make([]byte, 64)
		got := 0
		parent.SetReadDeadline(time.Now().Add(time.Second))
		for got < n {
			k, _, err := parent.ReadFromUDP(buf)
			if err != nil {
				return true // a weak message lost: no reply comes
			}
			if k == 4 && binary.BigEndian.Uint32(buf) == id {
				got++
			}
		}
		return false
	}
	var res liuResult
	var sendU, sendW, sendS, respU, respW, respS []time.Duration
	id := uint32(0)
	for it := range iters + 20 {
		warm := it < 20
		// Unicast.
		id++
		binary.BigEndian.PutUint32(msg, id)
		t0 := time.Now()
		for _, a := range childAddrs {
			if _, err := parent.WriteToUDP(msg, a); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		replies(id)
		t2 := time.Now()
		if !warm {
			sendU, respU = append(sendU, t1.Sub(t0)), append(respU, t2.Sub(t0))
		}
		// Weak multicast.
		id++
		binary.BigEndian.PutUint32(msg, id)
		t0 = time.Now()
		if err := groups[0].SendUnreliable(msg); err != nil {
			b.Fatal(err)
		}
		t1 = time.Now()
		lost := replies(id)
		t2 = time.Now()
		if lost {
			res.lostW++
		} else if !warm {
			sendW, respW = append(sendW, t1.Sub(t0)), append(respW, t2.Sub(t0))
		}
		// Strong multicast: Send, then until every child acknowledged.
		id++
		binary.BigEndian.PutUint32(msg, id)
		t0 = time.Now()
		if err := groups[0].Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		for groups[0].Stats().Protocol.InFlight > 0 {
			time.Sleep(10 * time.Microsecond)
		}
		t1 = time.Now()
		if replies(id) {
			b.Fatalf("%d children: a reliable message got no reply from every child within a second", n)
		}
		t2 = time.Now()
		if !warm {
			sendS, respS = append(sendS, t1.Sub(t0)), append(respS, t2.Sub(t0))
		}
	}
	med := func(d []time.Duration) time.Duration {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	res.sendU, res.sendW, res.sendS = med(sendU), med(sendW), med(sendS)
	res.respU, res.respW, res.respS = med(respU), med(respW), med(respS)
	return res
}
