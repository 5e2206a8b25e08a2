package auth

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// KeySize is the length of a group key: 256 random bits.
const KeySize = 32

// ErrKeyFile is wrapped by every error about a key file.
var ErrKeyFile = errors.New("auth: bad key file")

// extractSalt separates rbcast's use of a key from any other use of the
// same bytes (HKDF-Extract's salt, RFC 5869 §3.1).
const extractSalt = "rbcast group key v1"

// A Key is a group key: the secret every member of an authenticated group
// holds, from which the per-group, per-purpose, per-sender keys are derived
// with HKDF-SHA-256 (RFC 5869). It is immutable.
type Key struct {
	prk []byte // HKDF-Extract(salt, secret)
	fp  uint64
}

// NewKey returns the key of secret, KeySize bytes.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) != KeySize {
		return nil, fmt.Errorf("%w: a key is %d bytes, this one has %d", ErrKeyFile, KeySize, len(secret))
	}
	prk, err := hkdf.Extract(sha256.New, secret, []byte(extractSalt))
	if err != nil {
		return nil, err
	}
	k := &Key{prk: prk}
	fp, err := k.expand("fingerprint", 8)
	if err != nil {
		return nil, err
	}
	k.fp = binary.BigEndian.Uint64(fp)
	return k, nil
}

func (k *Key) expand(info string, n int) ([]byte, error) {
	return hkdf.Expand(sha256.New, k.prk, info, n)
}

// Fingerprint names the key without revealing it (an HKDF output of its
// own purpose): status shows it, and a KeyMismatch carries it so that an
// operator sees which key a member uses.
func (k *Key) Fingerprint() uint64 { return k.fp }

// ID is the key id frames carry (the fingerprint's first byte): a receiver
// finds the slot of a frame's key by it, so two keys in use at once must
// differ in it (Link.Install refuses otherwise).
func (k *Key) ID() uint8 { return uint8(k.fp >> 56) }

func (k *Key) String() string { return fmt.Sprintf("%016x", k.fp) }

// Generate writes a new key to path, as 64 hexadecimal digits and a
// newline, readable by its owner only (rbcastd keygen). It refuses to
// overwrite a file.
func Generate(path string, random io.Reader) (*Key, error) {
	if random == nil {
		random = rand.Reader
	}
	secret := make([]byte, KeySize)
	if _, err := io.ReadFull(random, secret); err != nil {
		return nil, fmt.Errorf("auth: reading %d random bytes: %w", KeySize, err)
	}
	k, err := NewKey(secret)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("auth: writing key file: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%x\n", secret); err != nil {
		f.Close()
		return nil, fmt.Errorf("auth: writing key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("auth: writing key file %s: %w", path, err)
	}
	return k, nil
}

// maxKeyFile is the most bytes a key file holds: its digits and white
// space around them.
const maxKeyFile = 4096

// Load reads a key file: 64 hexadecimal digits (what Generate writes;
// surrounding white space is ignored) or KeySize raw bytes. A file that
// others than its owner can read is refused: the key is the group's
// whole secret.
func Load(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others than its owner (mode %v); chmod 600 it", ErrKeyFile, path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	if len(b) > maxKeyFile {
		// Read whole or not at all: a key followed by more than a
		// file's worth of white space and then anything else is not a
		// key file.
		return nil, fmt.Errorf("%w: %s holds over %d bytes; want %d hexadecimal digits (rbcastd keygen) or %d raw bytes", ErrKeyFile, path, maxKeyFile, 2*KeySize, KeySize)
	}
	if len(b) == KeySize {
		return NewKey(b)
	}
	s := strings.TrimSpace(string(b))
	if len(s) != 2*KeySize {
		return nil, fmt.Errorf("%w: %s holds %d bytes; want %d hexadecimal digits (rbcastd keygen) or %d raw bytes", ErrKeyFile, path, len(b), 2*KeySize, KeySize)
	}
	secret, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	return NewKey(secret)
}
