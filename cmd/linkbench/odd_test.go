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
		{Args: []string{"-h"}, OK: true, Want: "usage: linkbench [flags]"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"extra"}, Code: 2, Want: `linkbench: unexpected argument "extra"`},
		{Args: []string{"-hosts", "1"}, Code: 2, Want: "-hosts: 1 is not a number of hosts in 2..250"},
		{Args: []string{"-hosts", "100000"}, Code: 2, Want: "-hosts: 100000 is not a number of hosts in 2..250"},
		{Args: []string{"-hosts", "x"}, Code: 2, Want: `-hosts: "x" is not a positive integer`},
		{Args: []string{"-hosts", ""}, Code: 2, Want: `-hosts: no numbers in ""`},
		{Args: []string{"-mtu", "0"}, Code: 2, Want: `-mtu: "0" is not a positive integer`},
		{Args: []string{"-mtu", "100"}, Code: 2, Want: "-mtu: 100 is not an MTU in 576..65535"},
		{Args: []string{"-mtu", "70000"}, Code: 2, Want: "-mtu: 70000 is not an MTU"},
		{Args: []string{"-backends", "ring-v9"}, Code: 2, Want: `-backends: unknown backend "ring-v9"`},
		{Args: []string{"-backends", ""}, Code: 2, Want: `-backends: unknown backend ""`},
		{Args: []string{"-sender", "bogus"}, Code: 2, Want: `-sender: unknown backend "bogus"`},
		{Args: []string{"-duration", "0s"}, Code: 2, Want: "-duration 0s: want > 0"},
		{Args: []string{"-duration", "5"}, Code: 2, Want: `invalid value "5" for flag -duration`},
		{Args: []string{"-reps", "0"}, Code: 2, Want: "-reps 0: want at least 1"},
		{Args: []string{"-batch", "0"}, Code: 2, Want: "-batch 0: want 1..4096"},
		{Args: []string{"-batch", "99999999"}, Code: 2, Want: "-batch 99999999: want 1..4096"},
		{Args: []string{"-latency", "-1"}, Code: 2, Want: "-latency -1"},
		{Args: []string{"-no-throughput", "-latency", "0"}, Code: 2, Want: "leave nothing to measure"},
		{Args: []string{"-spin", "-1s"}, Code: 2, Want: "-spin -1s: want 0 (never) up to 1s"},
	})
}
