//go:build linux

package linkbench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbcast/rbcast/testnet/netns"
)

// TCP fan-out: the baseline a reliable broadcast is compared with. Every
// sending host opens one TCP connection to every other host and writes the
// same byte stream into each; the kernel's TCP does the reliability, one
// copy of every byte per receiver. The topology must have been built with
// netns.Options.Addresses.

// TCPOptions describe one TCP fan-out run.
type TCPOptions struct {
	// Senders: hosts 0 … Senders−1 send, each to every other host (1:
	// one-to-all; len(Hosts): all-to-all). 0 means 1.
	Senders int
	// Chunk is the size of one write(2), 0 → 64 KiB. TCP is a byte
	// stream: small application messages written through a buffer leave
	// in chunks of this size, so the message size does not matter to it.
	Chunk int
	// Lag bounds how far, in bytes, one connection of a sender may run
	// ahead of that sender's slowest connection (a broadcasting
	// application cannot discard a message before every receiver has it);
	// 0 → 4 MiB.
	Lag      int
	Duration time.Duration
}

// TCPResult is the outcome of a TCP run.
type TCPResult struct {
	// Elapsed runs from the first write to the moment the last receiver
	// had read everything (end of stream on every connection).
	Elapsed time.Duration
	// Received is what each host read, from all senders together;
	// Written what the senders wrote to it (equal unless a connection
	// broke).
	Received, Written []uint64
	// Receivers lists the hosts that receive (all but host 0 for
	// one-to-all).
	Receivers []int
}

// MinMBps is the slowest receiving host's rate in 10⁶ bytes per second.
func (r *TCPResult) MinMBps() float64 {
	lo := -1.0
	for _, h := range r.Receivers {
		v := float64(r.Received[h]) / r.Elapsed.Seconds() / 1e6
		if lo < 0 || v < lo {
			lo = v
		}
	}
	return max(lo, 0)
}

// MeanMBps is the receiving hosts' mean rate.
func (r *TCPResult) MeanMBps() float64 {
	var s float64
	for _, h := range r.Receivers {
		s += float64(r.Received[h]) / r.Elapsed.Seconds() / 1e6
	}
	return s / float64(max(len(r.Receivers), 1))
}

