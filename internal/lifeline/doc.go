// Package lifeline ends a child process when the process that started
// it ends. Test binaries re-run themselves as daemons and clients
// (rbcastd, rbcast-kv, a PBP member): when go test's -timeout panics
// the test binary, no cleanup runs, and without a lifeline those
// children kept running, holding their namespaces (netns.SweepStale
// leaves a namespace with a process in it alone) and their sockets.
//
// The child watches its parent, not the parent the other way round:
// the kernel's parent-death signal (SysProcAttr.Pdeathsig, prctl
// PR_SET_PDEATHSIG) fires when the parent's starting thread exits,
// which in Go is any thread the runtime retires — every thread a
// goroutine left locked, as netns.Host.Do does after entering a
// namespace (golang/go#27505, #34031) — and it is cleared when the
// child changes its credentials (setpriv --reuid) or executes a file
// with capabilities. A pidfd of the parent process is readable once
// the whole process has exited, whatever thread started the child,
// through ip netns exec and setpriv (both exec, so the test binary stays
// the parent).
package lifeline
