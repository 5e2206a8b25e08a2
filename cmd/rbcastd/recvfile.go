package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
)

const recvfileText = `Stores the files members send (rbcastd sendfile) under DIR while it
runs, and prints each one as it completes: its hash as ALG:HEX (the
sender's -hash: blake3:... or sha256:...) and its name. Without the
prefix the line is what b3sum (or sha256sum) prints, so the lines saved
in FILE are checked by 'sed -n s/^blake3://p FILE | (cd DIR && b3sum -c)'.

A file is written to a partial copy under DIR/.rbcast-partial, with a
hash of each block beside it, and stored under its name only once its
hash matches the sender's (fsynced, then renamed): never a partial file
under the real name. A daemon restarted mid-file resumes from the blocks
its partial copy holds. Files that arrive while several recvfile clients
run are stored in the oldest one's DIR; with none, in the daemon's
-inbox, if it has one.

The daemon writes DIR itself: run recvfile as the daemon's user or root.
With -count N it exits 0 once N files are stored. A file given up (the
sender crashed or closed it; a hash that never matched) is reported on
stderr.
`

func recvfileCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("recvfile", "[-socket PATH] -dir DIR [-count N]", recvfileText, stderr)
	sf.add(fs)
	dir := fs.String("dir", "", "`directory` to store the files in (required)")
	count := fs.Int("count", 0, "exit once this many files are stored (0: run until interrupted)")
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageErr(stderr, "recvfile", "unexpected argument %q", fs.Arg(0))
	case *dir == "":
		return usageErr(stderr, "recvfile", "-dir DIR is required")
	case *count < 0:
		return usageErr(stderr, "recvfile", "-count is %d, want 0 or more", *count)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return fail(stderr, "recvfile", err)
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil:
		return fail(stderr, "recvfile", fmt.Errorf("-dir %s: %w", *dir, unwrapPath(err)))
	case !st.IsDir():
		return fail(stderr, "recvfile", fmt.Errorf("-dir %s: not a directory", *dir))
	}
	c, err := dial(&sf)
	if err != nil {
		return fail(stderr, "recvfile", err)
	}
	defer c.Close()
	if _, err := c.Hello(localapi.HelloWaitReady); err != nil {
		return fail(stderr, "recvfile", err)
	}
	if err := c.Write(&localapi.ReceiveFiles{Dir: abs}); err != nil {
		return fail(stderr, "recvfile", err)
	}
	m, err := c.Read()
	if err != nil {
		var le *localapi.Error
		if errors.As(err, &le) {
			return fail(stderr, "recvfile", errors.New(le.Text))
		}
		return fail(stderr, "recvfile", err)
	}
	if _, ok := m.(*localapi.ReceivingFiles); !ok {
		return fail(stderr, "recvfile", fmt.Errorf("the daemon answered ReceiveFiles with %v", m.Type()))
	}
	stored := 0
	for *count == 0 || stored < *count {
		m, err := c.Read()
		if err != nil {
			return fail(stderr, "recvfile", fmt.Errorf("after %d files: %w", stored, err))
		}
		r, ok := m.(*localapi.FileReport)
		if !ok {
			continue
		}
		if r.Kind == localapi.FileIncomplete {
			fmt.Fprintf(stderr, "rbcastd recvfile: %s from member %d (file %d, %d bytes) given up: %v; nothing stored under its name\n",
				r.Name, r.Sender, r.ID, r.Size, reliable.FileCauseText(r.Cause))
			continue
		}
		alg := frame.FileHashSHA256
		if r.HashAlg != 0 {
			alg = frame.FileHashAlg(r.HashAlg)
		}
		fmt.Fprintf(stdout, "%s  %s\n", reliable.FormatFileHash(alg, r.Hash), r.Name)
		stored++
	}
	return exitOK
}
