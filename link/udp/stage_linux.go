package udp

import (
	"fmt"
	"net"
	"sync"

	"github.com/rbcast/rbcast/link"
)

var (
	_ link.Stager    = (*Link)(nil)
	_ link.NowSender = (*Link)(nil)
)

// stageQueue is the link's transmit queue in software (link.Stager):
// Stage copies frames into queue's slab; Kick swaps the queue with the
// spare and sends it. Copying is what the ring's TX ring costs too; what
// staging buys is the send system calls off the caller's goroutine (the
// runtime stages under its lock and a kicker goroutine kicks).
type stageQueue struct {
	mu     sync.Mutex
	frames [][]byte // slices of slab
	slab   []byte
	spareF [][]byte
	spareS []byte
	limit  int // frames queued before Stage sends the queue itself
}

func (q *stageQueue) init(limit int) { q.limit = limit }

// check refuses what Send refuses, naming the frame.
func (l *Link) check(i int, f []byte) error {
	if maxLen := link.EthernetHeaderLen + l.mtu; len(f) > maxLen {
		return fmt.Errorf("frame %d is %d bytes, more than the %d a %d-byte MTU allows (%d-byte header + MTU): %w",
			i, len(f), maxLen, l.mtu, link.EthernetHeaderLen, link.ErrFrameTooLarge)
	}
	if len(f) < link.EthernetHeaderLen {
		return fmt.Errorf("frame %d is %d bytes, shorter than the %d-byte Ethernet header", i, len(f), link.EthernetHeaderLen)
	}
	return nil
}

// Stage queues copies of frames for transmission after those staged
// before (link.Stager). When the queue holds 4 × BatchSize frames, Stage
// sends it itself, as a Kick would, rather than wait for a Kick: the
// runtime kicks only once Stage has returned. A frame Send would refuse
// is refused after the ones before it were staged.
func (l *Link) Stage(frames [][]byte) (int, error) {
	q := &l.stage
	for i := 0; i < len(frames); {
		if l.closed.Load() {
			return i, l.opError("stage", net.ErrClosed)
		}
		q.mu.Lock()
		for ; i < len(frames) && len(q.frames) < q.limit; i++ {
			f := frames[i]
			if err := l.check(i, f); err != nil {
				q.mu.Unlock()
				return i, l.opError("stage", err)
			}
			off := len(q.slab)
			q.slab = append(q.slab, f...)
			q.frames = append(q.frames, q.slab[off:len(q.slab):len(q.slab)])
		}
		q.mu.Unlock()
		if i < len(frames) {
			l.txMu.Lock()
			err := l.flushStaged()
			l.txMu.Unlock()
			if err != nil {
				return i, err
			}
		}
	}
	return len(frames), nil
}

// Kick sends every frame staged so far (link.Stager). Kicks, Sends and
// SendNows take turns: one waits for the other's system calls.
func (l *Link) Kick() error {
	if l.closed.Load() {
		return l.opError("kick", net.ErrClosed)
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	return l.flushStaged()
}

// flushStaged sends the queue; txMu is held.
func (l *Link) flushStaged() error {
	q := &l.stage
	q.mu.Lock()
	if len(q.frames) == 0 {
		q.mu.Unlock()
		return nil
	}
	q.frames, q.spareF = q.spareF[:0], q.frames
	q.slab, q.spareS = q.spareS[:0], q.slab
	// A slab that grew while frames pointed into an older one leaves
	// those in the older one, which they keep alive; nothing is shared.
	q.mu.Unlock()
	_, err := l.send(q.spareF)
	clear(q.spareF)
	return err
}

// SendNow sends frames at once, past the frames staged and not yet
// kicked (link.NowSender); otherwise it is Send.
func (l *Link) SendNow(frames [][]byte) (int, error) {
	for i, f := range frames {
		if err := l.check(i, f); err != nil {
			return 0, l.opError("send", err)
		}
	}
	if l.closed.Load() {
		return 0, l.opError("send", net.ErrClosed)
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	return l.send(frames)
}
