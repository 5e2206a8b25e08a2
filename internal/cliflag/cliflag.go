// Package cliflag holds what the commands share in reading their command
// lines.
package cliflag

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
