package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

var versions = []Version{V2, V3}

// up builds a segment of hosts namespaces named with our prefix letters
// ("rbr") plus tag, removed when the test ends.
func up(t testing.TB, tag string, hosts, mtu int) *netns.Topology {
	t.Helper()
	return netnstest.Up(t, netns.Options{Hosts: hosts, MTU: mtu, Prefix: "rbr" + tag})
}

// openOn opens a Link on eth0 inside host h's namespace and closes it when
// the test ends.
func openOn(t testing.TB, h *netns.Host, cfg Config) *Link {
	t.Helper()
	var l *Link
	err := h.Do(func() error {
		var err error
		l, err = Open(h.Iface, cfg)
		return err
	})
	if err != nil {
		t.Fatalf("Open(%s in %s, %+v): %v", h.Iface, h.Namespace, cfg, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// refusingPair opens tx on host 0 and rx on host 1 of a 2-host topology
// built at MTU 1500, then shrinks host 0's device MTU to 1000 under tx
// (the link still allows 1514-byte frames), so that the kernel refuses a
// larger frame tx accepts: its TX slot turns TP_STATUS_WRONG_FORMAT. mk
// builds test frame seq, size bytes long, from tx. The device's MTU is
// set back to 1500 first, for the next subtest.
func refusingPair(t *testing.T, topo *netns.Topology, v Version) (tx, rx *Link, mk func(seq uint64, size int) []byte) {
	t.Helper()
	setMTU := func(mtu string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", topo.Hosts[0].Namespace, "link", "set", "eth0", "mtu", mtu).CombinedOutput(); err != nil {
			t.Fatalf("ip link set mtu: %v: %s", err, out)
		}
	}
	setMTU("1500")
	tx = openOn(t, topo.Hosts[0], Config{Version: v})
	rx = openOn(t, topo.Hosts[1], Config{Version: v})
	src := tx.HardwareAddr()
	mk = func(seq uint64, size int) []byte {
		return buildFrame(make([]byte, size), src, link.EtherTypeRbcast, seq, size)
	}
	setMTU("1000")
	return tx, rx, mk
}

var broadcast = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// frameLen is the length of test frame seq on a link of this MTU: spread
// over the whole allowed range so short and full-size frames both occur.
func frameLen(seq uint64, mtu int) int {
	const min = 60
	return min + int(seq*7919%uint64(link.EthernetHeaderLen+mtu-min+1))
}

// pattern[k] = byte(k), twice over the largest frame, so the payload of
// any frame is one slice of it.
var pattern = func() []byte {
	p := make([]byte, 65536+14+256)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}()

// buildFrame writes test frame seq into b (which must be long enough) and
// returns it: broadcast, from src, EtherType et, then the sequence number
// and the bytes byte(seq)+byte(i) at offset i.
func buildFrame(b []byte, src []byte, et uint16, seq uint64, size int) []byte {
	b = b[:size]
	copy(b[0:6], broadcast)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:14], et)
	binary.BigEndian.PutUint64(b[14:22], seq)
	start := int(byte(seq) + 22)
	copy(b[22:], pattern[start:start+size-22])
	return b
}

// testFrames is n test frames from l, numbered from first on, each
// frameLen long and in a buffer of its own (buildFrame).
func testFrames(l *Link, first uint64, n int) [][]byte {
	frames := make([][]byte, n)
	for i := range frames {
		seq := first + uint64(i)
		size := frameLen(seq, l.MTU())
		frames[i] = buildFrame(make([]byte, size), l.HardwareAddr(), link.EtherTypeRbcast, seq, size)
	}
	return frames
}