// RunTCPFanout runs a TCP fan-out on topo for o.Duration.
func RunTCPFanout(topo *netns.Topology, o TCPOptions) (*TCPResult, error) {
	if o.Senders == 0 {
		o.Senders = 1
	}
	if o.Chunk == 0 {
		o.Chunk = 64 << 10
	}
	if o.Lag == 0 {
		o.Lag = 4 << 20
	}
	hosts := topo.Hosts
	if o.Senders < 1 || o.Senders > len(hosts) || len(hosts) < 2 {
		return nil, fmt.Errorf("TCP fan-out with %d senders on %d hosts", o.Senders, len(hosts))
	}
	for _, h := range hosts {
		if h.IP == nil {
			return nil, fmt.Errorf("TCP fan-out needs IPv4 addresses on the hosts (netns.Options.Addresses); %s has none", h.Namespace)
		}
	}
	res := &TCPResult{Received: make([]uint64, len(hosts)), Written: make([]uint64, len(hosts))}
	// Every host that some sender sends to listens.
	lns := make([]net.Listener, len(hosts))
	defer func() {
		for _, ln := range lns {
			if ln != nil {
				ln.Close()
			}
		}
	}()
	expect := make([]int, len(hosts)) // connections each host accepts
	for i := range hosts {
		expect[i] = o.Senders
		if i < o.Senders {
			expect[i]--
		}
		if expect[i] == 0 {
			continue
		}
		res.Receivers = append(res.Receivers, i)
		h := hosts[i]
		err := h.Do(func() error {
			var err error
			lns[i], err = net.Listen("tcp4", net.JoinHostPort(h.IP.String(), "0"))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", h.Namespace, err)
		}
	}
	counts := make([]atomic.Uint64, len(hosts))
	var rwg sync.WaitGroup
	var recvErr error
	var errMu sync.Mutex
	for i, ln := range lns {
		if ln == nil {
			continue
		}
		for range expect[i] {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				c, err := ln.Accept()
				if err != nil {
					errMu.Lock()
					recvErr = errors.Join(recvErr, err)
					errMu.Unlock()
					return
				}
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					counts[i].Add(uint64(n))
					if err != nil {
						if err != io.EOF {
							errMu.Lock()
							recvErr = errors.Join(recvErr, err)
							errMu.Unlock()
						}
						return
					}
				}
			}()
		}
	}
	// Dial: sender s to every other host.
	type sender struct {
		conns    []net.Conn
		dst      []int // host index of each connection
		mu       sync.Mutex
		cond     *sync.Cond
		progress []uint64
	}
	senders := make([]*sender, o.Senders)
	closeAll := func() {
		for _, s := range senders {
			if s == nil {
				continue
			}
			for _, c := range s.conns {
				c.Close()
			}
		}
	}
	for si := range senders {
		s := &sender{}
		s.cond = sync.NewCond(&s.mu)
		senders[si] = s
		for di, ln := range lns {
			if ln == nil || di == si {
				continue
			}
			var c net.Conn
			err := hosts[si].Do(func() error {
				var err error
				c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
				return err
			})
			if err != nil {
				closeAll()
				for _, ln := range lns {
					if ln != nil {
						ln.Close()
					}
				}
				rwg.Wait()
				return nil, fmt.Errorf("TCP from %s to %s: %w", hosts[si].Namespace, ln.Addr(), err)
			}
			s.conns = append(s.conns, c)
			s.dst = append(s.dst, di)
		}
		s.progress = make([]uint64, len(s.conns))
	}
	chunk := make([]byte, o.Chunk)
	start := time.Now()
	deadline := start.Add(o.Duration)
	var swg sync.WaitGroup
	var sendErr error
	for _, s := range senders {
		for ci, c := range s.conns {
			swg.Add(1)
			go func() {
				defer swg.Done()
				defer c.(*net.TCPConn).CloseWrite()
				for time.Now().Before(deadline) {
					s.mu.Lock()
					for s.progress[ci] >= slices.Min(s.progress)+uint64(o.Lag) && time.Now().Before(deadline) {
						s.cond.Wait()
					}
					s.mu.Unlock()
					n, err := c.Write(chunk)
					s.mu.Lock()
					s.progress[ci] += uint64(n)
					s.cond.Broadcast()
					s.mu.Unlock()
					if err != nil {
						errMu.Lock()
						sendErr = errors.Join(sendErr, err)
						errMu.Unlock()
						return
					}
				}
			}()
		}
	}
	// Writers blocked on the lag bound past the deadline need a wake-up.
	stop := time.AfterFunc(o.Duration, func() {
		for _, s := range senders {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		}
	})
	defer stop.Stop()
	swg.Wait()
	rwg.Wait()
	res.Elapsed = time.Since(start)
	closeAll()
	if err := errors.Join(sendErr, recvErr); err != nil {
		return nil, fmt.Errorf("TCP fan-out: %w", err)
	}
	for i := range counts {
		res.Received[i] = counts[i].Load()
	}
	for _, s := range senders {
		for ci, h := range s.dst {
			res.Written[h] += s.progress[ci]
		}
	}
	return res, nil
}

// RunTCPLatency measures one-way latency over TCP between hosts 0 and 1:
// host 0 writes size bytes, host 1 echoes them, one message in flight;
// one way is half the round trip.
func RunTCPLatency(topo *netns.Topology, size, roundTrips int) (*Latency, error) {
	if len(topo.Hosts) < 2 || topo.Hosts[0].IP == nil || topo.Hosts[1].IP == nil {
		return nil, fmt.Errorf("TCP latency needs two hosts with IPv4 addresses (netns.Options.Addresses)")
	}
	a, b := topo.Hosts[0], topo.Hosts[1]
	var ln net.Listener
	if err := b.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		return nil, err
	}
	defer ln.Close()
	echoDone := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoDone <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				if err == io.EOF {
					err = nil
				}
				echoDone <- err
				return
			}
			if _, err := c.Write(buf); err != nil {
				echoDone <- err
				return
			}
		}
	}()
	var c net.Conn
	if err := a.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		return nil, err
	}
	msg := make([]byte, size)
	buf := make([]byte, size)
	rtts := make([]time.Duration, 0, roundTrips)
	for i := range roundTrips + 20 {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return nil, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			c.Close()
			return nil, err
		}
		if i >= 20 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	c.Close()
	if err := <-echoDone; err != nil {
		return nil, err
	}
	slices.Sort(rtts)
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	q := func(p float64) time.Duration { return rtts[int(p*float64(len(rtts)-1))] / 2 }
	return &Latency{Backend: "tcp", RoundTrips: len(rtts), P50: q(0.5), P99: q(0.99), Mean: sum / time.Duration(2*len(rtts))}, nil
}

// RunLatencyOn is RunLatency between hosts 0 and 1 of a topology the
// caller built.
func RunLatencyOn(topo *netns.Topology, backend string, roundTrips int, spin time.Duration) (*Latency, error) {
	return runLatency(topo, backend, roundTrips, spin)
}
