package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ownersDir holds one record per topology New built and Close has not
// removed: the file named by its prefix holds the building process's id
// and start time. A process killed before its Close (a go test that ran
// past -timeout) leaves its namespaces and its record behind; the record
// is what tells them from a live run's, whose namespaces hold no process
// while it uses them only through sockets opened by Host.Do.
var ownersDir = "/run/rbcast-netns/owners"

// owner is this process, as a record names it.
func owner() (string, error) {
	start, err := startTime(os.Getpid())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d\n", os.Getpid(), start), nil
}

// startTime is a process's start time since boot in clock ticks
// (/proc/PID/stat, field 22): with the id, it names one process even
// after its id is reused.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// its closing parenthesis: state is field 3, start time field 22.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 20", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func recordOwner(prefix string) error {
	rec, err := owner()
	if err != nil {
		return fmt.Errorf("netns: recording the owner of %s: %w", prefix, err)
	}
	if err := os.MkdirAll(ownersDir, 0o755); err != nil {
		return fmt.Errorf("netns: recording the owner of %s: %w", prefix, err)
	}
	if err := os.WriteFile(filepath.Join(ownersDir, prefix), []byte(rec), 0o644); err != nil {
		return fmt.Errorf("netns: recording the owner of %s: %w", prefix, err)
	}
	return nil
}

func removeOwner(prefix string) {
	os.Remove(filepath.Join(ownersDir, prefix))
}

// ownerGone reports whether the process a record names has ended.
func ownerGone(rec string) (bool, error) {
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(rec, "%d %d", &pid, &start); err != nil || pid <= 0 {
		return false, fmt.Errorf("bad owner record %q", strings.TrimSpace(rec))
	}
	now, err := startTime(pid)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return now != start, nil
}

// Stale is a topology SweepStale removed: its prefix, the process that
// built it and the namespaces deleted.
type Stale struct {
	Prefix     string
	Owner      string // "PID STARTTIME" of the process that built it, gone
	Namespaces []string
}

// SweepStale removes the topology of prefix when it is stale: New built
// it in a process that has ended without Close (a test killed by go
// test's -timeout, whose cleanups never ran), and no process is in any of
// its namespaces (a routed topology's own smcrouted aside, which down
// stops). Namespaces New did not record (made by scripts/netns/up, or by
// a build of this package that kept no records) and those of a live
// process are never touched. It returns nil when nothing was removed.
func SweepStale(prefix string) (*Stale, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("netns: SweepStale(%q): want \"rb\" followed by at most 9 lowercase letters or digits", prefix)
	}
	path := filepath.Join(ownersDir, prefix)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: SweepStale(%s): %w", prefix, err)
	}
	defer f.Close()
	// Another process sweeping the same prefix holds the lock: leave it
	// to that one.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // swept by the process that held the lock before
	}
	if err != nil {
		return nil, fmt.Errorf("netns: SweepStale(%s): %w", prefix, err)
	}
	rec := string(b)
	gone, err := ownerGone(rec)
	if err != nil {
		return nil, fmt.Errorf("netns: SweepStale(%s): %w", prefix, err)
	}
	if !gone {
		return nil, nil
	}
	names, err := Leftovers(prefix)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		removeOwner(prefix) // its namespaces were removed by hand
		return nil, nil
	}
	router := routerPid(prefix)
	for _, ns := range names {
		pids, err := nsPids(ns)
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if ns == prefix+"rt" && pid == router {
				continue
			}
			return nil, nil // in use
		}
	}
	scripts, err := ScriptsDir()
	if err != nil {
		return nil, err
	}
	t := &Topology{Prefix: prefix, scripts: scripts}
	if _, err := t.script("down", "-p", prefix); err != nil {
		return nil, err
	}
	if left, err := Leftovers(prefix); err != nil {
		return nil, err
	} else if len(left) > 0 {
		return nil, fmt.Errorf("netns: after down -p %s these namespaces remain: %s", prefix, strings.Join(left, " "))
	}
	removeOwner(prefix)
	return &Stale{Prefix: prefix, Owner: strings.TrimSpace(rec), Namespaces: names}, nil
}

// SweepStaleRandom runs SweepStale on every recorded prefix of the form
// New gives an empty Options.Prefix (see Options.Prefix), and returns
// what it removed.
func SweepStaleRandom() ([]Stale, error) {
	entries, err := os.ReadDir(ownersDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: listing %s: %w", ownersDir, err)
	}
	random := regexp.MustCompile("^" + regexp.QuoteMeta(prefixBase()) + "[a-z]{4}$")
	var swept []Stale
	var errs []error
	for _, e := range entries {
		if !random.MatchString(e.Name()) {
			continue
		}
		s, err := SweepStale(e.Name())
		if err != nil {
			errs = append(errs, err)
		} else if s != nil {
			swept = append(swept, *s)
		}
	}
	return swept, errors.Join(errs...)
}

// routerPid is the pid in a routed topology's smcrouted pid file, or 0.
func routerPid(prefix string) int {
	b, err := os.ReadFile(filepath.Join("/run/rbcast-netns", prefix, "smcroute.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// nsPids lists the processes in a namespace (ip netns pids).
func nsPids(ns string) ([]int, error) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("netns: pids of %s: %w", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 {
			return nil, fmt.Errorf("netns: pids of %s: %q is not a process id", ns, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
