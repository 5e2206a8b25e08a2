package ring

import (
	"errors"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/link"
)

// lentFrame is a frame a test holds on loan, and until which Recv.
type lentFrame struct {
	loan  link.Loan
	data  []byte
	until int
}

// TestLendOutlivesRecv holds received frames on loan across many Recvs
// while the sender goes on, on a small ring that wraps many times: every
// frame held reads the bytes it was received with until it is returned
// (the slot or block is not given back early), and frame 0 is held until
// the link asks for it back (Due, its bound): it is then copied, its loan
// returned, and the ring keeps receiving, never holding more than its
// bound for loans (a holder that never returns does not stop it).
func TestLendOutlivesRecv(t *testing.T) {
	topo := up(t, "ln", 2, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			cfg := Config{Version: v, BlockSize: 8192, BlockCount: 32}
			tx := openOn(t, topo.Hosts[0], cfg)
			rx := openOn(t, topo.Hosts[1], cfg)
			testLend(t, tx, rx)
		})
	}
}

func testLend(t *testing.T, tx, rx *Link) {
	const count, window, hold = 4000, 16, 2
	slots := len(rx.rxSlot)
	bound := loanBound(slots)
	var got atomic.Uint64
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		mtu, src := tx.MTU(), tx.HardwareAddr()
		buf := make([][]byte, window)
		for seq := uint64(0); seq < count; {
			// A window at a time, so the small ring loses nothing.
			for got.Load()+window/2 < seq {
				time.Sleep(50 * time.Microsecond)
			}
			n := 0
			for ; n < window/2 && seq < count; n, seq = n+1, seq+1 {
				buf[n] = buildFrame(make([]byte, link.EthernetHeaderLen+mtu), src, link.EtherTypeRbcast, seq, frameLen(seq, mtu))
			}
			if _, err := tx.Send(buf[:n]); err != nil {
				errc <- err
				return
			}
		}
	}()
	var (
		held    []lentFrame
		first   []byte // frame 0, held until Due asks for it
		firstLn link.Loan
		copied  []byte // frame 0 copied when asked
		maxHeld uint64
	)
	frames := make([]Frame, 4) // small batches: many Recvs
	for recvs := 0; got.Load() < count; recvs++ {
		n, err := rx.Recv(time.Now().Add(2*time.Second), frames)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("nothing received for 2 s after %d frames (%d Recvs; held %d)", got.Load(), recvs, len(held))
		}
		if err != nil {
			t.Fatal(err)
		}
		var take []link.Loan
		for _, f := range frames[:n] {
			seq, err := checkFrame(f.Data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU())
			if err != nil {
				t.Fatal(err)
			}
			if seq != got.Load() {
				t.Fatalf("frame %d after %d: lost on a ring that holds a window", seq, got.Load()-1)
			}
			got.Add(1)
			loan, ok := rx.Loan(f.Data)
			if !ok {
				t.Fatalf("frame %d of the last Recv not lendable", seq)
			}
			if _, ok := rx.Loan(slices.Clone(f.Data)); ok {
				t.Fatalf("a copy of frame %d lendable", seq)
			}
			take = append(take, loan)
			if seq == 0 {
				first, firstLn = f.Data, loan
				continue
			}
			held = append(held, lentFrame{loan, f.Data, recvs + hold})
		}
		rx.Lend(take)
		// Every frame held reads as received, past Recvs and laps.
		var back []link.Loan
		k := 0
		for _, h := range held {
			if _, err := checkFrame(h.data, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil {
				t.Fatalf("held on loan since Recv %d, now %d: %v", h.until-hold, recvs, err)
			}
			if recvs >= h.until {
				back = append(back, h.loan)
				continue
			}
			held[k] = h
			k++
		}
		held = held[:k]
		if first != nil {
			if _, err := checkFrame(first, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil {
				t.Fatalf("frame 0, on loan, after %d frames: %v", got.Load(), err)
			}
		}
		if before, ok := rx.Due(); ok {
			for _, h := range held {
				if h.loan < before {
					t.Fatalf("Due asks back loans before %d: one held for %d Recvs only (bound %d of %d)", before, hold, bound, slots)
				}
			}
			if first == nil || firstLn >= before {
				t.Fatalf("Due asks back loans before %d, frame 0's (%d) is not held", before, firstLn)
			}
			copied = slices.Clone(first)
			back = append(back, firstLn)
			first = nil
		}
		rx.Return(back)
		st, err := rx.Stats()
		if err != nil {
			t.Fatal(err)
		}
		maxHeld = max(maxHeld, st.LoanHeld)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if copied == nil {
		t.Fatalf("frame 0 held on loan through %d frames, %d ring slots or blocks: Due never asked for it", count, slots)
	}
	if _, err := checkFrame(copied, tx.HardwareAddr(), link.EtherTypeRbcast, tx.MTU()); err != nil {
		t.Fatalf("frame 0 copied when asked back: %v", err)
	}
	st, err := rx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lent != count || st.LoansCalled != 1 || st.KernelDrops != 0 {
		t.Errorf("Stats: %d lent, %d called back, %d kernel drops; want %d, 1, 0", st.Lent, st.LoansCalled, st.KernelDrops, count)
	}
	if maxHeld > bound+uint64(len(frames)) {
		t.Errorf("up to %d slots or blocks held for loans, bound %d (+ one Recv's %d)", maxHeld, bound, len(frames))
	}
	t.Logf("%d slots or blocks, bound %d; held up to %d", slots, bound, maxHeld)
}
