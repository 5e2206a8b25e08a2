package ring

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestShortKickRaw: a kick of a few frames makes its sendto by a raw
// system call, a kick of more by Syscall (the process's other goroutines
// get the P meanwhile), and a Recv that sleeps adds and removes its
// socket by raw epoll_ctl calls: a rank that sends a row and waits for
// its neighbours' wakes neither the runtime's sysmon thread nor another
// thread to take its P (shortKick). Every frame still arrives.
func TestShortKickRaw(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "q", 2, 1500)
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			tx := openOn(t, topo.Hosts[0], Config{Version: v})
			rx := openOn(t, topo.Hosts[1], Config{Version: v, RxSpin: -1, BlockTimeout: time.Millisecond})
			raw, sys := countSyscalls(t)
			seq := uint64(0)
			kick := func(n int) {
				t.Helper()
				frames := testFrames(tx, seq, n)
				seq += uint64(n)
				if staged, err := tx.Stage(frames); staged != n || err != nil {
					t.Fatalf("Stage of %d frames = %d, %v", n, staged, err)
				}
				clear(raw)
				clear(sys)
				if err := tx.Kick(); err != nil {
					t.Fatalf("Kick: %v", err)
				}
			}
			for _, n := range []int{1, rawKickMax} {
				kick(n)
				if raw[unix.SYS_SENDTO] == 0 || sys[unix.SYS_SENDTO] != 0 {
					t.Errorf("a kick of %d frames: sendto %d raw, %d by Syscall; want raw only", n, raw[unix.SYS_SENDTO], sys[unix.SYS_SENDTO])
				}
			}
			kick(3 * rawKickMax)
			if sys[unix.SYS_SENDTO] == 0 || raw[unix.SYS_SENDTO] != 0 {
				t.Errorf("a kick of %d frames: sendto %d raw, %d by Syscall; want Syscall only", 3*rawKickMax, raw[unix.SYS_SENDTO], sys[unix.SYS_SENDTO])
			}
			recvInOrder(t, rx, tx, seq)
			frames := make([]Frame, 64)
			clear(raw)
			clear(sys)
			if n, err := rx.Recv(time.Now().Add(20*time.Millisecond), frames); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Recv on an idle link = %d, %v; want 0 and a deadline error", n, err)
			}
			if raw[unix.SYS_EPOLL_CTL] != 2 || sys[unix.SYS_EPOLL_CTL] != 0 {
				t.Errorf("a Recv that slept: epoll_ctl %d raw, %d by Syscall; want 2 raw (add, remove)", raw[unix.SYS_EPOLL_CTL], sys[unix.SYS_EPOLL_CTL])
			}
		})
	}
}

// TestRawKicks: with Config.RawKicks a kick of many frames (a bulk
// sender's batch) makes its sendto by a raw system call too, so the
// runtime's sysmon never finds it in the kernel and hands the P to
// another thread; every frame still arrives.
func TestRawKicks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	topo := up(t, "k", 2, 1500)
	tx := openOn(t, topo.Hosts[0], Config{Version: V3, RawKicks: true})
	rx := openOn(t, topo.Hosts[1], Config{Version: V3, RxSpin: -1, BlockTimeout: time.Millisecond})
	raw, sys := countSyscalls(t)
	const n = 32 * rawKickMax
	if staged, err := tx.Stage(testFrames(tx, 0, n)); staged != n || err != nil {
		t.Fatalf("Stage of %d frames = %d, %v", n, staged, err)
	}
	if err := tx.Kick(); err != nil {
		t.Fatalf("Kick: %v", err)
	}
	if raw[unix.SYS_SENDTO] == 0 || sys[unix.SYS_SENDTO] != 0 {
		t.Errorf("a kick of %d frames with RawKicks: sendto %d raw, %d by Syscall; want raw only", n, raw[unix.SYS_SENDTO], sys[unix.SYS_SENDTO])
	}
	recvInOrder(t, rx, tx, n)
}

// countSyscalls counts the link's system calls by number, made raw and
// by Syscall, until the test ends.
func countSyscalls(t *testing.T) (raw, sys map[uintptr]int) {
	raw, sys = map[uintptr]int{}, map[uintptr]int{}
	s, r := syscall6, rawSyscall6
	t.Cleanup(func() { syscall6, rawSyscall6 = s, r })
	syscall6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
		sys[trap]++
		return unix.Syscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	rawSyscall6 = func(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, unix.Errno) {
		raw[trap]++
		return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	return raw, sys
}
