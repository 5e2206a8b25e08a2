package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// progress shows, on a terminal, how a transfer goes: bytes so far, the
// rate, and the time left when the total is known. It redraws one line of
// stderr every progressEvery; where stderr is not a terminal it shows
// nothing (a script's log gets no progress lines).
type progress struct {
	w     io.Writer
	verb  string // "sent", "received"
	total int64  // 0: unknown
	start time.Time
	bytes atomic.Int64
	stop  chan struct{}
	done  sync.WaitGroup
	last  int // width of the line last drawn
}

const progressEvery = 250 * time.Millisecond

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// newProgress starts showing progress on w if w is a terminal; otherwise
// it returns nil, whose methods do nothing.
func newProgress(w io.Writer, verb string, total int64) *progress {
	if !isTerminal(w) {
		return nil
	}
	p := &progress{w: w, verb: verb, total: total, start: time.Now(), stop: make(chan struct{})}
	p.draw() // at once: the line is there from the start
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw()
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

// add counts n more bytes.
func (p *progress) add(n int) {
	if p != nil {
		p.bytes.Add(int64(n))
	}
}

// end stops the display and erases its line, so that what is printed next
// (a summary, an error) starts on a clean line.
func (p *progress) end() {
	if p == nil {
		return
	}
	close(p.stop)
	p.done.Wait()
	if p.last > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.last, "")
	}
}

func (p *progress) draw() {
	n := p.bytes.Load()
	el := time.Since(p.start)
	line := progressLine(p.verb, n, p.total, el)
	pad := max(p.last-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%*s", line, pad, "")
	p.last = len(line)
}

// progressLine is what progress shows after el: "sent 12.5 MB of 200.0 MB
// (6 %), 85.1 MB/s, 2.2 s left".
func progressLine(verb string, n, total int64, el time.Duration) string {
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	line := fmt.Sprintf("%s %s", verb, mb(n))
	if total > 0 {
		line += fmt.Sprintf(" of %s (%d %%)", mb(total), n*100/total)
	}
	line += fmt.Sprintf(", %.1f MB/s", rate/1e6)
	if total > 0 && rate > 0 && n < total {
		left := time.Duration(float64(total-n) / rate * float64(time.Second))
		line += fmt.Sprintf(", %v left", left.Round(100*time.Millisecond))
	}
	return line
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
