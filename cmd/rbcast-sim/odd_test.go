package main

import (
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Odd command lines end with exit 2 and a line naming the flag, never a
// hang or an out-of-memory crash.
func TestOddInputs(t *testing.T) {
	clitest.Runner{}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: rbcast-sim"},
		{Args: []string{"-raw", "-h"}, OK: true, Want: "usage: rbcast-sim -raw"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"-q", "extra"}, Code: 2, Want: `unexpected argument "extra"`},
		{Args: []string{"-q", "-members", "1"}, Code: 2, Want: "members = 1, want 2..64"},
		{Args: []string{"-q", "-messages", "0"}, Code: 2, Want: "messages = 0"},
		{Args: []string{"-q", "-messages", "999999999999"}, Code: 2, Want: "messages = 999999999999, want at most"},
		{Args: []string{"-q", "-min-size", "99999"}, Code: 2, Want: "min-size = 99999, want at most 1436"},
		{Args: []string{"-q", "-mtu", "0"}, Code: 2, Want: "mtu = 0, want 576..65535"},
		{Args: []string{"-q", "-mtu", "70000"}, Code: 2, Want: "mtu = 70000"},
		{Args: []string{"-q", "-loss", "2"}, Code: 2, Want: "loss = 2, want a probability 0..1", NoStdout: true},
		{Args: []string{"-loss", "-0.1"}, Code: 2, Want: "loss = -0.1, want a probability 0..1", NoStdout: true},
		{Args: []string{"-dup", "1.5"}, Code: 2, Want: "dup = 1.5, want a probability 0..1", NoStdout: true},
		{Args: []string{"-reorder", "NaN"}, Code: 2, Want: "reorder = NaN, want a probability 0..1", NoStdout: true},
		{Args: []string{"-corrupt", "7"}, Code: 2, Want: "corrupt = 7, want a probability 0..1", NoStdout: true},
		{Args: []string{"-jitter", "-1ms"}, Code: 2, Want: "jitter = -1ms, want >= 0", NoStdout: true},
		{Args: []string{"-members", "-1"}, Code: 2, Want: "members = -1, want 2..64", NoStdout: true},
		{Args: []string{"-raw", "-loss", "2"}, Code: 2, Want: "loss = 2, want a probability 0..1", NoStdout: true},
		{Args: []string{"-raw", "-members", "1"}, Code: 2, Want: "members = 1, want 2..1000", NoStdout: true},
		{Args: []string{"-q", "-jitter", "5"}, Code: 2, Want: `invalid value "5" for flag -jitter`},
		{Args: []string{"-q", "-burst-member", "99"}, Code: 2, Want: "burst-member = 99, want -1 (none) or 0..7"},
		{Args: []string{"-q", "-slow-member", "-7"}, Code: 2, Want: "slow-member = -7"},
		{Args: []string{"-q", "-members", "3", "-burst-member", "3"}, Code: 2, Want: "burst-member = 3, want -1 (none) or 0..2"},
		{Args: []string{"-q", "-slow-every", "-1s"}, Code: 2, Want: "slow-every = -1s"},
		{Args: []string{"-q", "-mode", ""}, Code: 2, Want: `-mode "": want pbp2 or pbp1`},
		{Args: []string{"-raw", "-q", "-frames", "99999999999"}, Code: 2, Want: "frames = 99999999999, want at most"},
		{Args: []string{"-raw", "-q", "-batch", "99999999"}, Code: 2, Want: "batch = 99999999, want 1..1024"},
		{Args: []string{"-raw", "-q", "-mtu", "0"}, Code: 2, Want: "mtu = 0, want 576..65535"},
		{Args: []string{"-raw", "-q", "-members", "1000", "-frames", "1"}, Code: 2, Want: "MTU 1500 with 1000 members leaves no room for a payload"},
		{Args: []string{"-raw", "-q", "-slow-member", "8"}, Code: 2, Want: "slow-member = 8, want -1 (none) or 0..7"},
		{Args: []string{"-raw", "-q", "-interval", "0s"}, Code: 2, Want: "interval = 0s"},
	})
}
