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
