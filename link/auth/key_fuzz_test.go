package auth

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: a key file, whatever it holds, either fails with an
// ErrKeyFile error naming the file, or loads a key; and a key loaded
// from a file of hexadecimal digits is the key of those digits' bytes,
// which, written raw or as Generate writes them, load as the same key.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"))
	f.Add([]byte("  000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F \r\n\t"))
	f.Add([]byte("0123456789abcdef0123456789abcdef"))
	f.Add([]byte("abcd\n"))
	f.Add([]byte("zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "fuzz.key")
		os.Remove(path)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := Load(path)
		if err != nil {
			if !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), path) {
				t.Fatalf("%q: error %q does not wrap ErrKeyFile and name the file", b, err)
			}
			return
		}
		secret := b
		if len(b) != KeySize {
			if secret, err = hex.DecodeString(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("%q loads, yet is neither %d raw bytes nor hexadecimal digits: %v", b, KeySize, err)
			}
		}
		want, err := NewKey(secret)
		if err != nil || k.Fingerprint() != want.Fingerprint() {
			t.Fatalf("%q loads as key %v, its bytes' key is %v (%v)", b, k, want, err)
		}
		for _, again := range [][]byte{secret, fmt.Appendf(nil, "%x\n", secret)} {
			os.Remove(path)
			if err := os.WriteFile(path, again, 0o600); err != nil {
				t.Fatal(err)
			}
			if l, err := Load(path); err != nil || l.Fingerprint() != k.Fingerprint() {
				t.Fatalf("%q loads as %v; its secret written as %q loads as %v (%v)", b, k, again, l, err)
			}
		}
	})
}
