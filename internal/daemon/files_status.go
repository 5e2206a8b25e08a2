package daemon

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
)

// FilesStatus is the file dissemination in Status (files on).
type FilesStatus struct {
	Group uint32 `json:"group"`
	// Running: the file core runs (the daemon is a member).
	Running bool   `json:"running"`
	Self    int    `json:"self"`
	Inbox   string `json:"inbox,omitempty"`
	// RecvDirs are the recvfile clients' directories, oldest first (the
	// first one stores the files that arrive).
	RecvDirs  []string       `json:"recvfile_dirs,omitempty"`
	Transfers []FileTransfer `json:"transfers"`
	Recent    []FileEvent    `json:"recent,omitempty"`
	Counters  FileCounters   `json:"counters"`
	// Auth is the files' link's authentication (an authenticated group):
	// its keys, which rotate with the group's, and the frames it dropped
	// by reason — those of the files' link only (the group's are in
	// Status.Auth).
	Auth *AuthStatus `json:"auth,omitempty"`
	// KeyMismatch says that frames of the files' group came under a key
	// this daemon does not hold, with the other algorithm, or with a key
	// while it has none (reliable.FilesStats.KeyMismatch); a rogue's frames
	// under a key of its own count too.
	KeyMismatch string `json:"key_mismatch,omitempty"`
	// Unauthenticated says that frames of the files' group came without
	// an authentication tag to this keyed daemon, and were dropped
	// (reliable.FilesStats.Unauthenticated): not a key mismatch.
	Unauthenticated string `json:"unauthenticated,omitempty"`
}

// FileTransfer is one file sent or received here, under way or open.
type FileTransfer struct {
	Sender      int    `json:"sender"`
	Incarnation uint32 `json:"incarnation"`
	ID          uint32 `json:"id"`
	Name        string `json:"name"`
	Size        uint64 `json:"size"`
	Blocks      uint32 `json:"blocks"`
	Sending     bool   `json:"sending"`
	State       string `json:"state"`
	// A file received here: blocks and bytes held, bytes written by this
	// daemon (a resumed file: fewer than held), rate and time left.
	// A file sent here: Held is how far its multicast pass is.
	Held          uint32         `json:"held_blocks"`
	Bytes         uint64         `json:"held_bytes"`
	ReceivedBytes uint64         `json:"received_bytes,omitempty"`
	Dir           string         `json:"dir,omitempty"`
	BytesPerSec   float64        `json:"bytes_per_sec"`
	ETASeconds    float64        `json:"eta_seconds"` // -1: unknown
	Receivers     []FileReceiver `json:"receivers,omitempty"`
}

