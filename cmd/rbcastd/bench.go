package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/internal/hops"
	"github.com/rbcast/rbcast/internal/localapi"
)

const benchText = `Goodput (the default): sends messages of -size bytes as fast as the group
accepts them for -duration, then waits until every one is acknowledged by
(-order total: held by) every live member, and reports messages/s and MB/s over the whole time
(sending and acknowledgement), plus the daemon's retransmissions and NACKs
during the run. Run it on several members at once for the protocol issues'
N-sender goodput.

Latency: 'bench -echo' on member B sends back every ping it is delivered;
'bench -ping B' on member A then sends -count pings one at a time and
reports the round trip through both daemons (percentiles; half of it is
the one-way latency). Under -order total, '-ping' with A's own id needs no
echo: it times the loopback of self-delivery through the sequencer (not
a round trip to another member; the output says so). Under -order fifo
it is refused: a member's own messages are not delivered back to it.

docs/benchmarks.md ("rbcastd") has the commands and numbers.
`

// benchResult is what bench prints (with -json, as JSON).
type benchResult struct {
	Size        int     `json:"size"`
	Messages    uint64  `json:"messages"`
	Bytes       uint64  `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	FlushMs     float64 `json:"flush_ms"` // from the last Send to Flushed
	Retransmits uint64  `json:"retransmissions"`
	NacksSent   uint64  `json:"nacks_sent"`
	NacksRecv   uint64  `json:"nacks_received"`
}

func benchCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("bench", "[-socket PATH] [-size BYTES] [-duration D | -echo | -ping ID [-count N]] [-json]", benchText, stderr)
	sf.add(fs)
	size := fs.Int("size", 0, "message size in bytes (0: the largest the group accepts; with -ping, the smallest ping)")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	echo := fs.Bool("echo", false, "send back every ping delivered, until SIGINT/SIGTERM")
	pingArg := fs.String("ping", "", "measure round trips to the member `ID` running bench -echo (its own id under -order total: the self-delivery loopback)")
	count := fs.Int("count", 1000, "pings to send with -ping")
	pingTimeout := fs.Duration("ping-timeout", 5*time.Second, "with -ping: give up when one round trip takes longer (the echo or a member gone); 0: wait without end")
	spin := fs.Duration("spin", pingSpin, fmt.Sprintf("with -ping or -echo: look for the next delivery this long, yielding the CPU, before sleeping (0: never; up to 1s; default %v on a deliver ring, %v on the socket)", ringPingSpin, time.Duration(pingSpin)))
	rings := fs.Bool("rings", pingRings, "with -ping or -echo: send and receive through shared-memory rings where the daemon has them (local API version 2), not the socket; while the client polls its deliver ring the daemon writes it no doorbell")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	ping := -1
	if set["ping"] {
		id, err := strconv.ParseUint(*pingArg, 10, 16)
		if err != nil || id >= uint64(localapi.AllMembers) {
			return usageErr(stderr, "bench", "-ping is %q, want a member id 0..%d", *pingArg, localapi.AllMembers-1)
		}
		ping = int(id)
	}
	switch {
	case *echo && ping >= 0:
		return usageErr(stderr, "bench", "-echo and -ping exclude each other")
	case ping < 0 && (set["count"] || set["ping-timeout"]):
		return usageErr(stderr, "bench", "-count and -ping-timeout apply to -ping only")
	case ping < 0 && !*echo && (set["spin"] || set["rings"]):
		return usageErr(stderr, "bench", "-spin and -rings apply to -ping and -echo only")
	case (ping >= 0 || *echo) && set["duration"]:
		return usageErr(stderr, "bench", "-duration applies to the goodput run only (-ping's length is -count; -echo runs until stopped)")
	case *spin < 0 || *spin > time.Second:
		return usageErr(stderr, "bench", "-spin is %v, want 0 (never) up to 1s", *spin)
	}
	spinSet := set["spin"]
	if !spinSet {
		*spin = -1 // the path's default
	}
	if *echo {
		if err := benchEcho(&sf, *spin, *rings); err != nil {
			return fail(stderr, "bench", err)
		}
		return exitOK
	}
	if ping >= 0 {
		if *count < 1 {
			return usageErr(stderr, "bench", "-count is %d, want 1 or more", *count)
		}
		if *pingTimeout < 0 {
			return usageErr(stderr, "bench", "-ping-timeout is %v, want 0 (no bound) or more", *pingTimeout)
		}
		r, err := benchPing(&sf, uint16(ping), *count, *size, *spin, *rings, *pingTimeout)
		if err != nil {
			return fail(stderr, "bench", err)
		}
		if *asJSON {
			b, _ := json.Marshal(r)
			fmt.Fprintf(stdout, "%s\n", b)
			return exitOK
		}
		if r.Loopback {
			fmt.Fprintf(stdout, "%d pings of %d bytes to itself (member %d), a loopback through the sequencer, not a round trip to another member: self-delivery p50 %.1f µs, p90 %.1f µs, p99 %.1f µs, max %.1f µs\n",
				r.Count, r.Size, r.To, r.P50us, r.P90us, r.P99us, r.MaxUs)
			return exitOK
		}
		fmt.Fprintf(stdout, "%d pings of %d bytes to member %d: round trip p50 %.1f µs, p90 %.1f µs, p99 %.1f µs, max %.1f µs\n",
			r.Count, r.Size, r.To, r.P50us, r.P90us, r.P99us, r.MaxUs)
		return exitOK
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "bench", "unexpected argument %q", fs.Arg(0))
	}
	if *size < 0 {
		return usageErr(stderr, "bench", "-size is %d, want 0 (the largest) or more", *size)
	}
	if *dur <= 0 {
		return usageErr(stderr, "bench", "-duration is %v, want more than 0", *dur)
	}
	r, err := bench(&sf, *size, *dur)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	if *asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintf(stdout, "%d messages of %d bytes in %.2fs: %.0f msg/s, %.2f MB/s; flush %.1f ms; retransmissions %d, nacks sent %d received %d\n",
		r.Messages, r.Size, r.Seconds, r.MsgsPerSec, r.MBPerSec, r.FlushMs, r.Retransmits, r.NacksSent, r.NacksRecv)
	return exitOK
}

func bench(sf *socketFlags, size int, dur time.Duration) (*benchResult, error) {
	before, err := status(sf, 0)
	if err != nil {
		return nil, err
	}
	c, err := dial(sf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w, err := c.Hello(localapi.HelloWaitReady)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		size = int(w.MaxMessage)
	}
	if size > int(w.MaxMessage) {
		return nil, fmt.Errorf("-size %d is larger than the daemon accepts (%d bytes per message)", size, w.MaxMessage)
	}
	// As many messages at a time as fit a packet (send's sink: the send
	// ring, or SendBatch packets from a version 1 daemon). Their bytes
	// are whatever the ring or packet holds: as the library's benchmarks
	// Send one buffer over and over, bench does not count producing them
	// (send FILE reads the file straight into the ring).
	perBatch := max(1, (localapi.MaxBatch-1)/(localapi.BatchEntryLen+size))
	out, err := openSink(c, nil)
	if err != nil {
		return nil, err
	}
	r := &benchResult{Size: size}
	start := time.Now()
	for time.Since(start) < dur {
		for left := perBatch; left > 0; {
			slots, err := out.reserve(size, left)
			if err != nil {
				return nil, fmt.Errorf("after %d messages: %w", r.Messages, err)
			}
			for range slots {
				out.commit(size)
			}
			left -= len(slots)
			r.Messages += uint64(len(slots))
		}
		if err := out.flush(); err != nil {
			return nil, fmt.Errorf("after %d messages: %w", r.Messages, err)
		}
	}
	last := time.Now()
	if err := c.Write(&localapi.Flush{}); err != nil {
		return nil, err
	}
	var m localapi.Message
	for {
		if m, err = c.Read(); err != nil {
			return nil, err
		}
		if _, ok := m.(*localapi.DaemonDoorbell); !ok {
			break // room in the ring, no longer needed
		}
	}
	if f, ok := m.(*localapi.Flushed); !ok || f.Accepted != r.Messages {
		return nil, fmt.Errorf("the daemon answered the flush with %v", m)
	}
	end := time.Now()
	r.Bytes = r.Messages * uint64(size)
	r.Seconds = end.Sub(start).Seconds()
	r.MsgsPerSec = float64(r.Messages) / r.Seconds
	r.MBPerSec = float64(r.Bytes) / r.Seconds / 1e6
	r.FlushMs = float64(end.Sub(last)) / float64(time.Millisecond)
	after, err := status(sf, 0)
	if err != nil {
		return nil, err
	}
	r.Retransmits = after.Retransmissions - before.Retransmissions
	r.NacksSent = after.NacksSent - before.NacksSent
	r.NacksRecv = after.NacksReceived - before.NacksReceived
	return r, nil
}

// pingSpin is how long -ping and -echo look for the next delivery before
// they sleep (localapi.Conn.SetSpin), the default of bench -spin. A
// client that polls its socket is one more process wanting a CPU while
// the daemons poll their rings and their clients' sockets, and on the
// 2-vCPU benchmark machine that cost more than the wake-ups it saved:
// round trip p50 497 µs with 200 µs client polls, 323 µs without
// (docs/local-api-history.md, "Latency").
const pingSpin = 0

// ringPingSpin is how long -ping and -echo poll their deliver ring
// before they sleep (localapi.RingReceiver.SetSpin), the default of
// bench -spin with -rings. Polling shared memory takes no system call,
// and while the client polls the daemon writes it no doorbell: on the
// loaded 2-vCPU benchmark machine the one-way p50 fell from 42–60 to
// 31–44 µs (docs/local-api-history.md, "Latency").
const ringPingSpin = 200 * time.Microsecond

// pingRings is the default of bench -rings.
const pingRings = true

// pingMagic starts every ping, so that an echo sends back only pings.
const pingMagic = "rbcastd-ping"

// pingResult is what bench -ping prints.
type pingResult struct {
	To    uint16  `json:"to"`
	Size  int     `json:"size"`
	Count int     `json:"count"`
	P50us float64 `json:"rtt_p50_us"`
	P90us float64 `json:"rtt_p90_us"`
	P99us float64 `json:"rtt_p99_us"`
	MaxUs float64 `json:"rtt_max_us"`
	// Loopback: the pings went to this member itself (Order Total): the
	// times are self-delivery through the sequencer, not round trips.
	Loopback bool `json:"loopback,omitempty"`
}

// pingPath is how bench -ping and -echo reach their daemon: a connection
// that sends and one subscribed that receives, over the socket or, with
// -rings, through a send ring and a deliver ring.
type pingPath struct {
	sub, out *localapi.Conn
	w        *localapi.Welcome // out's
	rs       *localapi.RingSender
	rr       *localapi.RingReceiver
	batch    []localapi.Deliver // what is left of a DeliverBatch
}

// openPing dials the two connections and subscribes to from's messages
// (the subscriber says hello with subFlags). A spin below 0 is the
// default of the path taken.
func openPing(sf *socketFlags, from uint16, subFlags uint16, spin time.Duration, rings bool) (p *pingPath, err error) {
	p = &pingPath{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.sub, err = dial(sf); err != nil {
		return nil, err
	}
	if p.out, err = dial(sf); err != nil {
		return nil, err
	}
	if p.w, err = p.out.Hello(localapi.HelloWaitReady); err != nil {
		return nil, err
	}
	if _, err := p.sub.Hello(subFlags); err != nil {
		return nil, err
	}
	// Rings where the daemon speaks version 2 and has room for them (each
	// ring on its own: the socket serves where one was refused).
	if rings && p.out.Version() >= 2 {
		// The smallest rings that hold the group's largest message (a
		// deliver ring must take every delivery whole).
		size := max(localapi.MinRing, localapi.RingFor(int(p.w.MaxMessage)))
		if p.rs, err = p.out.SendRing(size); ringRefused(err) {
			p.rs = nil
		} else if err != nil {
			return nil, err
		}
		if p.rr, err = p.sub.DeliverRing(size); ringRefused(err) {
			p.rr = nil
		} else if err != nil {
			return nil, err
		}
	}
	err = nil
	if p.rr != nil {
		if spin < 0 {
			spin = ringPingSpin
		}
		p.rr.SetSpin(spin)
	} else {
		if spin < 0 {
			spin = pingSpin
		}
		p.sub.SetSpin(spin)
	}
	if err := p.sub.Write(&localapi.Subscribe{From: from}); err != nil {
		return nil, err
	}
	if _, err := p.sub.Read(); err != nil { // Subscribed
		return nil, err
	}
	return p, nil
}

func (p *pingPath) close() {
	if p.sub != nil {
		p.sub.Close()
	}
	if p.out != nil {
		p.out.Close()
	}
}

// send sends one message.
func (p *pingPath) send(d []byte) error {
	if p.rs == nil {
		return p.out.Write(&localapi.Send{Data: d})
	}
	if err := p.rs.Add(d); err != nil {
		return err
	}
	return p.rs.Publish()
}

// next returns the next delivered message's data, valid until the next
// call.
func (p *pingPath) next() ([]byte, error) {
	if p.rr != nil {
		_, d, _, err := p.rr.Next(true)
		return d, err
	}
	for len(p.batch) == 0 {
		m, err := p.sub.Read()
		if err != nil {
			return nil, err
		}
		switch d := m.(type) {
		case *localapi.Deliver:
			return d.Data, nil
		case *localapi.DeliverBatch:
			p.batch = d.Msgs
		}
	}
	d := p.batch[0].Data
	p.batch = p.batch[1:]
	return d, nil
}

// benchEcho sends back every ping delivered to it, until a signal.
func benchEcho(sf *socketFlags, spin time.Duration, rings bool) error {
	p, err := openPing(sf, localapi.AllMembers, localapi.HelloBatch, spin, rings)
	if err != nil {
		return err
	}
	defer p.close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		p.sub.SetDeadline(time.Now())
	}()
	var echo []byte
	for {
		d, err := p.next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !bytes.HasPrefix(d, []byte(pingMagic)) || len(d) < len(pingMagic)+3 || d[len(pingMagic)] != 'p' {
			continue
		}
		// Mark it an echo ('e'), addressed back to the pinger.
		echo = append(echo[:0], d...)
		echo[len(pingMagic)] = 'e'
		hops.At(hops.EchoSend, 0)
		err = p.send(echo)
		hops.At(hops.EchoSent, 0)
		if err != nil {
			return err
		}
	}
}

// benchPing sends count pings to member to, one at a time, and times the
// round trips. A ping is pingMagic, 'p', the pinger's id (2 bytes), a
// sequence number (8 bytes), padding to size. A round trip longer than
// timeout (0: no bound) ends it with an error.
func benchPing(sf *socketFlags, to uint16, count, size int, spin time.Duration, rings bool, timeout time.Duration) (*pingResult, error) {
	p, err := openPing(sf, to, 0, spin, rings)
	if err != nil {
		return nil, err
	}
	defer p.close()
	w := p.w
	hdr := len(pingMagic) + 1 + 2 + 8
	size = max(size, hdr)
	if size > int(w.MaxMessage) {
		return nil, fmt.Errorf("-size %d is larger than the daemon accepts (%d bytes per message)", size, w.MaxMessage)
	}
	self := w.Self
	want := byte('e') // the echo's mark
	if to == self {
		if w.Order == localapi.OrderFIFO {
			return nil, fmt.Errorf("-ping %d is this member's own id, and under -order fifo a member's own messages are not delivered back to it: ping another member running 'rbcastd bench -echo'", to)
		}
		want = 'p' // self-delivery (Order Total)
	}
	msg := make([]byte, size)
	copy(msg, pingMagic)
	msg[len(pingMagic)] = 'p'
	binary.BigEndian.PutUint16(msg[len(pingMagic)+1:], self)
	rtts := make([]time.Duration, 0, count)
	for i := range count {
		binary.BigEndian.PutUint64(msg[len(pingMagic)+3:], uint64(i))
		if timeout > 0 {
			p.sub.SetDeadline(time.Now().Add(timeout))
		}
		start := time.Now()
		hops.At(hops.PingSend, uint32(i))
		if err := p.send(msg); err != nil {
			return nil, err
		}
		for {
			d, err := p.next()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("ping %d: no reply from member %d within %v (-ping-timeout; is 'rbcastd bench -echo' running there?)", i, to, timeout)
			}
			if err != nil {
				return nil, fmt.Errorf("ping %d: %w (is 'rbcastd bench -echo' running at member %d?)", i, err, to)
			}
			if len(d) >= hdr && bytes.HasPrefix(d, []byte(pingMagic)) && d[len(pingMagic)] == want &&
				binary.BigEndian.Uint16(d[len(pingMagic)+1:]) == self && binary.BigEndian.Uint64(d[len(pingMagic)+3:]) == uint64(i) {
				hops.At(hops.PingBack, uint32(i))
				break
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	us := func(q float64) float64 {
		return float64(rtts[min(len(rtts)-1, int(q*float64(len(rtts))))]) / float64(time.Microsecond)
	}
	return &pingResult{To: to, Size: size, Count: count, P50us: us(0.5), P90us: us(0.9), P99us: us(0.99),
		MaxUs: float64(rtts[len(rtts)-1]) / float64(time.Microsecond), Loopback: to == self}, nil
}
