package replay

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/auth"
)

// AuthOptions configure Authenticate.
type AuthOptions struct {
	// Keys are the group keys frames are verified with: one, or two
	// across a rotation.
	Keys []*auth.Key
	// EtherType of rbcast frames; 0 means frame.EtherType.
	EtherType uint16
}

// AuthDrop is a frame Authenticate removed, and why.
type AuthDrop struct {
	N      int // its frame number
	Iface  int
	Reason string // the auth.DropError's text, without its prefix
}

// AuthResult is what Authenticate did.
type AuthResult struct {
	Verified int
	Dropped  []AuthDrop
}

// Authenticate does to c what an authenticated member's link does to what
// it receives (link/auth), before check or simulate look at it: every
// rbcast frame is verified with auth.Verifier.Check, per capture
// interface (each is one station's receive stream, with its own replay
// windows) and per group; a frame that does not verify, or verified
// before, is removed from c.Records (frame numbers stay as in the file);
// an encrypted body is decrypted in place. Frames that are not rbcast
// frames stay, as the link lets them through to the stepper. The
// algorithm (authenticated, or encrypted too) is each frame's own.
func Authenticate(c *Capture, opts AuthOptions) (AuthResult, error) {
	var res AuthResult
	if len(opts.Keys) == 0 || len(opts.Keys) > 2 {
		return res, fmt.Errorf("authenticate: %d keys given, want one, or two across a rotation", len(opts.Keys))
	}
	if opts.EtherType == 0 {
		opts.EtherType = frame.EtherType
	}
	type station struct {
		iface   int
		group   uint32
		encrypt bool
	}
	verifiers := map[station]*auth.Verifier{}
	kept := c.Records[:0]
	for _, r := range c.Records {
		// The read decoded r as a whole (r.View); a frame with an
		// encrypted body only parses sealed.
		var f frame.View
		if _, b, err := frame.SplitEthernet(r.Data, opts.EtherType); err == nil {
			f, _ = frame.ParseSealed(b)
		}
		if f == nil {
			kept = append(kept, r)
			continue
		}
		alg, _, _ := f.Auth()
		st := station{iface: r.Iface, group: f.Group(), encrypt: alg == auth.AlgGCM}
		v := verifiers[st]
		if v == nil {
			var err error
			v, err = auth.NewVerifier(auth.Config{Group: st.group, EtherType: opts.EtherType, Key: opts.Keys[0], Encrypt: st.encrypt})
			if err != nil {
				return res, err
			}
			for _, k := range opts.Keys[1:] {
				if err := v.Accept(k); err != nil {
					return res, err
				}
			}
			verifiers[st] = v
		}
		if err := v.Check(r.Data); err != nil {
			var de *auth.DropError
			if !errors.As(err, &de) {
				return res, err
			}
			res.Dropped = append(res.Dropped, AuthDrop{N: r.N, Iface: r.Iface, Reason: strings.TrimPrefix(err.Error(), "auth: frame dropped: ")})
			continue
		}
		res.Verified++
		if st.encrypt { // the body is plaintext now: decode it whole
			r.View, r.Err = nil, nil
			r.decode(opts.EtherType)
		}
		kept = append(kept, r)
	}
	clear(c.Records[len(kept):])
	c.Records = kept
	return res, nil
}

// Mismatch says why no frame verified, for a result with none verified:
// when every frame names a key id of neither slot or fails its tag, the
// key given is not the one the frames were sealed with.
func (a AuthResult) Mismatch() string {
	for _, d := range a.Dropped {
		if d.Reason != reasonUnknownKey && d.Reason != reasonBadTag {
			return "see the reasons above"
		}
	}
	return "a key mismatch (the frames were sealed with another key than -key-file's)"
}

// The auth.DropError texts Mismatch looks for (link/auth, verify.go).
const (
	reasonUnknownKey = "a key id of neither key slot"
	reasonBadTag     = "the tag does not verify"
)

// Write prints a line of counts and, per reason, the first frames
// dropped for it.
func (a AuthResult) Write(w io.Writer) error {
	byReason := map[string][]int{}
	for _, d := range a.Dropped {
		byReason[d.Reason] = append(byReason[d.Reason], d.N)
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	ew := &errWriter{w: w}
	ew.printf("auth: %d frames verified, %d dropped before any core (as a member's link drops them)\n", a.Verified, len(a.Dropped))
	for _, r := range reasons {
		ns := byReason[r]
		show := ns[:min(len(ns), 10)]
		more := ""
		if len(ns) > len(show) {
			more = fmt.Sprintf(" and %d more", len(ns)-len(show))
		}
		ew.printf("  %d dropped: %s (frames %s%s)\n", len(ns), r, strings.Trim(fmt.Sprint(show), "[]"), more)
	}
	return ew.err
}
