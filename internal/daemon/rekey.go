package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
)

// KeyChange is one step of a key rotation this daemon took (rbcastd
// rekey), as Status lists it.
type KeyChange struct {
	Step string `json:"step"` // installed, activated, retired
	Key  string `json:"key"`  // the fingerprint of the key installed, activated or retired
	At   string `json:"at"`
}

// maxKeyChanges is how many key changes Status lists.
const maxKeyChanges = 8

// rekey takes one step of a key rotation (docs/auth.md, "Rotation"):
// only for a client of the daemon's user or root, and only on an
// authenticated group. It answers the status after the step.
func (c *conn) rekey(m *localapi.Rekey) bool {
	if err := c.mayOwner("rotate keys"); err != nil {
		c.fail(localapi.CodeRefused, false, "%v", err)
		return false
	}
	g, err := c.d.started(c.ctx)
	if err != nil {
		c.noGroup(err)
		return false
	}
	if g.Auth() == nil {
		c.fail(localapi.CodeRefused, false, "this daemon's group is not authenticated (it runs without -key-file): there is no key to rotate")
		return false
	}
	change, err := c.d.rekeyStep(g, m)
	if errors.Is(err, errRejoined) {
		c.fail(localapi.CodeRejoining, false, "%v", err)
		return false
	}
	if err != nil {
		c.fail(localapi.CodeRefused, false, "%v", err)
		return false
	}
	c.d.log.Info("rbcastd: key rotation", "step", change.Step, "key", change.Key)
	b, err := json.Marshal(c.d.Status())
	if err != nil {
		c.fail(localapi.CodeUnexpected, false, "encoding the status: %v", err)
		return false
	}
	return c.write(&localapi.StatusJSON{JSON: b}) == nil
}

// errRejoined refuses a rekey step of a membership that ended before the
// step was taken: the next one starts from the keys of the last.
var errRejoined = errors.New("the group went on without this daemon before the step was taken, and it is joining again; step not taken, ask again")

func (d *Daemon) rekeyStep(g *reliable.Group, m *localapi.Rekey) (KeyChange, error) {
	d.rekeyMu.Lock()
	defer d.rekeyMu.Unlock()
	if d.g.Load() != g {
		return KeyChange{}, errRejoined
	}
	a := g.Auth()
	load := func() (*auth.Key, error) {
		if !filepath.IsAbs(m.Path) {
			return nil, fmt.Errorf("key file path %q is not absolute", m.Path)
		}
		return auth.Load(m.Path)
	}
	var ch KeyChange
	switch m.Step {
	case localapi.RekeyInstall:
		k, err := load()
		if err != nil {
			return ch, err
		}
		st := a.Auth()
		if len(st.Accepted) == 2 && k.Fingerprint() != st.Accepted[0] && k.Fingerprint() != st.Accepted[1] {
			return ch, fmt.Errorf("two keys are accepted already (%016x, %016x): retire one before installing %s", st.Accepted[0], st.Accepted[1], k)
		}
		if err := a.Install(k); err != nil {
			return ch, err
		}
		d.keys[k.Fingerprint()] = k
		if err := d.files.rekey(m.Step, k, 0); err != nil {
			return ch, err
		}
		ch = KeyChange{Step: "installed", Key: k.String()}
	case localapi.RekeyActivate:
		fp := m.Fingerprint
		if m.Path != "" {
			k, err := load()
			if err != nil {
				return ch, err
			}
			fp = k.Fingerprint()
		}
		if err := a.Activate(fp); err != nil {
			return ch, err
		}
		if err := d.files.rekey(m.Step, nil, fp); err != nil {
			return ch, err
		}
		ch = KeyChange{Step: "activated", Key: fmt.Sprintf("%016x", fp)}
	case localapi.RekeyRetire:
		st := a.Auth()
		if len(st.Accepted) < 2 {
			return ch, fmt.Errorf("nothing to retire: only key %016x is accepted", st.Active)
		}
		old := st.Accepted[0]
		if old == st.Active {
			old = st.Accepted[1]
		}
		a.Retire()
		d.files.rekey(m.Step, nil, 0)
		ch = KeyChange{Step: "retired", Key: fmt.Sprintf("%016x", old)}
	default:
		return ch, fmt.Errorf("unknown step %d", m.Step)
	}
	if d.cfg.KeysChanged != nil {
		st := a.Auth()
		keys := []*auth.Key{d.keys[st.Active]}
		for _, fp := range st.Accepted {
			if fp != st.Active {
				keys = append(keys, d.keys[fp])
			}
		}
		if err := d.cfg.KeysChanged(keys...); err != nil {
			d.log.Error("rbcastd: the keys after a rotation step were not handed on", "step", ch.Step, "err", err)
		}
	}
	ch.At = time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	d.keyChanges = append(d.keyChanges, ch)
	if len(d.keyChanges) > maxKeyChanges {
		d.keyChanges = d.keyChanges[len(d.keyChanges)-maxKeyChanges:]
	}
	return ch, nil
}

// mayOwner admits a client of the daemon's own user, or root, to do what
// the socket's mode (which lets a group of users send) is not enough for:
// rotate keys (a key decides who may speak for the group), or send and
// receive files (the daemon opens and writes the paths with its own
// rights). The refusal names what, the daemon's uid and the client's.
func (c *conn) mayOwner(what string) error {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("the client's credentials: %w", cerr)
	}
	if self := uint32(os.Geteuid()); cred.Uid != 0 && cred.Uid != self {
		return fmt.Errorf("only root or the daemon's user (uid %d) may %s; the client runs as uid %d", self, what, cred.Uid)
	}
	return nil
}
