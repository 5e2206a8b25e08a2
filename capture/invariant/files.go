package invariant

import (
	"fmt"
	"hash/maphash"

	"github.com/rbcast/rbcast/frame"
)

// KindFileReuse: one transfer (sender, incarnation, file id) offered with
// two identities (name, size, block size, hash or its algorithm), or one of its blocks
// carried with two different contents (reliable/files): a receiver could
// mix two files in one.
const KindFileReuse = "file-reuse"

// IsFileType reports a type of the file frames (0x40–0x4F,
// reliable/files), which rbcastd sends in a group of their own.
func IsFileType(t frame.Type) bool { return t >= frame.FileOffer && t <= frame.FileOffer+0x0f }

// files finds a transfer or a block of it bound to two different things.
type files struct {
	offers bounded[fileKey, fileBinding]
	blocks bounded[blockKey, fileBinding]
}

func (fs *files) init(window int) {
	fs.offers = newBounded[fileKey, fileBinding](window)
	fs.blocks = newBounded[blockKey, fileBinding](window)
}

type fileKey struct {
	sender frame.MemberID
	inc    uint32
	id     uint32
}

type blockKey struct {
	fileKey
	block uint32
}

type fileBinding struct {
	hash     uint64
	frame    int
	reported bool
}

// checkFiles binds each offer's identity and each block's content.
func (c *Checker) checkFiles(f *Frame, report reportFunc) {
	v := f.View
	switch v.Type() {
	case frame.FileOffer:
		// The identity: size, block size, hash, name and the hash's algorithm (the body but
		// its id and stamp).
		body := v.Body()
		var h maphash.Hash
		h.SetSeed(c.seed)
		h.Write(body[4:16])
		h.Write(body[20:])
		o := v.FileOffer()
		k := fileKey{v.Sender(), v.Incarnation(), o.ID}
		if b, ok := c.files.offers.get(k); !ok {
			c.files.offers.put(k, fileBinding{hash: h.Sum64(), frame: f.N})
		} else if b.hash != h.Sum64() && !b.reported {
			b.reported = true
			c.files.offers.put(k, b)
			report(KindFileReuse, fmt.Sprintf("member %d.%d file %d: frame %d offers %q of %d bytes, frame %d offered another file under that id",
				k.sender, k.inc, k.id, f.N, o.Name, o.Size, b.frame), b.frame, f.N)
		}
	case frame.FileData:
		sum := maphash.Bytes(c.seed, v.FileBlock())
		k := blockKey{fileKey{v.Sender(), v.Incarnation(), v.FileID()}, v.Seq()}
		if b, ok := c.files.blocks.get(k); !ok {
			c.files.blocks.put(k, fileBinding{hash: sum, frame: f.N})
		} else if b.hash != sum && !b.reported {
			b.reported = true
			c.files.blocks.put(k, b)
			report(KindFileReuse, fmt.Sprintf("member %d.%d file %d block %d: frame %d carries %d bytes that differ from frame %d's",
				k.sender, k.inc, k.id, k.block, f.N, len(v.FileBlock()), b.frame), b.frame, f.N)
		}
	}
}
