package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/internal/localapi"
)

const rekeyText = `Rotates an authenticated group's key without a restart (knet's two key
slots; docs/auth.md, "Rotation"), one step at a time, on one daemon,
for its group and its files alike:

  install FILE              accept frames under the key in FILE too
  activate FILE|FINGERPRINT send under that (installed) key from now on
  retire                    stop accepting the key not sent under

Run each step on every member before the next step on any: install
everywhere, then activate everywhere, then retire everywhere; no frame is
lost. The daemon reads FILE itself (the key never crosses the socket);
only root or the daemon's user may rotate. Prints the key status after
the step. Start later runs with -key-file of the new key.
`

func rekeyCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf socketFlags
	fs := newFlags("rekey", "[-socket PATH] install FILE | activate FILE|FINGERPRINT | retire", rekeyText, stderr)
	sf.add(fs)
	if done, code := parse(fs, args, stdout); done {
		return code
	}
	var m localapi.Rekey
	abs := func(p string) (string, error) { return filepath.Abs(p) }
	switch step := fs.Arg(0); {
	case fs.NArg() == 0:
		return usageErr(stderr, "rekey", "want a step: install FILE, activate FILE|FINGERPRINT or retire")
	case step == "install" && fs.NArg() == 2:
		p, err := abs(fs.Arg(1))
		if err != nil {
			return usageErr(stderr, "rekey", "key file %q: %v", fs.Arg(1), err)
		}
		m = localapi.Rekey{Step: localapi.RekeyInstall, Path: p}
	case step == "activate" && fs.NArg() == 2:
		m.Step = localapi.RekeyActivate
		a := fs.Arg(1)
		if fp, err := strconv.ParseUint(a, 16, 64); err == nil && len(a) == 16 && fp != 0 {
			m.Fingerprint = fp
		} else if m.Path, err = abs(a); err != nil {
			return usageErr(stderr, "rekey", "key file %q: %v", a, err)
		}
	case step == "retire" && fs.NArg() == 1:
		m.Step = localapi.RekeyRetire
	case step == "install" || step == "activate" || step == "retire":
		return usageErr(stderr, "rekey", "%s takes %s", step, map[string]string{"install": "one key FILE", "activate": "one key FILE or a 16-digit FINGERPRINT", "retire": "no argument"}[step])
	default:
		return usageErr(stderr, "rekey", "unknown step %q: want install, activate or retire", step)
	}
	st, err := rekey(&sf, &m)
	if err != nil {
		return fail(stderr, "rekey", err)
	}
	a := st.Auth
	fmt.Fprintf(stdout, "key %s (id %d) active, accepting %v\n", a.Active, a.ActiveID, a.Accepted)
	if st.Files != nil && st.Files.Auth != nil {
		fa := st.Files.Auth
		fmt.Fprintf(stdout, "files' link: key %s (id %d) active, accepting %v\n", fa.Active, fa.ActiveID, fa.Accepted)
	}
	for _, c := range a.Changes {
		fmt.Fprintf(stdout, "  key %s %s at %s\n", c.Key, c.Step, c.At)
	}
	return exitOK
}

// rekey sends m and returns the daemon's status after it (with its
// Auth).
func rekey(sf *socketFlags, m *localapi.Rekey) (*daemon.Status, error) {
	c, err := dial(sf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Hello(0); err != nil {
		return nil, err
	}
	if err := c.Write(m); err != nil {
		return nil, err
	}
	r, err := c.Read()
	if err != nil {
		return nil, err
	}
	sj, ok := r.(*localapi.StatusJSON)
	if !ok {
		return nil, fmt.Errorf("the daemon answered Rekey with %v", r.Type())
	}
	var st daemon.Status
	if err := json.Unmarshal(sj.JSON, &st); err != nil {
		return nil, fmt.Errorf("the daemon's status: %w", err)
	}
	if st.Auth == nil {
		return nil, fmt.Errorf("the daemon's status after the step shows no authentication")
	}
	return &st, nil
}
