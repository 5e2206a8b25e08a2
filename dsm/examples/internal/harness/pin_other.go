//go:build !linux

package harness

import "errors"

func pinCPU(int) (int, error) {
	return 0, errors.New("-pin: binding to a CPU is implemented on Linux only")
}
