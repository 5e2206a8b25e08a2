package reliable

import (
	"testing"

	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/pcode"
	"github.com/rbcast/rbcast/reliable/seq"
)

// What an interface field holds is hashed with its type: values that
// write alike (a Mode and an int of one value, a slice and an array of
// the same bytes, nil pointers of two types) give different hashes.
func TestConfigHashTypesInInterfaces(t *testing.T) {
	type mode uint8
	type a struct{ X int }
	type b struct{ X int }
	hash := func(v any) uint64 { return configHash(7, sharedConfig{cfg: struct{ V any }{v}}) }
	for _, pair := range [][2]any{
		{int(5), uint(5)},
		{int(5), mode(5)},
		{[]byte{1, 2}, [2]byte{1, 2}},
		{(*a)(nil), (*b)(nil)},
		{(*a)(nil), a{}},
		{&a{X: 1}, &b{X: 1}},
	} {
		if hash(pair[0]) == hash(pair[1]) {
			t.Errorf("%T %v and %T %v hash alike", pair[0], pair[0], pair[1], pair[1])
		}
	}
}

// The hashes of the cores' default shared configurations, alone and as
// the views hash them: a change to any of them is a change of which
// daemons admit each other (docs/protocols.md, "Registration"), to be made
// on purpose. These are the hashes of 0d28724.
func TestConfigHashDefaultsPinned(t *testing.T) {
	p := pbp.Config{}.Shared()
	views := struct {
		PBP        any
		MaxMembers int
		Level      string
		Membership string
	}{p, DefaultMaxMembers, "fifo", "views/2"}
	for name, c := range map[string]struct {
		cfg  any
		want uint64
	}{
		"pbp":        {p, 0x1d13a495c18a2dc6},
		"seq":        {seq.Config{}.Shared(), 0x5d593d3b965017be},
		"pcode":      {pcode.Config{}.Shared(), 0x20db87bf7035612e},
		"views/fifo": {views, 0x14335626080c7dc3},
	} {
		if got := configHash(1, sharedConfig{cfg: c.cfg}); got != c.want {
			t.Errorf("%s: the defaults' hash is %#x, was %#x", name, got, c.want)
		}
	}
}
