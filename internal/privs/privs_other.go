//go:build !linux

package privs

import "errors"

// Dropped says what Drop found and did.
type Dropped struct {
	Before string
	Kept   bool
}

// Drop is unsupported off Linux.
func Drop() (Dropped, error) {
	return Dropped{}, errors.New("privs: dropping capabilities is only implemented on Linux")
}

// DropBound is unsupported off Linux.
func (Dropped) DropBound() (bool, error) {
	return false, errors.New("privs: dropping capabilities is only implemented on Linux")
}

// Current is unsupported off Linux.
func Current() string { return "" }
