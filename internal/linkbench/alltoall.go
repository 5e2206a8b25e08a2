//go:build linux

package linkbench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
)

// AllToAll is the outcome of one raw all-to-all run: every host blasts
// MTU-sized broadcast frames and counts what it receives from the others.
type AllToAll struct {
	Elapsed time.Duration
	// Sent and Received are per host: frames it sent, and what it received
	// from all the others together (Received[i].Frames/Bytes; Lost is left
	// zero: without flow control a frame not received was dropped by a
	// full ring, counted in KernelDrops, or by injected loss).
	Sent     []uint64
	Received []Receiver
}

// MinMBps is the slowest host's received rate, in 10⁶ bytes per second
// over the sending time.
func (a *AllToAll) MinMBps() float64 {
	m := -1.0
	for _, r := range a.Received {
		if v := r.MBps(a.Elapsed); m < 0 || v < m {
			m = v
		}
	}
	return max(m, 0)
}

// MeanMBps is the hosts' mean received rate: the raw ceiling of an
// all-to-all protocol. Raw senders are not held in step, so the slowest
// host is the one whose own sender got most of the CPU (it receives all
// but its own frames); a protocol's members send in balance, so its
// slowest member is measured against what the hosts received on average.
func (a *AllToAll) MeanMBps() float64 {
	if len(a.Received) == 0 {
		return 0
	}
	var s float64
	for _, r := range a.Received {
		s += r.MBps(a.Elapsed)
	}
	return s / float64(len(a.Received))
}

// RunAllToAllOn runs the raw all-to-all on a topology the caller built:
// every host opens one link of o.Backend (with o.RxSpin), sends batches of
// o.Batch MTU-sized broadcast frames for o.Duration on one goroutine and
// receives on another. It is the all-to-all counterpart of RunThroughputOn:
// no flow control, so what a host receives is what the kernel and its
// ring could take while everyone sent. o.Overlap, o.Work, o.Processes and
// o.Sender are not supported and are refused.
func RunAllToAllOn(topo *netns.Topology, o Options) (*AllToAll, error) {
	if o.Overlap || o.Work || o.Processes || o.Sender != "" {
		return nil, errors.New("all-to-all takes only Backend, Duration, Batch and RxSpin")
	}
	open, _, err := o.openers()
	if err != nil {
		return nil, err
	}
	if o.Batch == 0 {
		o.Batch = 64
	}
	hosts := topo.Hosts
	if len(hosts) < 2 {
		return nil, fmt.Errorf("all-to-all needs 2 hosts or more, have %d", len(hosts))
	}
	links := make([]link.Link, 0, len(hosts))
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := openOn(h, open)
		if err != nil {
			return nil, fmt.Errorf("opening %s on %s: %w", o.Backend, h.Namespace, err)
		}
		links = append(links, l)
	}
	res := &AllToAll{Sent: make([]uint64, len(hosts)), Received: make([]Receiver, len(hosts))}
	var done atomic.Bool
	var rwg sync.WaitGroup
	for i, l := range links {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			res.Received[i] = receive(l, &done, false)
		}()
	}
	// Let receivers reach their first Recv before the clock starts.
	time.Sleep(100 * time.Millisecond)
	// A send error ends the run: the other senders stop at their next
	// batch instead of sending out the duration for nothing.
	errs := make([]error, len(hosts))
	var failed atomic.Bool
	var swg sync.WaitGroup
	start := time.Now()
	for i, l := range links {
		swg.Add(1)
		go func() {
			defer swg.Done()
			res.Sent[i], errs[i] = blast(l, topo.MTU, o.Batch, start.Add(o.Duration), &failed)
			if errs[i] != nil {
				failed.Store(true)
			}
		}()
	}
	swg.Wait()
	res.Elapsed = time.Since(start)
	// Give receivers time to drain what is queued, then stop them.
	time.Sleep(300 * time.Millisecond)
	done.Store(true)
	rwg.Wait()
	for i, l := range links {
		if st, err := l.Stats(); err == nil {
			res.Received[i].KernelDrops = st.KernelDrops
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("all-to-all: host %s: send: %w", hosts[i].Namespace, err)
		}
	}
	if err := receiverErr(hosts, res.Received); err != nil {
		return nil, fmt.Errorf("all-to-all: %w", err)
	}
	return res, nil
}

// blast sends batches of MTU-sized broadcast frames, each with a running
// sequence number, until the deadline or until stop is set, and returns
// how many it sent. Back-pressure (ENOBUFS, a full TX ring) is waited out
// by the link.
func blast(l link.Link, mtu, batch int, until time.Time, stop *atomic.Bool) (uint64, error) {
	src, err := srcMAC(l)
	if err != nil {
		return 0, err
	}
	frames := make([][]byte, batch)
	for i := range frames {
		b := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
		frames[i] = append(b, make([]byte, mtu)...)
	}
	var sent, seq uint64
	for time.Now().Before(until) && !stop.Load() {
		for _, f := range frames {
			seq++
			binary.BigEndian.PutUint64(f[frame.EthernetHeaderLen:], seq)
		}
		n, err := l.Send(frames)
		sent += uint64(n)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}
