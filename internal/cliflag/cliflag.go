// Package cliflag holds what the commands share in reading their command
// lines.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// HelpAsked reports whether a command line asks for the usage (-h, -help,
// --help) before a "--": the commands then print it to stdout, where
// flag.FlagSet's default is stderr.
func HelpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// Parse parses args into fs, the usage going to stdout when the command
// line asks for it (HelpAsked) and to fs's output otherwise. When ok is
// false the command exits with code: 0 after the usage was asked for, 2
// for a bad command line (which fs has said what was wrong with).
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	if HelpAsked(args) {
		fs.SetOutput(stdout)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// Bounds are int flags and the values each may take, checked together
// once the command line is parsed (Check): a size that is negative, or
// past what memory holds, is refused before any work, not left to panic a
// make or run memory out.
type Bounds []bound

type bound struct {
	name   string
	v      *int
	lo, hi int
	why    string
}

// Add bounds the flag -name, read into v, to lo..hi; why says what
// limits it, for the error.
func (b *Bounds) Add(name string, v *int, lo, hi int, why string) {
	*b = append(*b, bound{name, v, lo, hi, why})
}

// Check returns an error naming the first flag out of its range.
func (b Bounds) Check() error {
	for _, x := range b {
		if *x.v < x.lo || *x.v > x.hi {
			return fmt.Errorf("-%s is %d, want %d..%d (%s)", x.name, *x.v, x.lo, x.hi, x.why)
		}
	}
	return nil
}
