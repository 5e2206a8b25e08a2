// Package privs drops the process's privileges once rbcastd no longer
// needs them: after the AF_PACKET socket is open, sending and receiving
// on it needs no capability.
//
// Linux keeps capabilities per thread and a Go program runs on many
// threads it does not control, so dropping them with a plain capset(2)
// would leave other threads privileged. libcap's cap package (with psx)
// changes every thread of the process at once (POSIX semantics).
//
// It drops in two steps. Drop clears every capability set but keeps
// CAP_SETPCAP, when the process has it, for Dropped.DropBound, which
// empties the bounding set later and then drops CAP_SETPCAP too. The
// bounding set takes one all-thread call per capability (41), and with
// no_new_privs set and no other capability held no execve can gain one
// (the kernel caps the new permitted set at the old one), so it is
// defence in depth that need not delay the daemon's start.
package privs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// Dropped says what Drop found and did, and finishes the drop.
type Dropped struct {
	Before string // the capability sets before, in libcap's text form
	// Kept says Drop kept CAP_SETPCAP (permitted and effective) for
	// DropBound; false when the process did not have it.
	Kept bool
}

// Drop empties the inheritable and ambient capability sets of every
// thread, sets no_new_privs, and empties the effective and permitted
// sets but for CAP_SETPCAP, which it keeps when the process has it
// effective: emptying the bounding set needs it, and DropBound does that
// later, then drops it. It fails if any other capability is left.
func Drop() (Dropped, error) {
	before := cap.GetProc()
	d := Dropped{Before: before.String()}
	if err := cap.ResetAmbient(); err != nil && !errors.Is(err, unix.EINVAL) {
		return d, fmt.Errorf("privs: clearing ambient capabilities: %w", err)
	}
	keep := cap.NewSet()
	if on, _ := before.GetFlag(cap.Effective, cap.SETPCAP); on {
		if err := keep.SetFlag(cap.Permitted, true, cap.SETPCAP); err != nil {
			return d, fmt.Errorf("privs: %w", err)
		}
		if err := keep.SetFlag(cap.Effective, true, cap.SETPCAP); err != nil {
			return d, fmt.Errorf("privs: %w", err)
		}
		d.Kept = true
	}
	if err := keep.SetProc(); err != nil {
		return d, fmt.Errorf("privs: dropping capabilities %q: %w", d.Before, err)
	}
	if _, err := cap.Prctlw(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return d, fmt.Errorf("privs: setting no_new_privs: %w", err)
	}
	if err := left(keep); err != nil {
		return d, err
	}
	return d, nil
}

// DropBound empties the bounding set of every thread when Drop kept
// CAP_SETPCAP for it, then drops CAP_SETPCAP, so that no capability is
// left; it reports whether it emptied the bounding set. Without
// CAP_SETPCAP the sets are empty already and it does nothing.
func (d Dropped) DropBound() (bool, error) {
	if !d.Kept {
		return false, nil
	}
	var all []cap.Value
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		all = append(all, v)
	}
	if err := cap.DropBound(all...); err != nil {
		return false, fmt.Errorf("privs: emptying the capability bounding set: %w", err)
	}
	empty := cap.NewSet()
	if err := empty.SetProc(); err != nil {
		return true, fmt.Errorf("privs: dropping CAP_SETPCAP: %w", err)
	}
	return true, left(empty)
}

// left fails unless the process's sets are want.
func left(want *cap.Set) error {
	now := cap.GetProc()
	if cf, err := now.Cf(want); err != nil || cf != 0 {
		return fmt.Errorf("privs: capabilities %q remain after dropping them (want %q)", now.String(), want.String())
	}
	return nil
}

// Current returns the process's capability sets in libcap's text form
// ("=" when empty).
func Current() string { return cap.GetProc().String() }
