package main

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The row object's slab is written where the object is made, before the
// solve: its pages are mapped then (mincore: resident), not as the rows
// are decoded into it during the solve.
func TestSlabMappedAtNew(t *testing.T) {
	const n = 512
	p := newPivots(n)
	page := unix.Getpagesize()
	// The whole pages the slab covers.
	base := unsafe.Pointer(&p.Slab[0])
	skip := (page - int(uintptr(base))%page) % page
	pages := (4*len(p.Slab) - skip) / page
	if pages < 1 {
		t.Fatalf("a slab of %d cells covers no whole page", len(p.Slab))
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(base, skip)), pages*page)
	vec := make([]byte, len(mem)/page)
	// x/sys/unix has no Mincore wrapper.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	missing := 0
	for _, v := range vec {
		if v&1 == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the slab's %d pages are not mapped after newPivots", missing, len(vec))
	}
}
