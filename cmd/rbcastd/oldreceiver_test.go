package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// oldReceiverLink makes the daemon whose files' link it wraps receive
// files as an rbcastd from before offers without a hash did (the main
// before 71ac68b, the merge that brought them: `git show
// 71ac68b^1:reliable/files/recv.go`, `...:frame/filesbody.go`), for
// TestNetnsFilesOldReceiver: such binaries are refused at admission by
// now (later wire changes), so the test cannot run one. On the wire that
// receiver differs from this version's in two places only, and the link
// plays both before this version's core sees the frames:
//
//   - Its decoder wants a FileEnd to end at its member list: one with the
//     file's hash after it has the wrong length, and is dropped (counted
//     in bad_frames). The link drops it. That receiver so never reads a
//     FileEnd of such a file: it never answers one, never echoes its
//     stamp, and never learns the hash.
//   - Its core takes the offer's hash as the file's, zeros included: once
//     it holds every block, SHA-256 of the copy against zeros fails, it
//     empties the copy (the same key), and reports no block held, echoing
//     the last offer's stamp; a second mismatch fails the transfer
//     (FileFailed, cause hash). This version's core waits for FileEnd's
//     hash when the offer's is zeros, but given an offer with a hash the
//     copy never has, it does exactly the above (finish: a mismatch, not
//     retried, opens the offer's key again emptied and reports; a second
//     fails). The link writes such a hash into an offer without one
//     (oldReceiverHash) and sets the frame's CRC again.
//
// Everything else (offers with a hash, FileEnd without one, blocks, the
// reports' layout) is the same in both versions and passes untouched.
// Frames of a keyed group (FlagAuth) pass untouched too: the link sits
// below the authentication, so the test runs without a key.
type oldReceiverLink struct {
	link.Link
	etherType uint16
	log       io.Writer

	offers, ends atomic.Uint64 // rewritten, dropped
}

// oldReceiverHash is what the link puts in an offer without a hash: not
// the SHA-256 of any file one will meet, as zeros were not.
var oldReceiverHash = func() (h [frame.FileHashLen]byte) {
	for i := range h {
		h[i] = 0xff
	}
	return h
}()

// fileOfferHashAt is where an offer's hash starts in its body: after
// the id (4), size (8), block size (4) and stamp (4).
const fileOfferHashAt = 20

func newOldReceiverLink(l link.Link, etherType uint16, log io.Writer) *oldReceiverLink {
	return &oldReceiverLink{Link: l, etherType: etherType, log: log}
}

// oldReceiverHook is filesLinkHook for RBCASTD_TEST_OLD_RECEIVER=1.
func oldReceiverHook(l link.Link, etherType uint16) link.Link {
	return newOldReceiverLink(l, etherType, os.Stderr)
}

// Unwrap passes the receive-side capabilities (Waker, GroupFilter)
// through; the send-side ones are hidden (the core uses Send).
func (o *oldReceiverLink) Unwrap() link.Link { return o.Link }

// Recv returns what the wrapped link received but the FileEnds with a
// hash, the offers without one rewritten.
func (o *oldReceiverLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	for {
		n, err := o.Link.Recv(deadline, frames)
		if n == 0 {
			return n, err
		}
		kept := 0
		for i := range frames[:n] {
			if !o.keep(frames[i].Data) {
				continue
			}
			if kept != i {
				frames[kept] = frames[i]
			}
			kept++
		}
		if kept > 0 || err != nil {
			return kept, err
		}
	}
}

// keep plays the old receiver's decoder on one frame (rewriting an offer
// in place) and says whether the core gets it.
func (o *oldReceiverLink) keep(eth []byte) bool {
	_, b, err := frame.SplitEthernet(eth, o.etherType)
	if err != nil {
		return true
	}
	v, err := frame.Parse(b)
	if err != nil || v.Flags()&frame.FlagAuth != 0 {
		return true // the stepper judges it
	}
	switch v.Type() {
	case frame.FileEnd:
		if _, ok := v.FileEndHash(); ok {
			if o.ends.Add(1) == 1 {
				fmt.Fprintf(o.log, "rbcastd test: as an old receiver: dropped a FileEnd with the file's hash (file %d from member %d)\n", v.FileID(), v.Sender())
			}
			return false
		}
	case frame.FileOffer:
		if v.FileOffer().Hash == ([frame.FileHashLen]byte{}) {
			copy(v.Body()[fileOfferHashAt:], oldReceiverHash[:])
			frame.SetCRC(v)
			if o.offers.Add(1) == 1 {
				fmt.Fprintf(o.log, "rbcastd test: as an old receiver: took an offer without a hash as one with a hash no file has (file %d from member %d)\n", v.FileID(), v.Sender())
			}
		}
	}
	return true
}

