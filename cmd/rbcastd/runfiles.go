package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/link/udp"
)

// fileFlags are run's flags of the file dissemination (issue 20).
type fileFlags struct {
	on    bool
	inbox string
	group string
	rate  float64
	// keepFree: MB left free where received files are stored.
	keepFree float64
	// dropWritten: received files' written pages are given back as
	// they are written.
	dropWritten bool
	// maxSize: the largest file taken, in MB; 0 no limit.
	maxSize float64
	// maxReceiving: the most files received at once; 0 derives it
	// (filesMaxReceiving).
	maxReceiving int
	// ringMB: the files' link's receive ring in MiB (ring.Config.RingBytes).
	ringMB int

	udp *udp.Config // with -link udp: the files' link's (set by check)
}

func (f *fileFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "files", true, "carry files (rbcastd sendfile, recvfile): a second socket on -i for the files' group (with -link udp: on each -udp-* address's port + 1)")
	fs.StringVar(&f.inbox, "inbox", "", "store the files members send in this `directory` while no recvfile client runs (temporary name, fsync, rename)")
	fs.StringVar(&f.group, "files-group", "", "group `id` of the file frames (default: -group with its top bit flipped); all members must agree")
	fs.Float64Var(&f.keepFree, "files-keep-free", 0, "refuse a received file, at its offer, that would leave less than this many `MB` (1e6 bytes) free on the file system it is stored in; the sender is told (no room)")
	fs.BoolVar(&f.dropWritten, "files-drop-written", false, "give a received file's written pages back to the kernel as the copy is written, all but the last few MiB, so that its writes reuse them: it saved receivers CPU on a loaded virtual machine whose balloon reports free pages to the host, and keeps received files out of the page cache; a program that reads each file as soon as it is stored then reads it from the disk")
	fs.Float64Var(&f.maxSize, "files-max-size", 0, "refuse a received file, at its offer, larger than this many `MB` (1e6 bytes); the sender is told (larger than it takes); 0: no limit but the file core's, 2^28 blocks")
	fs.IntVar(&f.maxReceiving, "files-max-receiving", 0, "receive at most this many `files` at once (each holds 2 descriptors and up to 18 MiB of buffers at MTU 9000, 20 at 65535); an offer beyond them waits and is taken once one ends (one of a file held here whole already is judged at once): never refused (0: 64, fewer if RLIMIT_NOFILE leaves less than 4 descriptors a file)")
	fs.IntVar(&f.ringMB, "files-ring-mb", defaultFilesRingMB, "the files' link's receive ring, in `MiB` (a TPACKET_V3 ring, kernel memory held while the daemon runs; ignored with -link afpacket or udp): what a receiver descheduled while the file multicast goes on can take before the kernel drops frames, each of which is repaired to it alone; a larger one also queues repairs and reports behind its backlog; below 16 the multicast's window, half of 16 MiB, no longer fits; 1..4095")
	fs.Float64Var(&f.rate, "file-rate", 125, "the file multicast's pace in `MB/s` (1e6 bytes/s; repairs included); set it near the segment's rate")
}

// defaultFilesRingMB is -files-ring-mb's default: link/ring's default
// receive ring (DefaultRingBytes). 64 MiB removed the receivers' ring
// overflows but, loaded, halved the rate at 5 % loss: the backlog it
// holds delays the repairs and the reports (docs/protocols.md, "A larger
// files' receive ring, tried").
const defaultFilesRingMB = 16

// check validates the flags and sets dc.Files (its Link is opened by
// runCmd).
func (f *fileFlags) check(rf *runFlags, dc *daemon.Config) error {
	given := f.inbox != "" || f.group != "" || f.keepFree != 0 || f.dropWritten || f.maxSize != 0 || f.maxReceiving != 0 || f.ringMB != defaultFilesRingMB
	if !f.on {
		if given {
			return errors.New("-inbox, -files-group, -files-keep-free, -files-drop-written, -files-max-size, -files-max-receiving and -files-ring-mb need -files")
		}
		return nil
	}
	fc := &daemon.FilesConfig{Group: daemon.FilesGroup(dc.Group.Group)}
	if rf.linkKind == "udp" {
		// The files' link: the same addresses, each port + 1
		// (udpFilesConfig); the MACs link/udp derives are then of
		// those addresses.
		uc, err := udpFilesConfig(rf.udpCfg)
		if err != nil {
			return err
		}
		f.udp, fc.OwnMACs = &uc, true
	}
	if f.group != "" {
		g, err := strconv.ParseUint(f.group, 0, 32)
		if err != nil || g == 0 {
			return fmt.Errorf("-files-group is %q, want 1..4294967295", f.group)
		}
		fc.Group = uint32(g)
	}
	switch {
	case fc.Group == 0:
		return fmt.Errorf("-group %d flipped is 0, no group: give -files-group, or -files=false", dc.Group.Group)
	case fc.Group == dc.Group.Group:
		return fmt.Errorf("-files-group %d is the message group's id", fc.Group)
	case f.rate < 0.001 || f.rate > 100_000:
		return fmt.Errorf("-file-rate is %v MB/s, want 0.001..100000", f.rate)
	case f.ringMB < 1 || f.ringMB > 4095:
		return fmt.Errorf("-files-ring-mb is %d MiB, want 1..4095", f.ringMB)
	case f.keepFree < 0 || f.keepFree > 1e12:
		return fmt.Errorf("-files-keep-free is %v MB, want 0..1e12", f.keepFree)
	case f.maxSize != 0 && !(f.maxSize >= 1e-6 && f.maxSize <= 1e12):
		return fmt.Errorf("-files-max-size is %v MB, want 0 (no limit) or 0.000001..1e12 (a byte up to 1 EB)", f.maxSize)
	}
	n, err := filesMaxReceiving(f.maxReceiving, noFileLimit())
	if err != nil {
		return err
	}
	fc.MaxReceiving = n
	fc.MaxSize = uint64(math.Round(f.maxSize * 1e6))
	fc.KeepFree = uint64(f.keepFree * 1e6)
	fc.DropWritten = f.dropWritten
	fc.Rate = int64(f.rate * 1e6)
	if f.inbox != "" {
		abs, err := filepath.Abs(f.inbox)
		if err != nil {
			return fmt.Errorf("-inbox: %w", err)
		}
		if err := daemon.CheckInbox(abs); err != nil {
			return fmt.Errorf("-inbox: %w", err)
		}
		fc.Inbox = abs
	}
	dc.Files = fc
	return nil
}

