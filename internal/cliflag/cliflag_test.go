package cliflag

import "testing"

func TestHelpAsked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-h"}, true},
		{[]string{"-x", "1", "-help"}, true},
		{[]string{"--help"}, true},
		{[]string{"--", "-h"}, false},
		{[]string{"-hosts", "2"}, false},
	} {
		if got := HelpAsked(c.args); got != c.want {
			t.Errorf("HelpAsked(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestBounds(t *testing.T) {
	n, m := 5, -1
	var b Bounds
	b.Add("n", &n, 1, 10, "rows")
	b.Add("m", &m, 0, 3, "columns")
	if err := b.Check(); err == nil || err.Error() != "-m is -1, want 0..3 (columns)" {
		t.Fatalf("Check() = %v, want -m's range", err)
	}
	m = 3
	if err := b.Check(); err != nil {
		t.Fatalf("Check() = %v with both in range", err)
	}
	n = 11
	if err := b.Check(); err == nil || err.Error() != "-n is 11, want 1..10 (rows)" {
		t.Fatalf("Check() = %v, want -n's range", err)
	}
}