// recvInOrder receives tx's test frames 0 to n-1 on rx and fails the test
// unless each arrives within 5 s of the last, in order, byte for byte.
func recvInOrder(t *testing.T, rx, tx *Link, n uint64) {
	t.Helper()
	frames := make([]Frame, 64)
	for seq := uint64(0); seq < n; {
		k, err := rx.Recv(time.Now().Add(5*time.Second), frames)
		if err != nil {
			t.Fatalf("Recv after %d of %d frames: %v", seq, n, err)
		}
		for _, f := range frames[:k] {
			if s, err := checkFrame(f.Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil || s != seq {
				t.Fatalf("received frame %d (%v), want %d", s, err, seq)
			}
			seq++
		}
	}
}

// checkFrame verifies a received frame byte for byte against what
// buildFrame made for its sequence number and returns that number.
func checkFrame(f []byte, src []byte, et uint16, mtu int) (uint64, error) {
	if len(f) < 22 {
		return 0, fmt.Errorf("frame of %d bytes is too short", len(f))
	}
	seq := binary.BigEndian.Uint64(f[14:22])
	if want := frameLen(seq, mtu); len(f) != want {
		return seq, fmt.Errorf("frame %d is %d bytes, sent %d", seq, len(f), want)
	}
	var hdr [14]byte
	copy(hdr[0:6], broadcast)
	copy(hdr[6:12], src)
	binary.BigEndian.PutUint16(hdr[12:14], et)
	start := int(byte(seq) + 22)
	if !bytes.Equal(f[:14], hdr[:]) || !bytes.Equal(f[22:], pattern[start:start+len(f)-22]) {
		want := buildFrame(make([]byte, len(f)), src, et, seq, len(f))
		for i := range f {
			if f[i] != want[i] {
				return seq, fmt.Errorf("frame %d differs at byte %d: got %#x, sent %#x", seq, i, f[i], want[i])
			}
		}
	}
	return seq, nil
}

// sendAll sends count frames in batches of batch and returns how many
// Send reported sent.
func sendAll(t testing.TB, l *Link, count, batch int, et uint16) int {
	t.Helper()
	mtu := l.MTU()
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, link.EthernetHeaderLen+mtu)
	}
	frames := make([][]byte, batch)
	src := l.HardwareAddr()
	sent := 0
	for sent < count {
		n := min(batch, count-sent)
		for i := range n {
			seq := uint64(sent + i)
			frames[i] = buildFrame(bufs[i], src, et, seq, frameLen(seq, mtu))
		}
		got, err := l.Send(frames[:n])
		sent += got
		if err != nil {
			t.Errorf("Send after %d frames: %v", sent, err)
			return sent
		}
		if got != n {
			t.Errorf("Send returned %d of %d frames without error", got, n)
			return sent
		}
	}
	return sent
}

// receiver collects what one Link receives from src and checks every frame.
type receiver struct {
	l        *Link
	src      []byte
	et       uint16
	mtu      int
	next     uint64 // expected next sequence number
	received uint64
	gaps     uint64 // frames skipped in the sequence
	roomy    uint64 // frames lent with at least rxRoom bytes of room
	err      error
}

// endsBlock says whether room, lent behind a frame, ends at the end of a
// TPACKET_V3 block of the receive ring.
func (r *receiver) endsBlock(room []byte) bool {
	ring := r.l.rx.ring
	end := uintptr(unsafe.Pointer(unsafe.SliceData(room))) + uintptr(len(room)) - uintptr(unsafe.Pointer(unsafe.SliceData(ring)))
	return end <= uintptr(len(ring)) && end%uintptr(r.l.cfg.rx.BlockSize) == 0
}

// run receives until stop says enough or nothing arrives for quiet.
func (r *receiver) run(quiet time.Duration, done func(r *receiver) bool) {
	frames := make([]Frame, 64)
	for !done(r) {
		n, err := r.l.Recv(time.Now().Add(quiet), frames)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			r.err = err
			return
		}
		for i, f := range frames[:n] {
			seq, err := checkFrame(f.Data, r.src, r.et, r.mtu)
			if err != nil {
				r.err = err
				return
			}
			// The room lent behind the frame (link.Frame.Data): at least
			// rxRoom bytes under V2; under V3 too, but for the batch's
			// last frame (the next header is not read yet: the padding
			// only) and a block's last (the rest of the block, up to its
			// end). Scribbled over, it must spoil no later frame.
			room := f.Data[len(f.Data):cap(f.Data)]
			if v := r.l.cfg.Version; len(room) < rxRoom && (v == V2 || i < n-1 && !r.endsBlock(room)) {
				r.err = fmt.Errorf("%v: frame %d of %d bytes (%d of %d in the batch) lent with %d bytes of room", v, seq, len(f.Data), i+1, n, len(room))
				return
			}
			if len(room) >= rxRoom {
				r.roomy++
			}
			for i := range room {
				room[i] = 0xa5
			}
			if seq < r.next {
				r.err = fmt.Errorf("frame %d arrived after %d: duplicate or reordered", seq, r.next-1)
				return
			}
			r.gaps += seq - r.next
			r.next = seq + 1
			r.received++
		}
	}
}

type hostT = *netns.Host
