//go:build !linux

package netyield

import "runtime"

// Yield is runtime.Gosched off Linux.
func Yield() { runtime.Gosched() }

// YieldPoller is runtime.Gosched off Linux.
func YieldPoller() { runtime.Gosched() }

// Mark is 0 off Linux.
func Mark() uint64 { return 0 }

// GiveCPU is runtime.Gosched off Linux.
func GiveCPU(uint64) bool { runtime.Gosched(); return true }
