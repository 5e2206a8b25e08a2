package filestore

import "fmt"

// refusalError is a refusal of a file at its offer, in the daemon's
// words (the file and the reason): its text is that alone, and it is
// (errors.Is) the sentinel it stands for (files.ErrBadName,
// files.ErrNoSpace, …), whose own text, a Go package's, it does not
// repeat. The core refuses the offer and tells the sender by the
// sentinel; users read the text (rbcastd's log, and a sendfile that
// the sending daemon refused for a bad name).
type refusalError struct {
	text string
	is   error
}

func (e *refusalError) Error() string { return e.text }
func (e *refusalError) Unwrap() error { return e.is }

// refusal is a refusalError of sentinel is, its text from format.
func refusal(is error, format string, args ...any) error {
	return &refusalError{text: fmt.Sprintf(format, args...), is: is}
}
