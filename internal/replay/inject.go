package replay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rbcast/rbcast/link"
)

// InjectOptions pace Inject.
type InjectOptions struct {
	// Speed divides the captured gaps between frames: 1 is the captured
	// pace, 10 ten times faster. 0 means 1.
	Speed float64
	// ASAP sends as fast as the link takes them, in batches.
	ASAP bool
	// Progress, when set, gets a line about once a second and at the end.
	Progress io.Writer
}

// Frames returns the records to inject: each frame as transmitted once
// (outbound records, records without direction, and inbound copies of
// senders whose own interface was not captured), in time order. With all,
// every record.
func Frames(c *Capture, all bool) []*Record {
	if all {
		out := make([]*Record, len(c.Records))
		for i := range c.Records {
			out[i] = &c.Records[i]
		}
		return out
	}
	return analyse(c).txs
}

// Inject sends the frames onto l, paced by their capture timestamps. A
// frame longer than the link carries stops it with an error naming the
// frame; back-pressure is the link's to wait out (link.Link.Send).
func Inject(ctx context.Context, l link.Link, frames []*Record, opts InjectOptions) (sent int, err error) {
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 {
		return 0, fmt.Errorf("speed %v, want > 0", opts.Speed)
	}
	limit := link.EthernetHeaderLen + l.MTU()
	for _, r := range frames {
		if len(r.Data) > limit {
			return 0, fmt.Errorf("frame %d is %d bytes, the link carries at most %d (MTU %d); raise the MTU of the interface", r.N, len(r.Data), limit, l.MTU())
		}
		if len(r.Data) < link.EthernetHeaderLen {
			return 0, fmt.Errorf("frame %d is %d bytes, shorter than an Ethernet header", r.N, len(r.Data))
		}
	}
	if len(frames) == 0 {
		return 0, nil
	}
	start, t0 := time.Now(), frames[0].Time
	lastReport := start
	report := func(final bool) {
		if opts.Progress == nil {
			return
		}
		if now := time.Now(); final || now.Sub(lastReport) >= time.Second {
			lastReport = now
			fmt.Fprintf(opts.Progress, "inject: %d/%d frames sent, %.1f s elapsed\n", sent, len(frames), now.Sub(start).Seconds())
		}
	}
	const maxBatch = 64
	batch := make([][]byte, 0, maxBatch)
	for i := 0; i < len(frames); {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		due := start
		if !opts.ASAP {
			due = start.Add(time.Duration(float64(frames[i].Time.Sub(t0)) / speed))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return sent, ctx.Err()
				case <-t.C:
				}
			}
		}
		// Everything due by now goes in one batch.
		batch = batch[:0]
		now := time.Now()
		for ; i < len(frames) && len(batch) < maxBatch; i++ {
			if !opts.ASAP && start.Add(time.Duration(float64(frames[i].Time.Sub(t0))/speed)).After(now) {
				break
			}
			batch = append(batch, frames[i].Data)
		}
		n, err := l.Send(batch)
		sent += n
		if err != nil {
			return sent, fmt.Errorf("sending frame %d: %w", frames[i-len(batch)+n].N, err)
		}
		report(false)
	}
	report(true)
	return sent, nil
}
