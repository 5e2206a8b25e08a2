package main

import (
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

// A bad command line fails at once with the reason; send names a missing
// FILE before it waits for receivers.
func TestOddInputs(t *testing.T) {
	dir := t.TempDir()
	clitest.Runner{Dir: dir}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: tcpfan send"},
		{Args: nil, Code: 2, Want: "usage: tcpfan send"},
		{Args: []string{"frob"}, Code: 1, Want: `unknown mode "frob": want send or recv`},
		{Args: []string{"send"}, Code: 1, Want: "send: want -n N (at least 1) and one FILE"},
		{Args: []string{"send", "-n", "0", "x"}, Code: 1, Want: "want -n N (at least 1)"},
		{Args: []string{"send", "-n", "1", "-addr", "127.0.0.1:0", "missing"}, Code: 1, Want: "send: open missing: no such file or directory"},
		{Args: []string{"send", "-n", "1", "-addr", "127.0.0.1:0", dir}, Code: 1, Want: "is a directory, want a file"},
		{Args: []string{"send", "-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"recv"}, Code: 1, Want: "recv: want -addr HOST:PORT and -o OUT"},
		{Args: []string{"recv", "-addr", "127.0.0.1:1", "-o", "out", "extra"}, Code: 1, Want: `recv: unexpected argument "extra"`},
	})
}
