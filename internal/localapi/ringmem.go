package localapi

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The seals a ring's memfd carries: its size can change no more, so
// neither end can make the other's access to the mapping fault (SIGBUS)
// by truncating it.
const ringSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// CreateRingMemory makes the memory of a ring with a data area of size
// bytes: a memfd of RingSize bytes, sealed, and its shared mapping. The
// file descriptor is the caller's to pass on (RingReady) and close; the
// mapping outlives it (UnmapRing).
func CreateRingMemory(size int) (fd int, mem []byte, err error) {
	n, err := RingSize(size)
	if err != nil {
		return -1, nil, err
	}
	fd, err = unix.MemfdCreate("rbcastd-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("ring memory: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("ring memory of %d bytes: %w", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, ringSeals); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("ring memory: sealing: %w", err)
	}
	mem, err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("ring memory of %d bytes: mmap: %w", n, err)
	}
	return fd, mem, nil
}

// MapRingMemory maps a ring's memfd received from the other end, once it
// is sure that the file is sealed against shrinking and holds the ring
// the other end announced (a data area of size bytes).
func MapRingMemory(fd int, size int) ([]byte, error) {
	n, err := RingSize(size)
	if err != nil {
		return nil, err
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("ring memory: not a sealed memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("ring memory: the memfd may shrink (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("ring memory: %w", err)
	}
	if st.Size != int64(n) {
		return nil, fmt.Errorf("ring memory of %d bytes, want %d for a ring of %d", st.Size, n, size)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ring memory of %d bytes: mmap: %w", n, err)
	}
	return mem, nil
}

// UnmapRing unmaps a ring's memory; the Ring over it must not be used
// any more.
func UnmapRing(mem []byte) error { return unix.Munmap(mem) }
