package cpupin

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pin binds every thread of this process to one CPU of those it may
// run on: the (rank mod count)-th. Threads the Go runtime starts later
// inherit the binding from the thread that starts them, which is bound
// too. It returns the CPU.
//
// Why (docs/benchmarks-history.md, "Where a 4-process jacobi iteration goes"):
// with more processes than cores, ranks that yield-spin for their frames
// (-spin) otherwise move between cores and meet a different partner from
// one iteration to the next; bound, each core runs a fixed set of ranks
// that take turns.
func Pin(rank int) (int, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return 0, fmt.Errorf("-pin: reading this process's CPUs: %w", err)
	}
	var cpus []int
	for c := 0; c < len(allowed)*64; c++ {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return 0, fmt.Errorf("-pin: this process may run on no CPU")
	}
	cpu := cpus[rank%len(cpus)]
	var one unix.CPUSet
	one.Set(cpu)
	// A thread that a thread not yet bound starts while we bind the others
	// inherits every CPU: list the threads again until a pass finds none
	// new (threads started by bound ones inherit the one CPU).
	bound := map[int]bool{}
	for pass := 0; ; pass++ {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return 0, fmt.Errorf("-pin: listing this process's threads: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || bound[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &one); err != nil && err != unix.ESRCH {
				return 0, fmt.Errorf("-pin: binding thread %d to CPU %d: %w", tid, cpu, err)
			}
			bound[tid] = true
			fresh++
		}
		if fresh == 0 {
			return cpu, nil
		}
		if pass == 100 {
			return 0, fmt.Errorf("-pin: threads kept starting while binding them to CPU %d (%d bound)", cpu, len(bound))
		}
	}
}
