// Command rbcastd is the rbcast daemon and its command-line clients.
//
//	rbcastd run -i IFACE -group G [-members N] [-node ID] [-order fifo|total]
//	        [-socket PATH] [-capture FILE] [-metrics ADDR] [-config FILE]
//	rbcastd send [-socket PATH] [-lines] [-level LEVEL] [FILE|-]
//	rbcastd recv [-socket PATH] (-from ID | -all) [-bytes N | -count N]
//	        [-format raw|lines] [-o FILE] [-nap D]
//	rbcastd status [-socket PATH] [-json] [-wait-ready DURATION]
//	rbcastd sendfile [-socket PATH] [-to IDS] [-hash blake3|sha256] FILE...
//	rbcastd recvfile [-socket PATH] -dir DIR [-count N]
//	rbcastd bench [-socket PATH] [-size BYTES] [-duration D | -echo | -ping ID [-count N]] [-json]
//	rbcastd keygen FILE
//	rbcastd rekey [-socket PATH] install FILE | activate FILE|FINGERPRINT | retire
//	rbcastd help [COMMAND]
//
// 'rbcastd COMMAND -h' lists a command's flags with their defaults.
//
// `run` joins a group on an interface and serves local programs on a Unix
// SOCK_SEQPACKET socket (docs/local-api.md); the other commands are
// clients of that socket. See README.md ("rbcastd").
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbcast/rbcast/internal/hops"
)

func main() {
	mainAt = time.Now()
	clientProcs(os.Args[1:], os.Getenv("GOMAXPROCS"))
	stop := profile(os.Getenv("RBCASTD_CPUPROFILE"), os.Getenv("RBCASTD_TRACE"), os.Stderr)
	code := rbcastd(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	hops.Dump()
	os.Exit(code)
}

// mainAt is when main began; run logs it, with the time the process
// spent before it, so that a join's latency can be read from the
// process's start (docs/membership.md, "Joining fast").
var mainAt time.Time

// sinceStart is how long the process had run at t, read from t's
// monotonic clock reading: Go counts it from when its time package
// initialised, early in the runtime's start after exec (Time.String's
// "m=+"), so it leaves out only the runtime's first steps. It is 0 when
// t carries no reading.
func sinceStart(t time.Time) time.Duration {
	_, m, ok := strings.Cut(t.String(), " m=+")
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(m + "s")
	if err != nil {
		return 0
	}
	return d
}

// onePClients are the clients that run on one Go P: their connection's
// reads and their own loop hand off to each other as the daemon's
// goroutines do (docs/local-api-history.md, "One P per daemon, the default", has
// the measurements).
var onePClients = map[string]bool{"bench": true, "send": true, "recv": true}

// onePNote ends the help of onePClients' commands.
const onePNote = "\nRuns on one Go P (GOMAXPROCS=1), as the daemon does by default, unless\nGOMAXPROCS is set in the environment.\n"

// clientProcs sets one P for the commands of onePClients unless the
// environment has GOMAXPROCS, and reports whether it did. (run has
// -procs.)
func clientProcs(args []string, env string) bool {
	if env != "" || len(args) == 0 || !onePClients[args[0]] {
		return false
	}
	runtime.GOMAXPROCS(1)
	return true
}

// profile writes a CPU profile to cpu (RBCASTD_CPUPROFILE, for `go tool
// pprof`) and an execution trace to exec (RBCASTD_TRACE, for `go tool
// trace`) until the returned stop; docs/local-api.md, "Measuring the data
// path". Empty paths profile nothing. A "%p" in a path is the process's
// id, so that the daemons and clients of one run, started with the same
// environment, each write their own.
func profile(cpu, exec string, stderr io.Writer) (stop func()) {
	pid := strconv.Itoa(os.Getpid())
	cpu, exec = strings.ReplaceAll(cpu, "%p", pid), strings.ReplaceAll(exec, "%p", pid)
	var stops []func()
	if cpu != "" {
		f, err := os.Create(cpu)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "rbcastd: RBCASTD_CPUPROFILE: %v\n", err)
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if exec != "" {
		f, err := os.Create(exec)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "rbcastd: RBCASTD_TRACE: %v\n", err)
		} else {
			stops = append(stops, func() { trace.Stop(); f.Close() })
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

const usage = `usage: rbcastd <command> [flags]

rbcastd joins a reliable broadcast group on an Ethernet segment and lets
unprivileged local programs use it through a Unix socket.

commands:
  run      join group G on an interface and serve local clients (needs
           CAP_NET_RAW, dropped once the link is open)
  send     broadcast a file or stdin through the daemon; exit 0 only once
           every message is acknowledged by (-order total: held by) every
           live member
  recv     write what the group delivers (one member's bytes, or all
           members' messages as lines)
  sendfile send files (and directories) to every member; exit 0 only
           once every receiver holds every file with the right hash
  recvfile store the files members send in a directory, printing each
  status   members and their state, order, rates, repairs, drops
  bench    measure goodput through a running daemon
  keygen   write a new group key file (run -key-file: authenticated groups)
  rekey    rotate the group key of a running daemon (install, activate, retire)

Run 'rbcastd <command> -h' (or 'rbcastd help <command>') for a command's
flags.
run takes one Go P by default (-procs), and bench, send and recv run on
one; GOMAXPROCS in the environment wins.
Exit status: 0 success, 1 failure, 2 usage error.
`

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

type command struct {
	run func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"run":    {runCmd},
	"send":   {sendCmd},
	"recv":   {recvCmd},
	"status": {statusCmd},
	"bench":  {benchCmd},
	"keygen": {keygenCmd},
	"rekey":  {rekeyCmd},
	// Files (issue 20): sendfile.go, recvfile.go.
	"sendfile": {sendfileCmd},
	"recvfile": {recvfileCmd},
}

func rbcastd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			// help SUB: SUB's own help, as 'rbcastd SUB -h'.
			if _, ok := commands[args[1]]; !ok {
				return unknownCommand(stderr, args[1])
			}
			return rbcastd([]string{args[1], "-h"}, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		return unknownCommand(stderr, args[0])
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

// unknownCommand reports a command rbcastd does not have, listing those
// it has.
func unknownCommand(stderr io.Writer, name string) int {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(stderr, "rbcastd: unknown command %q (commands: %s)\n", name, strings.Join(names, ", "))
	return exitUsage
}

// flagSetMade, when set, is given every command's FlagSet as newFlags
// makes it (tests hold the flags against the docs).
var flagSetMade func(*flag.FlagSet)

// newFlags returns a FlagSet whose -h prints synopsis, text and flags.
func newFlags(name, synopsis, text string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rbcastd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if onePClients[name] {
		text += onePNote
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rbcastd %s %s\n\n%s", name, synopsis, text)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(fs.Output(), "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// parse parses flags; -h prints usage to stdout and exits 0.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (done bool, code int) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return true, exitOK
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, exitOK
		}
		return true, exitUsage
	}
	return false, 0
}

// usageErr reports a bad command line.
func usageErr(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "rbcastd %s: %s (see 'rbcastd %s -h')\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// fail reports a failure: "rbcastd CMD: " and err's message, whole. The
// libraries' errors (localapi, daemon) name no program, so the command's
// name is said once.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "rbcastd %s: %v\n", cmd, err)
	return exitFail
}
