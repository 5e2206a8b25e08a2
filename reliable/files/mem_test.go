package files

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/rbcast/rbcast/frame"
)

// memSource is a file in memory, a RunSource (blockSource hides that).
type memSource struct {
	data   []byte
	bs     int
	closed int
	fail   int // a read of this block fails (-1: none)
	// reads counts ReadAt's calls; runs is every ReadRunAt's first
	// block and number of blocks; shortRun > 0 ends each run short,
	// without an error, within its shortRun+1-th block.
	reads    int
	runs     [][2]int
	shortRun int
}

func (s *memSource) ReadAt(p []byte, off int64) (int, error) {
	s.reads++
	return s.readAt(p, off)
}

// ReadRunAt reads as ReadAt would block after block, and fails at the
// failing block with the bytes before it read.
func (s *memSource) ReadRunAt(ps [][]byte, off int64) (int, error) {
	s.runs = append(s.runs, [2]int{int(off) / s.bs, len(ps)})
	n := 0
	for i, p := range ps {
		if s.shortRun > 0 && i == s.shortRun {
			return n + copy(p[:len(p)/2], s.data[int(off)+n:]), nil
		}
		got, err := s.readAt(p, off+int64(n))
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// blockSource is a Source that reads a block per call only.
type blockSource struct{ m *memSource }

func (s blockSource) ReadAt(p []byte, off int64) (int, error) { return s.m.ReadAt(p, off) }
func (s blockSource) Close() error                            { return s.m.Close() }

func (s *memSource) readAt(p []byte, off int64) (int, error) {
	if b := int(off) / s.bs; b == s.fail {
		return 0, fmt.Errorf("disk error at block %d", b)
	}
	if int(off) >= len(s.data) && len(p) > 0 {
		return 0, fmt.Errorf("offset %d past the end", off)
	}
	n := copy(p, s.data[off:])
	if int(off)+n == len(s.data) {
		return n, io.EOF
	}
	return n, nil
}

func (s *memSource) Close() error { s.closed++; return nil }

// memSink is a receiver's disk: partial copies keyed by name, size,
// block size and hash (so an offer of the same file resumes), each block
// with the hash stored beside it when written, and the committed files
// by name. It outlives a crash of its member (a new core opens it
// again); a crash tears the last block written (its bytes change, its
// stored hash does not), which Open's verification must catch.
type memSink struct {
	fail     func(format string, args ...any)
	partials map[pkey]*partial
	stored   map[string][]byte
	// commits: every file committed, by transfer, with its bytes.
	commits map[inKey][]byte
	// refuse: Open fails for a name with this prefix.
	refuse string
	// decline: Open declines every file (ErrDeclined).
	decline bool
	// limit: Open refuses every file of more than one block with this
	// error (one wrapping ErrNoSpace: no room).
	limit error
	// opened: the files open now (Open's, until Commit or Abort);
	// stored those of them that are files stored already, which hold no
	// copy (filestore opens no descriptor for them); mostOpen the most
	// copies open at once.
	opened, stored1, mostOpen int
	// noHolds: the sink does not say what it holds (Holds is false).
	noHolds bool
}

// opening counts a copy Open returns open.
func (s *memSink) opening(p *partial) *partial {
	s.opened++
	if p.stored {
		s.stored1++
	}
	s.mostOpen = max(s.mostOpen, s.opened-s.stored1)
	return p
}

// closing counts p closed, if it was open.
func (p *partial) closing() {
	if p.open {
		p.sink.opened--
		if p.stored {
			p.sink.stored1--
		}
	}
	p.open = false
}

// Holds reports whether Open(m) would hold every block (HoldingSink):
// the file stored under m.Name with m.Hash, or a partial copy not open
// whose every block is written and verifies.
func (s *memSink) Holds(m Meta) bool {
	if s.noHolds || m.Hash == ([32]byte{}) || s.decline || s.limit != nil && m.Blocks() > 1 {
		return false
	}
	if d, ok := s.stored[m.Name]; ok && uint64(len(d)) == m.Size && mustSum(m.HashAlg, d) == m.Hash {
		return true
	}
	p := s.partials[keyOf(m)]
	if p == nil || p.open {
		return false
	}
	for b := range m.Blocks() {
		if h, ok := p.hashes[b]; !ok || sha256.Sum256(p.block(b)) != h {
			return false
		}
	}
	return true
}

// mustSum is data's hash under a known algorithm.
func mustSum(a frame.FileHashAlg, data []byte) [32]byte {
	h, err := Sum(a, data)
	if err != nil {
		panic(err)
	}
	return h
}

type pkey struct {
	name   string
	size   uint64
	bs     uint32
	alg    frame.FileHashAlg
	hash   [32]byte
	sender frame.MemberID // with a hash of zeros (it comes in FileEnd), as filestore keys it
}

func keyOf(m Meta) pkey {
	k := pkey{name: m.Name, size: m.Size, bs: m.BlockSize, alg: m.HashAlg, hash: m.Hash}
	if m.Hash == ([32]byte{}) {
		k.sender = m.Sender
	}
	return k
}

type partial struct {
	meta   Meta
	data   []byte
	hashes map[uint32][32]byte
	open   bool
	stored bool  // the file stored already, returned with every block held
	last   int64 // the last block written (-1: none)
	// held: the blocks Open reported held; writing one again means a
	// resumed transfer received a block it had.
	held map[uint32]bool
	sink *memSink
}

func newMemSink(fail func(string, ...any)) *memSink {
	return &memSink{fail: fail, partials: map[pkey]*partial{}, stored: map[string][]byte{}, commits: map[inKey][]byte{}}
}

func (s *memSink) Open(m Meta) (SinkFile, []frame.Range, error) {
	if s.decline {
		return nil, nil, ErrDeclined
	}
	if s.limit != nil && m.Blocks() > 1 {
		return nil, nil, s.limit
	}
	if s.refuse != "" && len(m.Name) >= len(s.refuse) && m.Name[:len(s.refuse)] == s.refuse {
		return nil, nil, fmt.Errorf("no room for %q", m.Name)
	}
	k := keyOf(m)
	if d, ok := s.stored[m.Name]; ok && uint64(len(d)) == m.Size && (m.Hash == ([32]byte{}) || mustSum(m.HashAlg, d) == m.Hash) {
		// Stored already (a member that restarted after committing it,
		// or the same file sent again): every block is held. With an
		// offer without a hash it is a candidate, which FileEnd's hash
		// confirms or not (Sum: filestore's record of its hash).
		p := &partial{meta: m, data: bytes.Clone(d), hashes: map[uint32][32]byte{}, open: true, stored: true, last: -1, held: map[uint32]bool{}, sink: s}
		for b := range m.Blocks() {
			p.hashes[b] = sha256.Sum256(p.block(b))
			p.held[b] = true // never received again
		}
		var held []frame.Range
		if n := m.Blocks(); n > 0 {
			held = []frame.Range{{First: 0, Last: n - 1}}
		}
		return s.opening(p), held, nil
	}
	p := s.partials[k]
	if p != nil && p.open {
		// Another transfer of the same file is under way: a copy of its
		// own (never two writers on one partial).
		return s.opening(&partial{meta: m, data: make([]byte, m.Size), hashes: map[uint32][32]byte{}, open: true, last: -1, held: map[uint32]bool{}, sink: s}), nil, nil
	}
	if p == nil {
		p = &partial{data: make([]byte, m.Size), hashes: map[uint32][32]byte{}, last: -1, sink: s}
		s.partials[k] = p
	}
	p.meta, p.open, p.held = m, true, map[uint32]bool{}
	var held []frame.Range
	for b := range m.Blocks() {
		h, ok := p.hashes[b]
		if !ok || sha256.Sum256(p.block(b)) != h {
			continue
		}
		p.held[b] = true
		if n := len(held); n > 0 && held[n-1].Last+1 == b {
			held[n-1].Last = b
		} else {
			held = append(held, frame.Range{First: b, Last: b})
		}
	}
	return s.opening(p), held, nil
}

func (p *partial) block(b uint32) []byte {
	off := int(b) * int(p.meta.BlockSize)
	return p.data[off : off+p.meta.BlockLen(b)]
}

func (p *partial) WriteBlock(b uint32, data []byte) error {
	if !p.open {
		p.sink.fail("%v: block %d written to a closed partial", p.meta, b)
	}
	if p.held[b] {
		p.sink.fail("%v: block %d received again after a resume that held it", p.meta, b)
	}
	if b >= p.meta.Blocks() || len(data) != p.meta.BlockLen(b) {
		p.sink.fail("%v: block %d of %d bytes", p.meta, b, len(data))
		return fmt.Errorf("bad block")
	}
	copy(p.block(b), data)
	p.hashes[b] = sha256.Sum256(data)
	p.last = int64(b)
	return nil
}

func (p *partial) Sum() ([32]byte, error) {
	for b := range p.meta.Blocks() {
		if _, ok := p.hashes[b]; !ok {
			p.sink.fail("%v: Sum with block %d never written", p.meta, b)
		}
	}
	return mustSum(p.meta.HashAlg, p.data), nil
}

func (p *partial) Commit() error {
	s := p.sink
	if p.meta.Hash != ([32]byte{}) && mustSum(p.meta.HashAlg, p.data) != p.meta.Hash {
		s.fail("%v: committed with a hash that is not its offer's", p.meta)
	}
	k := inKey{p.meta.Sender, p.meta.Incarnation, p.meta.ID}
	if d, ok := s.commits[k]; ok && !bytes.Equal(d, p.data) {
		s.fail("%v: committed twice, with other bytes", p.meta)
	}
	s.commits[k] = bytes.Clone(p.data)
	s.stored[p.meta.Name] = s.commits[k]
	p.closing()
	s.drop(p)
	return nil
}

func (p *partial) Abort(keep bool) {
	p.closing()
	if !keep {
		p.sink.drop(p)
	}
}

func (s *memSink) drop(p *partial) {
	k := keyOf(p.meta)
	if s.partials[k] == p {
		delete(s.partials, k)
	}
}

// crash closes every partial as a dying process leaves it, tearing the
// last block each wrote.
func (s *memSink) crash() {
	s.opened = 0 // its core is gone with what it held open
	for _, p := range s.partials {
		p.open = false
		if p.last >= 0 {
			if blk := p.block(uint32(p.last)); len(blk) > 0 {
				blk[0] ^= 0xff
			}
		}
	}
}
