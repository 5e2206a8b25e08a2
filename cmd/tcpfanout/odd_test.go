//go:build linux

package main

import (
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// Every bad flag is refused with exit 2 before the root check and before
// any namespace exists, so these run without root (and build nothing
// with it).
func TestOddInputs(t *testing.T) {
	clitest.Runner{}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: tcpfanout [flags]"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"extra"}, Code: 2, Want: `tcpfanout: unexpected argument "extra"`},
		{Args: []string{"-hosts", "1"}, Code: 2, Want: "-hosts: 1 is not a number of hosts in 2..250"},
		{Args: []string{"-hosts", "100000"}, Code: 2, Want: "-hosts: 100000 is not a number of hosts in 2..250"},
		{Args: []string{"-hosts", ""}, Code: 2, Want: `-hosts: no numbers in ""`},
		{Args: []string{"-mtu", "100"}, Code: 2, Want: "-mtu: 100 is not an MTU in 576..65535"},
		{Args: []string{"-mtu", "-1500"}, Code: 2, Want: `-mtu: "-1500" is not a positive integer`},
		{Args: []string{"-duration", "0s"}, Code: 2, Want: "-duration 0s: want > 0"},
		{Args: []string{"-duration", "-1s"}, Code: 2, Want: "-duration -1s: want > 0"},
		{Args: []string{"-reps", "0"}, Code: 2, Want: "-reps 0: want at least 1"},
		{Args: []string{"-lag", "0"}, Code: 2, Want: "-lag 0: want at least 1 byte"},
		{Args: []string{"-loss", "-1"}, Code: 2, Want: "-loss -1: want a percentage in [0, 100)"},
		{Args: []string{"-loss", "100"}, Code: 2, Want: "-loss 100"},
		{Args: []string{"-loss", "NaN"}, Code: 2, Want: "-loss NaN"},
	})
}