// FileReceiver is one receiver of a file sent here, as it last reported.
type FileReceiver struct {
	Member     int  `json:"member"`
	InSnapshot bool `json:"in_snapshot"`
	// State is "not heard", "needs offer", "receiving", "done",
	// "declined" (it does not take the file: an rbcastd with no recvfile
	// client and no -inbox), "refused" (the file is beyond one of its
	// limits: Cause says which) or "failed" (Cause says why).
	State string `json:"state"`
	// Cause: why a declined, refused or failed receiver does not hold
	// the file (docs/local-api.md's cause texts).
	Cause       string  `json:"cause,omitempty"`
	Held        uint32  `json:"held_blocks"`
	Bytes       uint64  `json:"held_bytes"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	ETASeconds  float64 `json:"eta_seconds"`
}

// FileCounters are the file core's counters (this membership's) and the
// bytes this daemon stored (since it started).
type FileCounters struct {
	FilesSent       uint64 `json:"files_sent"`
	FilesAborted    uint64 `json:"files_aborted"`
	FilesReceived   uint64 `json:"files_received"`
	FilesIncomplete uint64 `json:"files_incomplete"`
	FilesDeclined   uint64 `json:"files_declined"` // not taken (no recvfile client, no -inbox), said so to the sender
	FilesRefused    uint64 `json:"files_refused"`  // offers beyond this daemon's limits (MTU, size, room, name length, the file system's largest file) or of a name not a local path here, the reason said to the sender
	FilesDeferred   uint64 `json:"files_deferred"` // offers that waited, unopened, while -files-max-receiving files were being received (each taken later)
	BlocksSent      uint64 `json:"blocks_sent"`
	BlocksRepaired  uint64 `json:"blocks_repaired"`
	RepairsToGroup  uint64 `json:"repairs_to_group"`
	// RepairsAgain: blocks repaired to a receiver again (it still lacked
	// them after a block sent later had arrived, or after the timer);
	// RepairsTimedOut: those of them sent again by the timer.
	RepairsAgain    uint64 `json:"repairs_again"`
	RepairsTimedOut uint64 `json:"repairs_timed_out"`
	BlocksReceived  uint64 `json:"blocks_received"`
	Duplicates      uint64 `json:"duplicate_blocks"`
	ReportsSent     uint64 `json:"reports_sent"`
	ReportsReceived uint64 `json:"reports_received"`
	HashMismatches  uint64 `json:"hash_mismatches"`
	Resumed         uint64 `json:"resumed"`
	// FilesHeld: files received with no block (stored here already);
	// HeldMismatches: files stored under an offer's name and size that
	// FileEnd's hash showed to be other files (received again);
	// OldReceivers: receivers a verdict named too old for an offer
	// without a hash, or for a file not hashed with SHA-256.
	FilesHeld      uint64 `json:"files_held"`
	HeldMismatches uint64 `json:"held_mismatches"`
	OldReceivers   uint64 `json:"old_receivers"`
	// PassesSkipped: files whose pass stopped sending because every
	// receiver held them already; BlocksSkipped: the blocks not sent.
	PassesSkipped uint64 `json:"passes_skipped"`
	BlocksSkipped uint64 `json:"blocks_skipped"`
	WindowStalls  uint64 `json:"window_stalls"`
	BadFrames     uint64 `json:"bad_frames"`
	StoredBytes   uint64 `json:"stored_bytes"`
	SRTTus        int64  `json:"srtt_us"`
	// KernelDrops: frames of the files' link the kernel dropped because
	// the file runtime did not read them in time (its receive ring was
	// full); SendRetries: sends the link retried on back-pressure.
	KernelDrops uint64 `json:"kernel_drops"`
	SendRetries uint64 `json:"send_retries"`
	// KeyedNoKey: frames of the files' group that carried an
	// authentication tag, dropped because this daemon has no key.
	KeyedNoKey uint64 `json:"keyed_frames_no_key,omitempty"`
}

func metaKey(m reliable.FileMeta) xferKey { return xferKey{m.Sender, m.Incarnation, m.ID} }

// heldBytes is the bytes of held blocks of m (the last block may be
// short).
func heldBytes(m reliable.FileMeta, held uint32) uint64 {
	return min(uint64(held)*uint64(m.BlockSize), m.Size)
}

// sample records the progress of every transfer, for rates (once a
// second).
func (s *fileService) sample(ps []reliable.FileProgress, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[rateKey]bool{}
	upd := func(k rateKey, held uint32) {
		seen[k] = true
		old, ok := s.rates[k]
		smp := rateSample{at: now, held: held}
		if ok && now.After(old.at) && held >= old.held {
			smp.rate = float64(held-old.held) / now.Sub(old.at).Seconds()
		}
		s.rates[k] = smp
	}
	for _, p := range ps {
		k := metaKey(p.Meta)
		if !p.Sending {
			upd(rateKey{k, s.self}, p.Held)
			continue
		}
		for _, r := range p.Receivers {
			upd(rateKey{k, r.Member}, r.Held)
		}
	}
	for k := range s.rates {
		if !seen[k] {
			delete(s.rates, k)
		}
	}
}

// rateOf is the bytes/s and seconds left of one receiver of m holding
// held blocks (-1: unknown).
func (s *fileService) rateOf(k rateKey, m reliable.FileMeta, held uint32) (bps, eta float64) {
	smp, ok := s.rates[k]
	if !ok {
		return 0, -1
	}
	bps = smp.rate * float64(m.BlockSize)
	left := m.Blocks() - min(held, m.Blocks())
	switch {
	case left == 0:
		return bps, 0
	case smp.rate > 0:
		return bps, float64(left) / smp.rate
	}
	return bps, -1
}

// status is the file section of Status; nil with files off.
func (s *fileService) status() *FilesStatus {
	if s == nil {
		return nil
	}
	r := s.runner()
	fs := &FilesStatus{Group: s.cfg.Group, Inbox: s.cfg.Inbox, Self: -1, Transfers: []FileTransfer{}}
	var ps []reliable.FileProgress
	if r != nil {
		fs.Running = true
		ps = r.Progress()
		st := r.Stats()
		c := st.Core
		fs.Counters = FileCounters{FilesSent: c.FilesSent, FilesAborted: c.FilesAborted, FilesReceived: c.FilesReceived, FilesIncomplete: c.FilesIncomplete, FilesDeclined: c.FilesDeclined, FilesRefused: c.FilesRefused, FilesDeferred: c.FilesDeferred,
			BlocksSent: c.BlocksSent, BlocksRepaired: c.BlocksRepaired, RepairsToGroup: c.RepairsToGroup, RepairsAgain: c.RepairsAgain, RepairsTimedOut: c.RepairsTimedOut, BlocksReceived: c.BlocksReceived,
			Duplicates: c.Duplicates, ReportsSent: c.ReportsSent, ReportsReceived: c.ReportsReceived, HashMismatches: c.HashMismatches,
			Resumed: c.Resumed, FilesHeld: c.FilesHeld, HeldMismatches: c.HeldMismatches, OldReceivers: c.OldReceivers, PassesSkipped: c.PassesSkipped, BlocksSkipped: c.BlocksSkipped, WindowStalls: c.WindowStalls, BadFrames: c.BadFrames + st.Bad.Total(), SRTTus: int64(c.SRTT / reliable.FileMicrosecond),
			KernelDrops: st.LinkStats.KernelDrops, SendRetries: st.LinkStats.SendRetries, KeyedNoKey: st.KeyedNoKey}
		fs.KeyMismatch, fs.Unauthenticated = st.KeyMismatch(), st.Unauthenticated()
	}
	if s.auth != nil {
		// Also while no file core runs: the link and its keys stay.
		a := s.auth.Auth()
		fs.Auth = authStatus(&a)
	}
	fs.Counters.StoredBytes = s.bytesIn.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r != nil {
		fs.Self = int(s.self)
	}
	for _, c := range s.clients {
		fs.RecvDirs = append(fs.RecvDirs, c.dir)
	}
	fs.Recent = slices.Clone(s.recent)
	for _, p := range ps {
		k := metaKey(p.Meta)
		t := FileTransfer{Sender: int(p.Meta.Sender), Incarnation: p.Meta.Incarnation, ID: p.Meta.ID, Name: p.Meta.Name, Size: p.Meta.Size,
			Blocks: p.Blocks, Sending: p.Sending, State: p.State, Held: p.Held, Bytes: heldBytes(p.Meta, p.Held), ETASeconds: -1}
		if !p.Sending {
			t.BytesPerSec, t.ETASeconds = s.rateOf(rateKey{k, s.self}, p.Meta, p.Held)
			if info := s.stored[k]; info != nil {
				t.Dir, t.ReceivedBytes = info.dir, info.bytes.Load()
			}
		}
		for _, rp := range p.Receivers {
			fr := FileReceiver{Member: int(rp.Member), InSnapshot: rp.InSnapshot, State: receiverState(rp), Held: rp.Held, Bytes: heldBytes(p.Meta, rp.Held)}
			if rp.State == frame.FileFailed {
				fr.Cause = rp.Cause.String()
			}
			fr.BytesPerSec, fr.ETASeconds = s.rateOf(rateKey{k, rp.Member}, p.Meta, rp.Held)
			t.Receivers = append(t.Receivers, fr)
		}
		fs.Transfers = append(fs.Transfers, t)
	}
	return fs
}

// receiverState is a receiver's state as status shows it: a failed one
// that declined the file, or refused it for a limit, is named so.
func receiverState(rp reliable.FileReceiverProgress) string {
	switch {
	case rp.State == 0:
		return "not heard"
	case rp.State == frame.FileFailed && rp.Cause == reliable.FileCauseDeclined:
		return "declined"
	case rp.State == frame.FileFailed && rp.Cause.Limit():
		return "refused"
	}
	return rp.State.String()
}

// Files metrics (docs/metrics.md, "Files").
var (
	descFilesCounter = prometheus.NewDesc("rbcastd_files_total", "File dissemination counters (files sent, aborted, received, incomplete; blocks sent, repaired, repaired to the group, received, duplicate; reports sent and received; hash mismatches; resumed transfers; window stalls), by kind.", []string{"kind"}, nil)
	descFilesStored  = prometheus.NewDesc("rbcastd_files_stored_bytes_total", "Bytes of file blocks this daemon wrote to storage since it started (a resumed file writes only what it lacked).", nil, nil)
	descFilesHeld    = prometheus.NewDesc("rbcastd_file_held_bytes", "Bytes of a file under way held by a receiver (sender, file id; receiver: this member for a file received here, each receiver for a file sent here).", []string{"sender", "file", "receiver"}, nil)
	descFilesSize    = prometheus.NewDesc("rbcastd_file_size_bytes", "Size of a file under way.", []string{"sender", "file"}, nil)
	descFilesRate    = prometheus.NewDesc("rbcastd_file_receive_rate_bytes", "Bytes per second a receiver of a file under way gained over the last second.", []string{"sender", "file", "receiver"}, nil)
	// The files' link's authentication, beside the group's
	// rbcastd_auth_*: the same reasons.
	descFilesAuthDropped  = prometheus.NewDesc("rbcastd_files_auth_dropped_frames_total", "Frames of the files' link dropped by authentication (-key-file), by reason: unauthenticated, algorithm, unknown_key, bad_tag, replay, too_old, earlier_incarnation, own; and no_key: frames with a tag dropped by a daemon without a key.", []string{"reason"}, nil)
	descFilesAuthVerified = prometheus.NewDesc("rbcastd_files_auth_verified_frames_total", "Frames of the files' link whose authentication tag verified (-key-file).", nil, nil)
)

// filesCollector exports the file dissemination's metrics.
type filesCollector struct{ s *fileService }

func (c filesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFilesCounter, descFilesStored, descFilesHeld, descFilesSize, descFilesRate, descFilesAuthDropped, descFilesAuthVerified} {
		ch <- d
	}
}

func (c filesCollector) Collect(ch chan<- prometheus.Metric) {
	fs := c.s.status()
	k := fs.Counters
	for _, x := range []struct {
		kind string
		n    uint64
	}{{"files_sent", k.FilesSent}, {"files_aborted", k.FilesAborted}, {"files_received", k.FilesReceived}, {"files_incomplete", k.FilesIncomplete}, {"files_declined", k.FilesDeclined}, {"files_refused", k.FilesRefused}, {"files_deferred", k.FilesDeferred},
		{"blocks_sent", k.BlocksSent}, {"blocks_repaired", k.BlocksRepaired}, {"repairs_to_group", k.RepairsToGroup}, {"repairs_again", k.RepairsAgain}, {"repairs_timed_out", k.RepairsTimedOut}, {"blocks_received", k.BlocksReceived},
		{"duplicate_blocks", k.Duplicates}, {"reports_sent", k.ReportsSent}, {"reports_received", k.ReportsReceived}, {"hash_mismatches", k.HashMismatches},
		{"resumed", k.Resumed}, {"files_held", k.FilesHeld}, {"held_mismatches", k.HeldMismatches}, {"old_receivers", k.OldReceivers},
		{"passes_skipped", k.PassesSkipped}, {"blocks_skipped", k.BlocksSkipped}, {"window_stalls", k.WindowStalls}} {
		ch <- prometheus.MustNewConstMetric(descFilesCounter, counter, float64(x.n), x.kind)
	}
	ch <- prometheus.MustNewConstMetric(descFilesStored, counter, float64(k.StoredBytes))
	if a := fs.Auth; a != nil {
		for _, r := range AuthReasons {
			ch <- prometheus.MustNewConstMetric(descFilesAuthDropped, counter, float64(a.Dropped[r]), r)
		}
		ch <- prometheus.MustNewConstMetric(descFilesAuthVerified, counter, float64(a.Verified))
	} else {
		ch <- prometheus.MustNewConstMetric(descFilesAuthDropped, counter, float64(k.KeyedNoKey), "no_key")
	}
	for _, t := range fs.Transfers {
		snd, id := strconv.Itoa(t.Sender), strconv.FormatUint(uint64(t.ID), 10)
		ch <- prometheus.MustNewConstMetric(descFilesSize, gauge, float64(t.Size), snd, id)
		if !t.Sending {
			self := strconv.Itoa(fs.Self)
			ch <- prometheus.MustNewConstMetric(descFilesHeld, gauge, float64(t.Bytes), snd, id, self)
			ch <- prometheus.MustNewConstMetric(descFilesRate, gauge, t.BytesPerSec, snd, id, self)
			continue
		}
		for _, r := range t.Receivers {
			ch <- prometheus.MustNewConstMetric(descFilesHeld, gauge, float64(r.Bytes), snd, id, strconv.Itoa(r.Member))
			ch <- prometheus.MustNewConstMetric(descFilesRate, gauge, r.BytesPerSec, snd, id, strconv.Itoa(r.Member))
		}
	}
}
