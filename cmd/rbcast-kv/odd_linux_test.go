package main

import (
	"testing"

	"github.com/rbcast/rbcast/internal/clitest"
)

// Odd command lines end with exit 2 and a line naming what was wrong,
// before any request is sent or socket opened; none spins, hangs or runs
// out of memory. (No replica listens at 127.0.0.1:1.)
func TestOddInputs(t *testing.T) {
	srv := []string{"-servers", "127.0.0.1:1"}
	with := func(args ...string) []string { return append(append([]string(nil), srv...), args...) }
	serve := func(args ...string) []string {
		return append([]string{"serve", "-i", "rbuxnosuch0", "-group", "1", "-members", "1", "-listen", "127.0.0.1:0"}, args...)
	}
	clitest.Runner{Env: mainEnv}.Run(t, []clitest.Case{
		{Args: []string{"-h"}, OK: true, Want: "usage: rbcast-kv -servers"},
		{Args: []string{"serve", "-h"}, OK: true, Want: "usage: rbcast-kv serve -i IFACE"},
		{Args: with("load", "-h"), OK: true, Want: "-size"},
		{Args: nil, Code: 2, Want: "rbcast-kv: want a command: get, put, del, cas, load, verify, history or serve"},
		{Args: []string{"get", "k"}, Code: 2, Want: "-servers ADDR:PORT,... is required"},
		{Args: []string{"-servers", "", "get", "k"}, Code: 2, Want: "-servers ADDR:PORT,... is required"},
		{Args: []string{"-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: []string{"-servers", "x", "get", "k"}, Code: 2, Want: `server "x": address x: missing port in address`},
		{Args: []string{"-servers", "127.0.0.1:99999", "get", "k"}, Code: 2, Want: "invalid port"},
		{Args: with("frob"), Code: 2, Want: `unknown command "frob"`},
		// Help and unknown commands need no -servers (they were refused
		// for the lack of it).
		{Args: []string{"frob"}, Code: 2, Want: `unknown command "frob"`},
		{Args: []string{"help"}, OK: true, Want: "usage: rbcast-kv -servers"},
		{Args: []string{"help", "serve"}, OK: true, Want: "usage: rbcast-kv serve -i IFACE"},
		{Args: []string{"help", "load"}, OK: true, Want: "usage: rbcast-kv -servers ADDR:PORT,... load -n N"},
		{Args: []string{"help", "frob"}, Code: 2, Want: `unknown command "frob"`},
		{Args: []string{"load", "-h"}, OK: true, Want: "-size"},
		{Args: []string{"verify", "-h"}, OK: true, Want: "usage: rbcast-kv -servers ADDR:PORT,... verify -n N"},
		{Args: []string{"history", "-help"}, OK: true, Want: "usage: rbcast-kv -servers ADDR:PORT,... history -n N"},
		{Args: with("get"), Code: 2, Want: "get takes 1 arguments, got 0"},
		{Args: with("cas", "k", "a"), Code: 2, Want: "cas takes 3 arguments, got 2"},
		{Args: with("-timeout", "0", "get", "k"), Code: 2, Want: "-timeout is 0s, want > 0"},
		{Args: with("-timeout", "-1s", "get", "k"), Code: 2, Want: "-timeout is -1s, want > 0"},
		{Args: with("-timeout", "5", "get", "k"), Code: 2, Want: `invalid value "5" for flag -timeout`},
		{Args: with("-deadline", "0", "get", "k"), Code: 2, Want: "-deadline is 0s, want > 0"},
		{Args: with("load", "-n", "1", "-size", "999999999999"), Code: 2, Want: "-size 999999999999: want at most 65000"},
		{Args: with("load", "-c", "0"), Code: 2, Want: "want -c at least 1"},
		{Args: with("verify", "-n", "-1"), Code: 2, Want: "-n not negative"},
		{Args: with("history", "-keys", "0"), Code: 2, Want: "-keys at least 1"},
		{Args: []string{"serve"}, Code: 2, Want: "-i IFACE is required"},
		{Args: []string{"serve", "-bogus"}, Code: 2, Want: "flag provided but not defined: -bogus"},
		{Args: serve("extra"), Code: 2, Want: `unexpected argument "extra"`},
		{Args: serve("-node", "99999"), Code: 2, Want: "-node is 99999, want a member id 0..65534"},
		{Args: serve("-failure-timeout", "-1s"), Code: 2, Want: "-failure-timeout is -1s"},
		{Args: serve("-listen", "x"), Code: 2, Want: "-listen x: listen udp: address x: missing port"},
		{Args: serve(), Code: 2, Want: `interface "rbuxnosuch0": no such network interface`},
	})
}