// filesDescriptorsEach is what one file being received may take of
// RLIMIT_NOFILE: its partial copy and its checksums (2), and as many again
// for what the daemon opens beside them (sockets, clients, files sent).
const filesDescriptorsEach = 4

// filesMaxReceivingDefault is the file core's DefaultMaxReceiving
// (files_maxreceiving_test.go checks it is).
const filesMaxReceivingDefault = 64

// filesMaxReceiving is -files-max-receiving n checked against nofile,
// RLIMIT_NOFILE's soft limit (0: unknown), or, for 0, the default: the
// file core's, or fewer where nofile leaves less than
// filesDescriptorsEach descriptors a file. A nofile below
// filesDescriptorsEach takes no file at all: an error, whatever n.
func filesMaxReceiving(n int, nofile uint64) (int, error) {
	fit := filesMaxReceivingDefault
	if nofile > 0 {
		fit = int(min(nofile/filesDescriptorsEach, 1<<20))
	}
	switch {
	case n < 0 || n > 65536:
		return 0, fmt.Errorf("-files-max-receiving is %d, want 1..65536 (0: %d, fewer if RLIMIT_NOFILE is low)", n, filesMaxReceivingDefault)
	case fit == 0:
		return 0, fmt.Errorf("RLIMIT_NOFILE is %d, too low to receive files at all (each takes %d descriptors): raise it (ulimit -n, LimitNOFILE=) to %d or more, or run with -files=false", nofile, filesDescriptorsEach, filesDescriptorsEach)
	case n == 0:
		return min(filesMaxReceivingDefault, fit), nil
	case n > fit:
		return 0, fmt.Errorf("-files-max-receiving %d wants %d descriptors (%d a file), more than RLIMIT_NOFILE's %d: raise it (ulimit -n, LimitNOFILE=) or take at most %d files at once", n, n*filesDescriptorsEach, filesDescriptorsEach, nofile, fit)
	}
	return n, nil
}

// noFileLimit is RLIMIT_NOFILE's soft limit (the Go runtime raised it to
// the hard limit at start), or 0 if unknown.
func noFileLimit() uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return r.Cur
}

// udpFilesConfig is the configuration of the files' UDP link beside the
// group's link configured by cfg: the same mode, interface and options,
// every address (the multicast group, the peers or seeds, this member's
// own when given) with its port + 1. The kernel then parts the two
// groups' datagrams by port, as the kernel filter parts them by group id
// on Ethernet, and the group's data path is untouched.
func udpFilesConfig(cfg udp.Config) (udp.Config, error) {
	next := func(a netip.AddrPort, what string) (netip.AddrPort, error) {
		if !a.IsValid() || a.Port() == 0 {
			return a, nil // unset, or a free port: the files' link picks its own
		}
		if a.Port() == 65535 {
			return a, fmt.Errorf("files over -link udp use each port + 1, and %s %v has port 65535: pick a lower port, or -files=false", what, a)
		}
		return netip.AddrPortFrom(a.Addr(), a.Port()+1), nil
	}
	var err error
	if cfg.Group, err = next(cfg.Group, "-udp-group"); err != nil {
		return cfg, err
	}
	if cfg.Local, err = next(cfg.Local, "-udp-listen"); err != nil {
		return cfg, err
	}
	if len(cfg.Peers) > 0 {
		peers := make([]netip.AddrPort, len(cfg.Peers))
		for i, p := range cfg.Peers {
			if peers[i], err = next(p, "the -udp-peers/-udp-seed address"); err != nil {
				return cfg, err
			}
		}
		// Peers on one host at consecutive ports: a peer's files
		// port would be another peer's group port.
		for _, p := range peers {
			if slices.Contains(cfg.Peers, p) {
				return cfg, fmt.Errorf("files over -link udp use each port + 1, and %v is both a peer's files address and a peer in -udp-peers/-udp-seed: space the peers' ports by 2, or -files=false", p)
			}
		}
		cfg.Peers = peers
	}
	return cfg, nil
}