// oldHashAlgLink makes the daemon whose files' link it wraps receive
// files as an rbcastd from before the offer's hash algorithm byte did
// (main before 2026-11-30's h-hash20), for TestNetnsFilesOldHashAlg. On
// the wire that receiver differs from this version's in two places, and
// the link plays both:
//
//   - Its decoder wants an offer's body to end at the name: one with the
//     algorithm byte after it is dropped (bad_frames). The link drops it,
//     so the core asks for the offer when the blocks come (Table I).
//   - Its reports do not carry FlagHashAlg. The link clears the flag on
//     every FileStatus it sends (and sets the CRC again).
//
// Everything else passes untouched, frames of a keyed group too.
type oldHashAlgLink struct {
	link.Link
	etherType uint16
	log       io.Writer

	offers atomic.Uint64 // dropped
}

// oldHashAlgHook is filesLinkHook for RBCASTD_TEST_OLD_RECEIVER=2.
func oldHashAlgHook(l link.Link, etherType uint16) link.Link {
	return &oldHashAlgLink{Link: l, etherType: etherType, log: os.Stderr}
}

func (o *oldHashAlgLink) Unwrap() link.Link { return o.Link }

// view parses a file frame of an unkeyed group.
func (o *oldHashAlgLink) view(eth []byte) (frame.View, bool) {
	_, b, err := frame.SplitEthernet(eth, o.etherType)
	if err != nil {
		return nil, false
	}
	v, err := frame.Parse(b)
	if err != nil || v.Flags()&frame.FlagAuth != 0 {
		return nil, false
	}
	return v, true
}

// Recv returns what the wrapped link received but the offers with an
// algorithm byte.
func (o *oldHashAlgLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	for {
		n, err := o.Link.Recv(deadline, frames)
		if n == 0 {
			return n, err
		}
		kept := 0
		for i := range frames[:n] {
			if v, ok := o.view(frames[i].Data); ok && v.Type() == frame.FileOffer && v.FileOffer().Alg != frame.FileHashSHA256 {
				if o.offers.Add(1) == 1 {
					fmt.Fprintf(o.log, "rbcastd test: as a receiver from before hash algorithms: dropped an offer of a %v file (file %d from member %d)\n", v.FileOffer().Alg, v.FileID(), v.Sender())
				}
				continue
			}
			if kept != i {
				frames[kept] = frames[i]
			}
			kept++
		}
		if kept > 0 || err != nil {
			return kept, err
		}
	}
}

// Send clears FlagHashAlg on the reports.
func (o *oldHashAlgLink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		if v, ok := o.view(f); ok && v.Type() == frame.FileStatus && v.Flags()&frame.FlagHashAlg != 0 {
			binary.BigEndian.PutUint16(v[2:], uint16(v.Flags()&^frame.FlagHashAlg))
			frame.SetCRC(v)
		}
	}
	return o.Link.Send(frames)
}

// queueLink is a Link that returns the frames queued, a batch a Recv.
type queueLink struct {
	link.Link // nil: only Recv is called
	batches   [][][]byte
}

func (q *queueLink) Recv(_ time.Time, frames []link.Frame) (int, error) {
	if len(q.batches) == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	b := q.batches[0]
	q.batches = q.batches[1:]
	for i, d := range b {
		frames[i] = link.Frame{Data: d}
	}
	return len(b), nil
}

