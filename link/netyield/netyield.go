//go:build linux

// Package netyield lets a goroutine that polls memory (a ring's status
// word, a socket without blocking) give way to goroutines the network
// poller has ready, also when the process has a single P.
//
// runtime.Gosched puts the caller on the run queue, and the scheduler
// looks at the network poller only when no goroutine is runnable (or
// sysmon does, after 10 ms without a look). With GOMAXPROCS=1 a polling
// goroutine that yields with Gosched is therefore always runnable, and a
// goroutine whose socket became readable (a client's doorbell) waits
// until the poll ends. With more than one P an idle P's thread sleeps in
// the poller and takes such a goroutine at once, so Gosched is enough.
//
// Yield, with one P, parks the caller on an eventfd it has just made
// readable: the scheduler runs whatever is runnable, then finds no
// goroutine and asks the poller, which returns the caller (its eventfd)
// with every goroutine whose descriptor is ready. It costs two system
// calls (the eventfd's write, epoll_wait) where Gosched costs none, which
// a poll that waits can spend. No runtime API offers "poll the network now";
// this is the smallest thing that has the scheduler do it.
package netyield

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Yield lets every runnable goroutine run before it returns, and has the
// network poller make its ready goroutines runnable; the caller, which
// the poller returns first, runs before them, so they run by the next
// Yield (docs/local-api-history.md, "The doorbell's second turn"). With
// more than one P it is runtime.Gosched. It never blocks for longer than
// the goroutines it lets run take (the eventfd it waits on is readable
// before it waits).
func Yield() {
	if runtime.GOMAXPROCS(0) > 1 {
		runtime.Gosched()
		return
	}
	YieldPoller()
}

// YieldPoller is Yield whatever GOMAXPROCS is (with several Ps it may
// move the caller to another thread: the one asleep in the poller).
func YieldPoller() {
	y := get()
	if y == nil {
		runtime.Gosched()
		return
	}
	y.rung = false
	if err := y.rc.Read(y.try); err != nil {
		y.f.Close()
		runtime.Gosched()
		return
	}
	put(y)
}

// gave counts the sched_yields GiveCPU made in this process.
var gave atomic.Uint64

// Mark is taken before a Yield that GiveCPU follows.
func Mark() uint64 { return gave.Load() }

// Hold has the process's polls that took their Mark before it keep the
// CPU at their next GiveCPU, at one P: a goroutine that has just handed
// another one work (a Send waking its group's loop) calls it, so that the
// poll it then yields to does not give the CPU to other processes before
// that work has run. With more Ps it does nothing (each poll yields).
func Hold() { gave.Add(1) }

// GiveCPU gives the CPU to other processes (sched_yield), unless the
// process has one P and another of its goroutines gave it away since
// mark (during the Yield after Mark). Two polls of one process at one P
// (a ring's spin and a client's) then give the CPU away once a round of
// their looks, not once a look each: every process switch costs the
// pollers of the other processes a turn. It reports whether it yielded.
// With more Ps the goroutines run on threads of their own, and each
// yields.
func GiveCPU(mark uint64) bool {
	if gave.Load() != mark && runtime.GOMAXPROCS(0) == 1 {
		return false
	}
	unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	gave.Add(1)
	return true
}

// yielder is one eventfd in the runtime's poller. A yielder is used by
// one goroutine at a time; free ones wait in the pool.
type yielder struct {
	f    *os.File
	rc   syscall.RawConn
	rung bool
	try  func(fd uintptr) bool
}

var pool struct {
	sync.Mutex
	free   []*yielder
	failed bool // eventfd or the poller refused once: Gosched from then on
}

func get() *yielder {
	pool.Lock()
	if n := len(pool.free); n > 0 {
		y := pool.free[n-1]
		pool.free = pool.free[:n-1]
		pool.Unlock()
		return y
	}
	failed := pool.failed
	pool.Unlock()
	if failed {
		return nil
	}
	y, err := newYielder()
	if err != nil {
		pool.Lock()
		pool.failed = true
		pool.Unlock()
		return nil
	}
	return y
}

func put(y *yielder) {
	pool.Lock()
	pool.free = append(pool.free, y)
	pool.Unlock()
}

func newYielder() (*yielder, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	// A non-blocking descriptor: os.NewFile adds it to the poller.
	f := os.NewFile(uintptr(fd), "netyield")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	y := &yielder{f: f, rc: rc}
	y.try = y.tryRead
	return y, nil
}

// tryRead is the RawConn.Read callback. The first call makes the eventfd
// readable and waits (false): RawConn.Read has reset the descriptor's
// readiness before it, so the write's edge cannot be lost. The second
// call, once the poller has returned the eventfd, ends the wait without
// reading the counter: the runtime's poller is edge-triggered, and an
// eventfd reports an edge on every write, readable or not, so the next
// yield's write wakes it again. The counter grows by one a yield, and
// would take centuries to reach its limit (2^64 - 2): should it, the
// write fails with EAGAIN, and the counter is drained then.
func (y *yielder) tryRead(fd uintptr) bool {
	if y.rung {
		return true
	}
	y.rung = true
	v := uint64(1)
	// Never blocks: a full counter is EAGAIN, not a wait.
	if _, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&v)), 8); e == unix.EAGAIN {
		unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&v)), 8)
		unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&v)), 8)
	}
	return false
}
