package cpupin

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Pin binds every thread of the process, and the CPU follows the rank
// round the CPUs the process may use.
func TestPinCPU(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	defer setAll(t, &before)
	var cpus []int
	for c := 0; c < len(before)*64; c++ {
		if before.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	for _, rank := range []int{0, 1, len(cpus) + 1} {
		setAll(t, &before) // a process pins once, from all its CPUs
		cpu, err := Pin(rank)
		if err != nil {
			t.Fatal(err)
		}
		if want := cpus[rank%len(cpus)]; cpu != want {
			t.Errorf("rank %d: pinned to CPU %d, want %d (CPUs %v)", rank, cpu, want, cpus)
		}
		for _, tid := range threads(t) {
			var got unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &got); err != nil {
				continue // the thread ended
			}
			if got.Count() != 1 || !got.IsSet(cpu) {
				t.Errorf("rank %d: thread %d may run on %d CPUs, want only CPU %d", rank, tid, got.Count(), cpu)
			}
		}
	}
}

func threads(t *testing.T) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range tasks {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

func setAll(t *testing.T, set *unix.CPUSet) {
	for _, tid := range threads(t) {
		unix.SchedSetaffinity(tid, set)
	}
}
