package auth_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/link/linktest"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// The link conformance suite over the authenticated link. The suite sends
// arbitrary frames and compares them byte for byte, and auth.Link sends
// only rbcast frames and hands them up with their auth section: envelope,
// a test decorator above it, carries each suite frame as the payload of
// an rbcast Data frame (a fresh sequence number each, so none is a
// replay) and unpacks it on the way up. The suite then checks auth.Link's
// capabilities (Stage, Kick, SendNow forwarded, Wake through Unwrap),
// order, batches, counters, sizes up to its MTU, deadlines and Close.

const confGroup = 9

func confKey(t testing.TB) *auth.Key {
	k, err := auth.NewKey(make([]byte, auth.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// envelope packs suite frames into rbcast Data frames over an auth.Link.
type envelope struct {
	a   *auth.Link
	mu  sync.Mutex
	seq uint32
	// buf holds what the last Recv unpacked (valid until the next one).
	buf [][]byte
}

var (
	_ link.Wrapper   = (*envelope)(nil)
	_ link.Stager    = (*envelope)(nil)
	_ link.NowSender = (*envelope)(nil)
)

func wrapEnvelope(t testing.TB, l link.Link) *envelope {
	a, err := auth.Wrap(l, auth.Config{Group: confGroup, Key: confKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &envelope{a: a}
}

// overhead is what a Data frame adds to its payload (no acks, no bundle).
const overhead = frame.HeaderLen + frame.CRCLen

func (e *envelope) pack(frames [][]byte) ([][]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([][]byte, len(frames))
	for i, f := range frames {
		if len(f) < link.EthernetHeaderLen {
			return nil, fmt.Errorf("frame %d: %d bytes", i, len(f))
		}
		var dst, src [6]byte
		copy(dst[:], f[0:6])
		copy(src[:], f[6:12])
		b := frame.AppendEthernet(nil, dst, src, frame.EtherType)
		e.seq++
		var err error
		b, err = frame.Append(b, &frame.Header{Group: confGroup, Sender: 1, Incarnation: 1, Seq: e.seq}, &frame.Payload{T: frame.Data, Data: f[link.EthernetHeaderLen:]})
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (e *envelope) Send(frames [][]byte) (int, error) {
	p, err := e.pack(frames)
	if err != nil {
		return 0, err
	}
	return e.a.Send(p)
}

func (e *envelope) Stage(frames [][]byte) (int, error) {
	p, err := e.pack(frames)
	if err != nil {
		return 0, err
	}
	return link.Stage(e.a, p)
}

func (e *envelope) Kick() error { return link.Kick(e.a) }

func (e *envelope) SendNow(frames [][]byte) (int, error) {
	p, err := e.pack(frames)
	if err != nil {
		return 0, err
	}
	return link.SendNow(e.a, p)
}

func (e *envelope) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := e.a.Recv(deadline, frames)
	e.buf = e.buf[:0]
	for i := range frames[:n] {
		eth, body, perr := frame.SplitEthernet(frames[i].Data, frame.EtherType)
		if perr != nil {
			return 0, fmt.Errorf("envelope: frame %d: %w", i, perr)
		}
		v, perr := frame.Parse(body)
		if perr != nil {
			return 0, fmt.Errorf("envelope: frame %d: %w", i, perr)
		}
		u := append(append([]byte(nil), eth[:link.EthernetHeaderLen]...), v.Payload()...)
		binary.BigEndian.PutUint16(u[12:14], link.EtherTypeRbcast)
		e.buf = append(e.buf, u)
		frames[i].Data = u
	}
	return n, err
}

func (e *envelope) MTU() int                       { return e.a.MTU() - overhead }
func (e *envelope) HardwareAddr() net.HardwareAddr { return e.a.HardwareAddr() }

// Stats takes off the bytes the envelope and the auth section add to
// every frame: auth.Link reports the wrapped link's counters, which count
// the frames as the wire carries them (a frame auth.Link drops counts
// there as received too; auth.Link.Auth counts the drops).
func (e *envelope) Stats() (link.Stats, error) {
	s, err := e.a.Stats()
	s.BytesSent -= s.FramesSent * (overhead + auth.Overhead)
	s.BytesReceived -= s.FramesReceived * (overhead + auth.Overhead)
	return s, err
}
func (e *envelope) Close() error      { return e.a.Close() }
func (e *envelope) Unwrap() link.Link { return e.a }

// TestConformance runs the suite over auth.Link on virtual time (with
// the staging capabilities linktest adds, at the least MTU it takes through both, 1500 and 9000) and
// on a real-time segment (waiting Recv, Wake, Close).
func TestConformance(t *testing.T) {
	for _, mtu := range []int{link.MinMTU + auth.Overhead + overhead, 1500, 9000} { // the least the suite takes through both
		t.Run(fmt.Sprint("virtual/mtu", mtu), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				n, err := testnet.New(1, testnet.Config{})
				if err != nil {
					t.Fatal(err)
				}
				var ls [2]link.Link
				for i := range ls {
					ep, err := n.Attach(testnet.EndpointConfig{MTU: mtu})
					if err != nil {
						t.Fatal(err)
					}
					ls[i] = wrapEnvelope(t, linktest.NewStaging(ep))
				}
				return linktest.Pair{A: ls[0], B: ls[1], Settle: func() {
					for n.Step() {
					}
				}}
			})
		})
	}
	t.Run("realtime", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			r := rtnet.New(t, 1)
			return linktest.Pair{A: wrapEnvelope(t, r.Attach(t, testnet.EndpointConfig{})), B: wrapEnvelope(t, r.Attach(t, testnet.EndpointConfig{}))}
		})
	})
}
