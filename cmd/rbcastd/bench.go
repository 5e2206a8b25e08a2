package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
)

const benchText = `Measures goodput through a running daemon: sends messages of -size bytes
as fast as the group accepts them for -duration, then waits until every
one is acknowledged by every live member, and reports messages/s and MB/s
over the whole time (sending and acknowledgement), plus the daemon's
retransmissions and NACKs during the run. Run it on several members at
once for the protocol issues' N-sender goodput; docs/benchmarks.md
("rbcastd") has the commands and numbers.
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
	fs := newFlags("bench", "[-socket PATH] [-size BYTES] [-duration D] [-json]", benchText, stderr)
	sf.add(fs)
	size := fs.Int("size", 0, "message size in bytes (0: the largest the group accepts)")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "bench", "unexpected argument %q", fs.Arg(0))
	}
	if *size < 0 || *dur <= 0 {
		return usageErr(stderr, "bench", "-size must be >= 0 and -duration > 0")
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
	// As many messages per packet as fit (see send's batcher).
	perBatch := max(1, (localapi.MaxBatch-1)/(localapi.BatchEntryLen+size))
	data := make([]byte, size)
	batch := &localapi.SendBatch{}
	for range perBatch {
		batch.Msgs = append(batch.Msgs, data)
	}
	r := &benchResult{Size: size}
	start := time.Now()
	for time.Since(start) < dur {
		if err := c.Write(batch); err != nil {
			return nil, fmt.Errorf("after %d messages: %w", r.Messages, err)
		}
		r.Messages += uint64(perBatch)
	}
	last := time.Now()
	if err := c.Write(&localapi.Flush{}); err != nil {
		return nil, err
	}
	m, err := c.Read()
	if err != nil {
		return nil, err
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
