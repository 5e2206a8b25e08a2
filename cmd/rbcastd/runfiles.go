package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/rbcast/rbcast/internal/daemon"
)

// fileFlags are run's flags of the file dissemination (issue 20).
type fileFlags struct {
	on    bool
	inbox string
	group string
	rate  float64
}

func (f *fileFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "files", true, "carry files (rbcastd sendfile, recvfile): a second socket on -i for the files' group (not with -link udp)")
	fs.StringVar(&f.inbox, "inbox", "", "store the files members send in this `directory` while no recvfile client runs (temporary name, fsync, rename)")
	fs.StringVar(&f.group, "files-group", "", "group `id` of the file frames (default: -group with its top bit flipped); all members must agree")
	fs.Float64Var(&f.rate, "file-rate", 125, "the file multicast's pace in `MB/s` (1e6 bytes/s; repairs included); set it near the segment's rate")
}

// check validates the flags and sets dc.Files (its Link is opened by
// runCmd).
func (f *fileFlags) check(rf *runFlags, dc *daemon.Config) error {
	given := f.inbox != "" || f.group != ""
	if !f.on {
		if given {
			return errors.New("-inbox and -files-group need -files")
		}
		return nil
	}
	if rf.linkKind == "udp" {
		if given {
			return errors.New("files (-inbox, -files-group) need an Ethernet link (-link ring or afpacket), not -link udp")
		}
		return nil // files off over UDP
	}
	fc := &daemon.FilesConfig{Group: daemon.FilesGroup(dc.Group.Group)}
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
	}
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
