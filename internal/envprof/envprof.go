// Package envprof starts Go's execution tracer or CPU profiler into a
// file an environment variable names, for the example programs of dsm and
// orca (one process per rank): the variable's value plus ".<rank>", or
// the value itself for rank -1 (the simulator's one process running every
// rank). Unset, nothing is started.
package envprof

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Trace starts runtime/trace into the file env names for rank; stop ends
// it. An error names env.
func Trace(env string, rank int) (stop func(), err error) {
	return start(env, rank, trace.Start, trace.Stop)
}

// CPU starts runtime/pprof's CPU profile into the file env names for
// rank; stop ends it. An error names env.
func CPU(env string, rank int) (stop func(), err error) {
	return start(env, rank, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

func start(env string, rank int, begin func(io.Writer) error, end func()) (func(), error) {
	path := os.Getenv(env)
	if path == "" {
		return func() {}, nil
	}
	if rank >= 0 {
		path = fmt.Sprintf("%s.%d", path, rank)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	if err := begin(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	return func() {
		end()
		f.Close()
	}, nil
}
