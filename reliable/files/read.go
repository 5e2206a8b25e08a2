package files

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rbcast/rbcast/frame"
)

// The sender reads its blocks straight into the frames they go out in:
// the pass's next blocks a run at a time (one RunSource call per run, so
// one copy, from the page cache into the frame, and one system call per
// run), a repair's block alone.

// runBytes is what the pass reads at once, at most: 512 KiB of blocks
// (358 at MTU 1500, 58 at MTU 9000; Linux takes at most 1024 buffers per
// preadv). Runs that stay in the cache until their frames are copied
// into the link's ring cost less than a MiB's (BenchmarkPassRead in
// internal/filestore).
const runBytes = 512 << 10

// readRun reads the blocks from first on into ps, one each (ps[i] is as
// long as block first+i): with one call to a RunSource, else a ReadAt
// per block. It returns how many of ps it filled whole and, when that is
// fewer than len(ps), the error that stopped it.
func readRun(src Source, ps [][]byte, first uint32, blockSize uint32) (int, error) {
	off := int64(first) * int64(blockSize)
	if rs, ok := src.(RunSource); ok {
		n, err := rs.ReadRunAt(ps, off)
		full := 0
		for _, p := range ps {
			if n < len(p) {
				break
			}
			n -= len(p)
			full++
		}
		if full == len(ps) {
			return full, nil
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("block %d: read %d bytes of %d", first+uint32(full), n, len(ps[full]))
		}
		return full, err
	}
	for i, p := range ps {
		got, err := src.ReadAt(p, off)
		if errors.Is(err, io.EOF) && got == len(p) {
			err = nil
		}
		if err == nil && got != len(p) {
			err = fmt.Errorf("block %d: read %d bytes of %d", first+uint32(i), got, len(p))
		}
		if err != nil {
			return i, err
		}
		off += int64(len(p))
	}
	return len(ps), nil
}

// blockFrame returns a frame buffer for block b of f to dst with header
// h: the Ethernet header written, the block's body (file id and data) in
// place after the frame's prefix, for frame.Append of a frame.Placed
// body; the buffer's length is the Ethernet header's. A block of the pass
// (pass) comes from the run read ahead, read first if it does not hold
// b; any other is read alone.
func (c *Core) blockFrame(f *outFile, b uint32, dst [6]byte, h *frame.Header, pass bool) ([]byte, error) {
	if pass {
		if f.ai == len(f.ahead) || f.aheadFirst != b {
			c.freeAhead(f)
			if err := c.readAhead(f, b, dst, h); err != nil {
				return nil, err
			}
		}
		buf := f.ahead[f.ai]
		eth := frame.AppendEthernet(buf[:0], dst, c.cfg.selfMAC, c.cfg.EtherType)
		if len(eth)+frame.PrefixLen(h) == f.aheadAt {
			f.ahead[f.ai] = nil
			f.ai++
			f.aheadFirst++
			return eth, nil
		}
		c.freeAhead(f) // the prefix changed since the run was read: read b alone
	}
	buf := frame.AppendEthernet(c.buf(), dst, c.cfg.selfMAC, c.cfg.EtherType)
	at := len(buf) + frame.PrefixLen(h)
	body := buf[at : at+frame.FileDataHead+f.meta.BlockLen(b)]
	binary.BigEndian.PutUint32(body, f.meta.ID)
	c.scratchPs = append(c.scratchPs[:0], body[frame.FileDataHead:])
	_, err := readRun(f.src, c.scratchPs, b, f.meta.BlockSize)
	clear(c.scratchPs)
	if err != nil {
		c.free = append(c.free, buf)
		return nil, err
	}
	return buf, nil
}

// readAhead reads the run of f's pass from block b on into frame buffers
// for dst with header h (its Seq aside), f.ahead: up to runBytes of
// blocks, those of a short read that arrived whole. It fails only when
// not even block b could be read.
func (c *Core) readAhead(f *outFile, b uint32, dst [6]byte, h *frame.Header) error {
	k := int(min(f.blocks-b, uint32(max(runBytes/int(f.meta.BlockSize), 1))))
	c.scratchPs = c.scratchPs[:0]
	for i := range k {
		buf := frame.AppendEthernet(c.buf(), dst, c.cfg.selfMAC, c.cfg.EtherType)
		at := len(buf) + frame.PrefixLen(h)
		body := buf[at : at+frame.FileDataHead+f.meta.BlockLen(b+uint32(i))]
		binary.BigEndian.PutUint32(body, f.meta.ID)
		f.ahead = append(f.ahead, buf)
		f.aheadAt = at
		c.scratchPs = append(c.scratchPs, body[frame.FileDataHead:])
	}
	full, err := readRun(f.src, c.scratchPs, b, f.meta.BlockSize)
	clear(c.scratchPs)
	f.aheadFirst = b
	c.free = append(c.free, f.ahead[full:]...)
	clear(f.ahead[full:])
	f.ahead = f.ahead[:full]
	if full == 0 {
		return err
	}
	return nil // the rest is read again when the pass comes to it
}

// freeAhead gives back the frames of f's run not sent.
func (c *Core) freeAhead(f *outFile) {
	c.free = append(c.free, f.ahead[f.ai:]...)
	clear(f.ahead)
	f.ahead, f.ai = f.ahead[:0], 0
}
