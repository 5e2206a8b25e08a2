package seeds

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		env   string
		short bool
		want  int
		err   string
	}{
		{"", false, 3000, ""},
		{"", true, 200, ""},
		{"6000", true, 6000, ""},
		{"0", false, 0, `RBCAST_SEEDS="0": want a positive number`},
		{"many", false, 0, `RBCAST_SEEDS="many": want a positive number`},
	} {
		n, err := count(tc.env, tc.short, 3000, 200)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("count(%q): error %v, want %q", tc.env, err, tc.err)
		case tc.err == "" && (err != nil || n != tc.want):
			t.Errorf("count(%q, short=%v) = %d, %v; want %d", tc.env, tc.short, n, err, tc.want)
		}
	}
}
