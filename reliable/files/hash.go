package files

import (
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/zeebo/blake3"

	"github.com/rbcast/rbcast/frame"
)

// NewHash returns a new hash of the algorithm a (0 is SHA-256, as in
// Outgoing and Meta): SHA-256 (crypto/sha256),
// or BLAKE3 with its 32-byte output (github.com/zeebo/blake3: its vector
// code is as fast on one frame's block as on a megabyte, and the file
// core writes a block at a time; docs/protocols.md, "Files (IBRMP)").
func NewHash(a frame.FileHashAlg) (hash.Hash, error) {
	switch a {
	case 0, frame.FileHashSHA256:
		return sha256.New(), nil
	case frame.FileHashBLAKE3:
		return blake3.New(), nil
	}
	return nil, fmt.Errorf("files: hash algorithm %v is unknown to this build (want %v or %v)", a, frame.FileHashSHA256, frame.FileHashBLAKE3)
}

// Sum is data's hash under a (nil error only for a known a).
func Sum(a frame.FileHashAlg, data []byte) ([frame.FileHashLen]byte, error) {
	h, err := NewHash(a)
	if err != nil {
		return [frame.FileHashLen]byte{}, err
	}
	h.Write(data)
	return [frame.FileHashLen]byte(h.Sum(nil)), nil
}

// FormatHash spells a file's hash as "alg:hex" (blake3:…, sha256:…).
func FormatHash(a frame.FileHashAlg, sum [frame.FileHashLen]byte) string {
	return fmt.Sprintf("%v:%x", a, sum)
}
