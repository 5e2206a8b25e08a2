package main

import (
	"io"

	"github.com/rbcast/rbcast/link/auth"
)

const keygenText = `Writes a new group key to FILE: 32 random bytes as 64 hexadecimal
digits, readable by its owner only. Copy it to every host of the group
(over a channel you trust) and start each daemon with -key-file FILE:
every frame is then authenticated, replays are refused, and with
-encrypt every payload is encrypted (docs/auth.md). It refuses to
overwrite a file. It prints the key's fingerprint, which status shows.
`

func keygenCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("keygen", "FILE", keygenText, stderr)
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		return usageErr(stderr, "keygen", "want one FILE to write the key to")
	}
	k, err := auth.Generate(fs.Arg(0), nil)
	if err != nil {
		return fail(stderr, "keygen", err)
	}
	io.WriteString(stdout, "key "+k.String()+" written to "+fs.Arg(0)+"\n")
	return exitOK
}
