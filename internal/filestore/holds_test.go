package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/files"
)

// Holds says which files Open would return whole: a file stored with
// its recorded hash, a partial copy with every block written; not a
// file of another hash or without a record, a copy lacking a block, an
// offer without a hash, a declined or a bad name. What it says holds is
// what Open then returns: every block held.
func TestHolds(t *testing.T) {
	d := &Dir{Root: t.TempDir(), Accept: func(m files.Meta) bool { return m.Name != "declined" }}
	data := randomBytes(10*100+7, 9)
	stored := meta("dir/stored", data, 100)
	receive(t, d, stored, data)
	whole, part := meta("whole", data, 100), meta("part", data, 100)
	for _, m := range []files.Meta{whole, part} {
		f, _, err := d.Open(m)
		if err != nil {
			t.Fatal(err)
		}
		for b := range m.Blocks() {
			if b == 3 && m.Name == "part" {
				continue
			}
			f.WriteBlock(b, data[int(b)*100:int(b)*100+m.BlockLen(b)])
		}
		f.Abort(true)
	}
	other := stored
	other.Hash[0] ^= 1
	noHash := stored
	noHash.Hash = [frame.FileHashLen]byte{}
	unrecorded := meta("unrecorded", data, 100)
	os.WriteFile(filepath.Join(d.Root, "unrecorded"), data, 0o644)
	for _, c := range []struct {
		m    files.Meta
		want bool
	}{
		{stored, true}, {whole, true}, {part, false}, {other, false}, {noHash, false}, {unrecorded, false},
		{meta("declined", data, 100), false}, {meta("../out", data, 100), false}, {meta("absent", data, 100), false},
	} {
		if got := d.Holds(c.m); got != c.want {
			t.Errorf("Holds(%q, hash %x) = %v, want %v", c.m.Name, c.m.Hash[:4], got, c.want)
		}
		if !c.want {
			continue
		}
		f, held, err := d.Open(c.m)
		if err != nil || len(held) != 1 || held[0] != (frame.Range{First: 0, Last: c.m.Blocks() - 1}) {
			t.Errorf("Open(%q) after Holds: %v, held %v; want every block", c.m.Name, err, held)
			continue
		}
		f.Abort(true)
	}
}