// The old receiver's link drops a FileEnd with a hash (one without
// passes), writes oldReceiverHash into an offer without a hash (valid
// CRC, the rest of the offer the same), passes an offer with a hash and
// the blocks as they are, and returns no empty batch.
func TestOldReceiverLink(t *testing.T) {
	eth := func(body frame.Body) []byte {
		t.Helper()
		h := frame.Header{Group: 7, Sender: 3, Incarnation: 5, Seq: 1}
		b := append(make([]byte, 12, 64), 0, 0)
		binary.BigEndian.PutUint16(b[12:], frame.EtherType)
		b, err := frame.Append(b, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sum := sha256.Sum256([]byte("x"))
	noHash := &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 77, Name: []byte("img"), Alg: frame.FileHashSHA256}
	withHash := &frame.FileOfferBody{ID: 5, Size: 100, BlockSize: 10, Stamp: 78, Hash: sum, Name: []byte("img2"), Alg: frame.FileHashSHA256}
	endHash := &frame.FileEndBody{ID: 4, Blocks: 10, Stamp: 90, Awaited: []frame.MemberID{1}, Hash: sum}
	endPlain := &frame.FileEndBody{ID: 5, Blocks: 10, Stamp: 91, Awaited: []frame.MemberID{1}}
	data := &frame.FileDataBody{ID: 4, Data: make([]byte, 10)}
	q := &queueLink{batches: [][][]byte{
		{eth(endHash)}, // dropped: the next batch comes in this Recv
		{eth(noHash), eth(endHash), eth(withHash), eth(endPlain), eth(data)},
	}}
	var log bytes.Buffer
	o := newOldReceiverLink(q, frame.EtherType, &log)
	fs := make([]link.Frame, 8)
	n, err := o.Recv(time.Time{}, fs)
	if err != nil || n != 4 {
		t.Fatalf("Recv: %d frames, %v; want 4 (the FileEnds with a hash dropped)", n, err)
	}
	var got []frame.Body
	for _, f := range fs[:n] {
		v, err := frame.Parse(f.Data[frame.EthernetHeaderLen:])
		if err != nil {
			t.Fatalf("a frame passed does not parse: %v", err)
		}
		_, body := v.Decode()
		got = append(got, body)
	}
	want := *noHash
	want.Hash = oldReceiverHash
	if o, ok := got[0].(*frame.FileOfferBody); !ok || !reflect.DeepEqual(*o, want) {
		t.Fatalf("the offer without a hash came up as %+v, want %+v", got[0], want)
	}
	if !reflect.DeepEqual(got[1], withHash) || !reflect.DeepEqual(got[2], endPlain) || !reflect.DeepEqual(got[3], data) {
		t.Fatalf("passed %+v, want the offer with a hash, the FileEnd without one and the block as they were", got[1:])
	}
	if o.offers.Load() != 1 || o.ends.Load() != 2 {
		t.Fatalf("%d offers rewritten, %d FileEnds dropped; want 1, 2", o.offers.Load(), o.ends.Load())
	}
	for _, w := range []string{"dropped a FileEnd with the file's hash (file 4 from member 3)", "took an offer without a hash as one with a hash no file has (file 4 from member 3)"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("the log %q lacks %q", log.String(), w)
		}
	}
	if n, err := o.Recv(time.Time{}, fs); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv with nothing queued: %d, %v", n, err)
	}
}

// sentLink records what is sent through it.
type sentLink struct {
	link.Link // nil: only Send is called
	sent      [][]byte
}

func (s *sentLink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		s.sent = append(s.sent, bytes.Clone(f))
	}
	return len(frames), nil
}

// The link of a receiver from before the algorithm byte drops an offer
// with the byte and passes one without it (a SHA-256 file) and the
// blocks; it clears FlagHashAlg on the reports it sends (a valid CRC),
// and leaves the other frames alone.
func TestOldHashAlgLink(t *testing.T) {
	eth := func(flags frame.Flags, body frame.Body) []byte {
		t.Helper()
		h := frame.Header{Group: 7, Sender: 3, Incarnation: 5, Seq: 1, Flags: flags}
		b := append(make([]byte, 12, 64), 0, 0)
		binary.BigEndian.PutUint16(b[12:], frame.EtherType)
		b, err := frame.Append(b, &h, body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	blake := &frame.FileOfferBody{ID: 4, Size: 100, BlockSize: 10, Stamp: 77, Name: []byte("img"), Alg: frame.FileHashBLAKE3}
	sha := &frame.FileOfferBody{ID: 5, Size: 100, BlockSize: 10, Stamp: 78, Name: []byte("img2"), Alg: frame.FileHashSHA256}
	data := &frame.FileDataBody{ID: 4, Data: make([]byte, 10)}
	q := &queueLink{batches: [][][]byte{{eth(0, blake)}, {eth(0, blake), eth(0, sha), eth(0, data)}}}
	var log bytes.Buffer
	o := &oldHashAlgLink{Link: q, etherType: frame.EtherType, log: &log}
	fs := make([]link.Frame, 8)
	n, err := o.Recv(time.Time{}, fs)
	if err != nil || n != 2 {
		t.Fatalf("Recv: %d frames, %v; want 2 (the BLAKE3 offers dropped)", n, err)
	}
	for i, want := range []frame.Type{frame.FileOffer, frame.FileData} {
		v, err := frame.Parse(fs[i].Data[frame.EthernetHeaderLen:])
		if err != nil || v.Type() != want || want == frame.FileOffer && v.FileOffer().Alg != frame.FileHashSHA256 {
			t.Fatalf("frame %d passed: %v, %v; want %v", i, v.Type(), err, want)
		}
	}
	if o.offers.Load() != 2 || !strings.Contains(log.String(), "dropped an offer of a blake3 file (file 4 from member 3)") {
		t.Fatalf("%d offers dropped, log %q", o.offers.Load(), log.String())
	}
	sl := &sentLink{}
	o.Link = sl
	report := &frame.FileStatusBody{ID: 4, Incarnation: 5, State: frame.FileNeedOffer}
	if _, err := o.Send([][]byte{eth(frame.FlagHashAlg, report), eth(frame.FlagRetransmit, data)}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []frame.Flags{0, frame.FlagRetransmit} {
		v, err := frame.Parse(sl.sent[i][frame.EthernetHeaderLen:])
		if err != nil || v.Flags() != want {
			t.Fatalf("frame %d sent with flags %#x (%v), want %#x", i, v.Flags(), err, want)
		}
	}
}
