package linktest

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rbcast/rbcast/link"
)

// Staging is a link that has Stage, Kick and SendNow in software, over a
// link that may have none, the way link/ring has them in the kernel: Stage
// copies frames into a queue, Kick sends the queue with the inner link's
// Send, Send sends the queue first, and SendNow sends at once, past the
// queue. It provides these capabilities rather than forwarding them, so it
// is no link.Wrapper, and it receives through the inner link without
// offering Wake. It is for checking, on testnet's virtual time, that a
// decorator forwards and observes staged and now-sent frames.
type Staging struct {
	l link.Link
	// mu is held while the inner link sends, so the queue goes out whole
	// and in order; it guards queue and closed.
	mu     sync.Mutex
	queue  [][]byte
	closed bool
}

var (
	_ link.Stager    = (*Staging)(nil)
	_ link.NowSender = (*Staging)(nil)
)

// NewStaging returns l with staging added.
func NewStaging(l link.Link) *Staging { return &Staging{l: l} }

// Stage queues copies of frames, refusing those Send would refuse.
func (s *Staging) Stage(frames [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, s.opError(net.ErrClosed)
	}
	limit := link.EthernetHeaderLen + s.l.MTU()
	for i, f := range frames {
		switch {
		case len(f) < link.EthernetHeaderLen:
			return i, s.opError(fmt.Errorf("frame %d is %d bytes, shorter than the %d-byte Ethernet header", i, len(f), link.EthernetHeaderLen))
		case len(f) > limit:
			return i, s.opError(fmt.Errorf("frame %d is %d bytes, more than %d (%d-byte header + MTU %d): %w", i, len(f), limit, link.EthernetHeaderLen, s.l.MTU(), link.ErrFrameTooLarge))
		}
		s.queue = append(s.queue, bytes.Clone(f))
	}
	return len(frames), nil
}

// Kick sends the queue.
func (s *Staging) Kick() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.opError(net.ErrClosed)
	}
	return s.flush()
}

// flush sends the queue; frames the inner link did not send are dropped
// with its error. s.mu is held.
func (s *Staging) flush() error {
	if len(s.queue) == 0 {
		return nil
	}
	_, err := s.l.Send(s.queue)
	clear(s.queue)
	s.queue = s.queue[:0]
	return err
}

// Send sends the queue, then frames.
func (s *Staging) Send(frames [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flush(); err != nil {
		return 0, err
	}
	return s.l.Send(frames)
}

// SendNow sends frames at once, ahead of the queue.
func (s *Staging) SendNow(frames [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.Send(frames)
}

func (s *Staging) opError(err error) error {
	return &net.OpError{Op: "stage", Net: "linktest", Err: err}
}

// Recv, MTU, HardwareAddr and Stats are the inner link's.
func (s *Staging) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	return s.l.Recv(deadline, frames)
}
func (s *Staging) MTU() int                       { return s.l.MTU() }
func (s *Staging) HardwareAddr() net.HardwareAddr { return s.l.HardwareAddr() }
func (s *Staging) Stats() (link.Stats, error)     { return s.l.Stats() }

// Close drops the queue and closes the inner link.
func (s *Staging) Close() error {
	s.mu.Lock()
	s.closed = true
	clear(s.queue)
	s.queue = nil
	s.mu.Unlock()
	return s.l.Close()
}
