package main

import (
	"strings"
	"testing"
)

// run -files-max-size takes MB (1e6 bytes) from a byte up; a value it
// cannot take is a usage error naming the flag, the value and the range,
// and the flag needs -files. -h lists it.
func TestRunFilesMaxSizeFlag(t *testing.T) {
	for _, c := range []struct {
		value, want string
	}{
		{"-1", "-files-max-size is -1 MB, want 0 (no limit) or 0.000001..1e12 (a byte up to 1 EB)"},
		{"1e-7", "-files-max-size is 1e-07 MB, want 0 (no limit) or 0.000001..1e12"},
		{"2e12", "-files-max-size is 2e+12 MB, want 0 (no limit)"},
		{"NaN", "-files-max-size is NaN MB"},
		{"ten", `invalid value "ten" for flag -files-max-size`},
	} {
		code, _, errOut := runMain("run", "-i", "rbnone0", "-group", "1", "-files-max-size", c.value)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("-files-max-size %s: exit %d, stderr %q; want exit 2 and %q", c.value, code, errOut, c.want)
		}
	}
	code, _, errOut := runMain("run", "-i", "rbnone0", "-group", "1", "-files=false", "-files-max-size", "10")
	if want := "-inbox, -files-group, -files-keep-free, -files-drop-written, -files-max-size, -files-max-receiving and -files-ring-mb need -files"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("-files=false -files-max-size 10: exit %d, stderr %q; want exit 2 and %q", code, errOut, want)
	}
	code, out, _ := runMain("run", "-h")
	if code != exitOK || !strings.Contains(out, "-files-max-size MB") || !strings.Contains(out, "larger than it takes") {
		t.Errorf("run -h: exit %d, does not show -files-max-size:\n%s", code, out)
	}
}
