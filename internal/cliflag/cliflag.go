// Package cliflag holds what the commands share in reading their command
// lines.
package cliflag

import "strings"

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

// Named is err's message starting with the command's name, once: a
// message that starts with it already ("jacobi: joining ...", "jacobi on
// the simulator: ...") is not prefixed again.
func Named(name string, err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, name+":") || strings.HasPrefix(msg, name+" ") {
		return msg
	}
	return name + ": " + msg
}
