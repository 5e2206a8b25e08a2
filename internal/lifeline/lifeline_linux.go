package lifeline

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Tie makes this process end with SIGKILL as soon as its parent process
// has ended (at once if it already has: this process was reparented).
// It returns once the watch is set up; a goroutine does the watching.
// Where pidfd_open(2) is missing (before Linux 5.3) it polls the parent
// id every 100 ms instead. A parent that ended before Tie ran is seen
// only if this process went to init (pid 1), not to a subreaper.
func Tie() {
	ppid := os.Getppid()
	if ppid == 1 {
		die() // reparented to init: the parent ended before Tie ran
	}
	fd, err := unix.PidfdOpen(ppid, 0)
	// The parent may have ended before the pidfd was opened, and its id
	// been reused: this process has been reparented then.
	if os.Getppid() != ppid {
		die()
	}
	if err != nil {
		go pollParent(ppid)
		return
	}
	go func() {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil {
				die()
			}
			if !errors.Is(err, unix.EINTR) {
				pollParent(ppid)
				return
			}
		}
	}()
}

func pollParent(ppid int) {
	for os.Getppid() == ppid {
		time.Sleep(100 * time.Millisecond)
	}
	die()
}

func die() {
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {} // the signal ends the process; nothing runs after Tie found the parent gone
}
