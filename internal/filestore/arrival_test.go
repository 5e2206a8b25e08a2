package filestore

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

// arrivalSeeds is how many arrival orders TestArrivalOrders tries
// (RBCAST_SEEDS overrides).
func arrivalSeeds(t *testing.T) int {
	if s, err := strconv.Atoi(os.Getenv("RBCAST_SEEDS")); err == nil && s > 0 {
		return s
	}
	if testing.Short() {
		return 100
	}
	return 400
}

// Blocks arrive in seeded random orders at one partial copy: a pass
// with losses (single and in bursts), repairs soon (into the run's
// holes, behind it) and late, duplicates, blocks of other bytes written
// again with the file's (the core fetches every block again after a
// hash mismatch), Sum between, the copy closed (Abort, keep) and
// resumed, or dropped as a crash drops it (run and gathered repairs
// lost) and resumed; run, repairs and kept blocks of random small
// sizes. Whatever the order: a resumed copy holds exactly the bytes
// last written to each block it says it holds (or, after a crash, some
// bytes written to it); Sum with every block held is the hash of the
// bytes last written; Holds of a closed copy is whether every block is
// in it; and once every block is the file's, Sum is the file's hash and
// the stored file is the file.
func TestArrivalOrders(t *testing.T) {
	defer func(n, a int) { runBytes, aheadBytes = n, a }(runBytes, aheadBytes)
	for seed := range uint64(arrivalSeeds(t)) {
		if !arrivalOrder(t, seed) {
			return
		}
	}
}

func arrivalOrder(t *testing.T, seed uint64) bool {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 27))
	bs := 1 + r.IntN(64)
	n := 1 + r.IntN(200)
	size := (n-1)*bs + 1 + r.IntN(bs)
	runBytes = (1 + r.IntN(12)) * bs
	aheadBytes = r.IntN(20) * bs
	data := randomBytes(size, seed)
	m := meta("f", data, uint32(bs))
	if r.IntN(2) == 0 {
		m.HashAlg = frame.FileHashBLAKE3
		m.Hash, _ = files.Sum(m.HashAlg, data)
	}
	block := func(b int, of []byte) []byte { return of[b*bs : b*bs+int(m.BlockLen(uint32(b)))] }
	d := &Dir{Root: t.TempDir()}
	fail := func(format string, args ...any) bool {
		t.Helper()
		t.Errorf("seed %d (block size %d, %d blocks, run %d, ahead %d): "+format, append([]any{seed, bs, n, runBytes, aheadBytes}, args...)...)
		return false
	}

	// cur: the bytes last written to each block; written: which were;
	// ever: every version written to each block (a crash may leave an
	// older one).
	cur := make([]byte, size)
	written := make([]bool, n)
	ever := make([][][]byte, n)
	var f files.SinkFile
	open := func() bool {
		t.Helper()
		var held []frame.Range
		var err error
		if f, held, err = d.Open(m); err != nil {
			return fail("Open: %v", err)
		}
		disk, err := os.ReadFile(f.(*partial).path)
		if err != nil {
			return fail("%v", err)
		}
		clear(written)
		for _, h := range held {
			for b := int(h.First); b <= int(h.Last); b++ {
				written[b] = true
				got := block(b, disk)
				copy(block(b, cur), got)
				found := false
				for _, v := range ever[b] {
					found = found || bytes.Equal(v, got)
				}
				if !found {
					return fail("resumed holding block %d with bytes never written to it", b)
				}
			}
		}
		return true
	}
	write := func(b int, v []byte) bool {
		t.Helper()
		copy(block(b, cur), v)
		written[b] = true
		ever[b] = append(ever[b], bytes.Clone(v))
		var err error
		if r.IntN(2) == 0 {
			err = f.WriteBlock(uint32(b), v)
		} else {
			err = f.(*partial).WriteBlockSum(uint32(b), v, crc32.Checksum(v, castagnoli))
		}
		if err != nil {
			return fail("WriteBlock %d: %v", b, err)
		}
		return true
	}
	all := func() bool {
		for _, w := range written {
			if !w {
				return false
			}
		}
		return true
	}
	other := func(b int) []byte {
		v := bytes.Clone(block(b, data))
		v[r.IntN(len(v))] ^= byte(1 + r.IntN(255))
		return v
	}
	check := func() bool {
		t.Helper()
		if !all() {
			return true
		}
		sum, err := f.Sum()
		want, _ := files.Sum(m.HashAlg, cur)
		if err != nil || sum != want {
			return fail("Sum = %x, %v with every block held; the hash of the bytes written is %x", sum, err, want)
		}
		return true
	}
	if !open() {
		return false
	}
	// The pass, with losses, some blocks of other bytes, repairs soon.
	var lost []int
	loss := r.IntN(4) // in 8
	for b := 0; b < n; b++ {
		if burst := r.IntN(40) == 0; burst || r.IntN(8) < loss {
			k := 1
			if burst {
				k = 1 + r.IntN(20)
			}
			for ; k > 0 && b < n; k-- {
				lost = append(lost, b)
				b++
			}
			b--
			continue
		}
		v := block(b, data)
		if r.IntN(30) == 0 {
			v = other(b)
		}
		if !write(b, v) {
			return false
		}
		if dup := r.IntN(b + 1); r.IntN(20) == 0 && !write(dup, bytes.Clone(block(dup, cur))) { // a duplicate
			return false
		}
		for len(lost) > 0 && r.IntN(3) == 0 { // a repair, oldest lost first mostly
			i := 0
			if r.IntN(4) == 0 {
				i = r.IntN(len(lost))
			}
			rb := lost[i]
			lost = append(lost[:i], lost[i+1:]...)
			if !write(rb, block(rb, data)) {
				return false
			}
		}
		switch r.IntN(100) {
		case 0:
			if !check() {
				return false
			}
		case 1: // closed, kept, resumed
			f.Abort(true)
			if want := all(); d.Holds(m) != want {
				return fail("Holds = %v of a copy closed with every block %v", !want, want)
			}
			if !open() {
				return false
			}
		case 2: // a crash: what memory held is lost
			f.(*partial).close()
			if !open() {
				return false
			}
		}
	}
	if !check() {
		return false
	}
	// Late repairs, in random order, until every block is the file's.
	for {
		var need []int
		for b := range n {
			if !written[b] || !bytes.Equal(block(b, cur), block(b, data)) {
				need = append(need, b)
			}
		}
		if len(need) == 0 {
			break
		}
		r.Shuffle(len(need), func(i, j int) { need[i], need[j] = need[j], need[i] })
		for _, b := range need {
			if !write(b, block(b, data)) {
				return false
			}
		}
		if r.IntN(4) == 0 {
			f.(*partial).close()
			if !open() {
				return false
			}
		}
	}
	if !check() {
		return false
	}
	sum, err := f.Sum()
	if err != nil || sum != m.Hash {
		return fail("Sum = %x, %v; the file's is %x", sum, err, m.Hash)
	}
	if err := f.Commit(); err != nil {
		return fail("Commit: %v", err)
	}
	got, err := os.ReadFile(f.(*partial).final)
	if err != nil || !bytes.Equal(got, data) {
		return fail("stored %d bytes (equal: %v), %v", len(got), bytes.Equal(got, data), err)
	}
	if !d.Holds(m) {
		return fail("Holds is false of the file stored")
	}
	return true
}
