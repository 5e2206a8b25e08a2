// Package privs drops the process's privileges once rbcastd no longer
// needs them: after the AF_PACKET socket is open, sending and receiving
// on it needs no capability.
//
// Linux keeps capabilities per thread and a Go program runs on many
// threads it does not control, so dropping them with a plain capset(2)
// would leave other threads privileged. libcap's cap package (with psx)
// changes every thread of the process at once (POSIX semantics).
package privs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// Dropped says what Drop found and did.
type Dropped struct {
	Before string // the capability sets before, in libcap's text form
	Bound  bool   // the bounding set was emptied (needs CAP_SETPCAP)
}

// Drop empties the effective, permitted, inheritable and ambient
// capability sets of every thread, empties the bounding set when it may
// (CAP_SETPCAP), and sets no_new_privs, so that neither this process nor
// anything it executes can regain a capability. It fails if any
// capability is left.
func Drop() (Dropped, error) {
	before := cap.GetProc()
	d := Dropped{Before: before.String()}
	if on, _ := before.GetFlag(cap.Effective, cap.SETPCAP); on {
		var all []cap.Value
		for v := cap.Value(0); v < cap.MaxBits(); v++ {
			all = append(all, v)
		}
		if err := cap.DropBound(all...); err != nil {
			return d, fmt.Errorf("privs: emptying the capability bounding set: %w", err)
		}
		d.Bound = true
	}
	if err := cap.ResetAmbient(); err != nil && !errors.Is(err, unix.EINVAL) {
		return d, fmt.Errorf("privs: clearing ambient capabilities: %w", err)
	}
	empty := cap.NewSet()
	if err := empty.SetProc(); err != nil {
		return d, fmt.Errorf("privs: dropping capabilities %q: %w", d.Before, err)
	}
	if _, err := cap.Prctlw(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return d, fmt.Errorf("privs: setting no_new_privs: %w", err)
	}
	now := cap.GetProc()
	if cf, err := now.Cf(empty); err != nil || cf != 0 {
		return d, fmt.Errorf("privs: capabilities %q remain after dropping them", now.String())
	}
	return d, nil
}

// Current returns the process's capability sets in libcap's text form
// ("=" when empty).
func Current() string { return cap.GetProc().String() }
