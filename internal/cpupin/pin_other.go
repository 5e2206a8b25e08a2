//go:build !linux

package cpupin

import "errors"

func Pin(int) (int, error) {
	return 0, errors.New("-pin: binding to a CPU is implemented on Linux only")
}
