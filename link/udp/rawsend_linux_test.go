package udp

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/link"
)

// TestShortSendRaw: a send of a few datagrams makes its sendmmsg by a raw
// system call, one of more by Syscall (the process's other goroutines
// get the P meanwhile), with GSO (one message of many datagrams counts
// them all) and without; every frame still arrives, in order.
func TestShortSendRaw(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		name := "gso"
		if noGSO {
			name = "no-gso"
		}
		t.Run(name, func(t *testing.T) {
			a, b := openPair(t, lo4, Config{MTU: 1500, RecvBuffer: 16 << 20, NoGSO: noGSO})
			defer a.Close()
			defer b.Close()
			raw, sys := 0, 0
			defer func(s, r func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno)) {
				syscall6, rawSyscall6 = s, r
			}(syscall6, rawSyscall6)
			syscall6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
				if trap == unix.SYS_SENDMMSG {
					sys++
				}
				return unix.Syscall6(trap, a1, a2, a3, a4, a5, a6)
			}
			rawSyscall6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
				if trap == unix.SYS_SENDMMSG {
					raw++
				}
				return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
			}
			seq := uint32(0)
			rx := make([]link.Frame, 64)
			send := func(n int) {
				t.Helper()
				var frames [][]byte
				for range n {
					frames = append(frames, ethFrame(broadcast, a.HardwareAddr(), seq, 14+a.MTU()))
					seq++
				}
				raw, sys = 0, 0
				if sent, err := a.Send(frames); sent != n || err != nil {
					t.Fatalf("Send of %d frames: %d, %v", n, sent, err)
				}
				for got := 0; got < n; {
					k, err := b.Recv(time.Now().Add(5*time.Second), rx)
					if err != nil {
						t.Fatalf("Recv after %d of %d frames: %v", got, n, err)
					}
					for _, f := range rx[:k] {
						if want := seq - uint32(n) + uint32(got); binary.BigEndian.Uint32(f.Data[14:]) != want {
							t.Fatalf("received frame %d, want %d", binary.BigEndian.Uint32(f.Data[14:]), want)
						}
						got++
					}
				}
			}
			send(1) // the peers learn each other
			for _, n := range []int{1, rawSendMax} {
				send(n)
				if raw == 0 || sys != 0 {
					t.Errorf("a send of %d frames: sendmmsg %d raw, %d by Syscall; want raw only", n, raw, sys)
				}
			}
			send(3 * rawSendMax)
			if sys == 0 {
				t.Errorf("a send of %d frames: sendmmsg %d raw, %d by Syscall; want Syscall first", 3*rawSendMax, raw, sys)
			}
		})
	}
}
