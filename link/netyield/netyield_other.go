//go:build !linux

package netyield

import "runtime"

// Yield is runtime.Gosched off Linux.
func Yield() { runtime.Gosched() }

// YieldPoller is runtime.Gosched off Linux.
func YieldPoller() { runtime.Gosched() }
