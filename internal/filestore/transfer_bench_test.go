package filestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/core"
	"github.com/rbcast/rbcast/reliable/files"
)

// BenchmarkTransfer is one whole file's per-block work at a sending and at
// a receiving rbcastd, in one process, without sockets: what the daemons
// do per block at MTU 9000 (blocks of 8964 bytes) but for the kernel's
// side of the link. The sender's file core, behind a core.Stepper as the
// daemon's CoreLoop runs it, reads the file (a Source of this package:
// preadv of a run into the frames), hashes it (BLAKE3, as rbcastd
// sendfile sends) and encodes each FileData frame with its CRC-32C; each
// frame is copied into a transmit ring's slot and from there into a
// receive ring's (the copies link/ring's Stage and the kernel make), and
// the receiver's stepper decodes it (its CRC checked) and steps its file
// core, which stores the block in a Dir (the run, its checksum taken from
// the frame's CRC, the prefix hash, a pwrite per MiB); the receiver's
// reports go back to the sender. One op is one block; the file is b.N
// blocks (-benchtime 20000x and 40000x: callgrind's instructions per
// block from their difference, docs/protocols.md, "The file path's CPU
// per block, counted"). cpu-ns/op is the process's CPU per block.
func BenchmarkTransfer(b *testing.B) { benchTransfer(b, nil) }

// BenchmarkTransferBursts is BenchmarkTransfer with the pass's blocks
// lost in bursts at the receiver, as a receive ring that overflows loses
// them: 40 blocks in a row of every 1000 (4 %), repaired. writes/op is
// the receiver's writes (data and checksums) per block.
func BenchmarkTransferBursts(b *testing.B) {
	benchTransfer(b, func(v frame.View) bool {
		return v.Type() == frame.FileData && !v.Retransmission() && v.Seq()%1000 >= 500 && v.Seq()%1000 < 540
	})
}

// sinkOf keeps the partial copies its Dir opens.
type sinkOf struct {
	d  *Dir
	ps []*partial
}

func (s *sinkOf) Open(m files.Meta) (files.SinkFile, []frame.Range, error) {
	f, held, err := s.d.Open(m)
	if p, ok := f.(*partial); ok {
		s.ps = append(s.ps, p)
	}
	return f, held, err
}

// benchTransfer runs BenchmarkTransfer, the receiver not taking the
// frames lost says are lost.
func benchTransfer(b *testing.B, lost func(frame.View) bool) {
	const mtu, bs = 9000, 8964
	dir := b.TempDir()
	path := filepath.Join(dir, "src")
	block := randomBytes(1<<20, 3)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	size := int64(b.N) * bs
	for off := int64(0); off < size; off += int64(len(block)) {
		if _, err := f.Write(block[:min(int64(len(block)), size-off)]); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	src, err := OpenSourceHashLater(path, "f")
	if err != nil {
		b.Fatal(err)
	}
	src.HashAlg = frame.FileHashBLAKE3
	macS, macR := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ms := []frame.MemberInfo{{ID: 1, MAC: macS, Incarnation: 1}, {ID: 2, MAC: macR, Incarnation: 2}}
	cfg := func(self frame.MemberID, sink files.Sink) files.Config {
		return files.Config{Group: 9, Self: self, Members: ms, MTU: mtu, Sink: sink, Rate: 1 << 40, Burst: 256, Window: 900}
	}
	s, err := files.New(cfg(1, nil))
	if err != nil {
		b.Fatal(err)
	}
	sink := &sinkOf{d: &Dir{Root: filepath.Join(dir, "in")}}
	r, err := files.New(cfg(2, sink))
	if err != nil {
		b.Fatal(err)
	}
	ss, rs := core.NewStepper(s, 9, 0), core.NewStepper(r, 9, 0)
	var got, recvd []files.Report
	txRing, rxRing := make([]byte, 4<<20), make([]byte, 4<<20)
	slot := func(ring []byte, at *int, fr []byte) []byte {
		if *at+len(fr) > len(ring) {
			*at = 0
		}
		n := copy(ring[*at:], fr)
		*at += n
		return ring[*at-n : *at]
	}
	var txAt, rxAt int
	now := core.Time(1)
	ss.Tick(now)
	rs.Tick(now)
	if _, err := s.Send(now, src.Outgoing(nil)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(bs)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for len(got) == 0 && now < core.Time(1000*files.Second) {
		now += core.Time(20 * files.Microsecond)
		ss.Tick(now)
		for _, fr := range ss.Ready().Frames {
			tx := slot(txRing, &txAt, fr)
			if lost != nil {
				if _, body, err := frame.SplitEthernet(tx, frame.EtherType); err == nil && lost(frame.View(body)) {
					continue
				}
			}
			rs.Step(now, slot(rxRing, &rxAt, tx))
		}
		got = append(got, s.Reports()...)
		ss.Advance()
		rs.Tick(now)
		for _, fr := range rs.Ready().Frames {
			ss.Step(now, fr)
		}
		recvd = append(recvd, r.Reports()...)
		rs.Advance()
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
	writes := 0
	for _, p := range sink.ps {
		writes += p.writes
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	if len(got) != 1 || !got[0].OK() {
		b.Fatalf("the transfer of %d blocks: reports %v", b.N, got)
	}
	if len(recvd) != 1 || recvd[0].Kind != files.Received {
		b.Fatalf("the receiver's reports: %v", recvd)
	}
}
