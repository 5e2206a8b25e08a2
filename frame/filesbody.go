package frame

// The file frames (reliable/files, after Liu & Russell's IBRMP), types
// 0x40–0x4F: a file's identity before its data (BOF), its blocks (DATA),
// its end with the receivers still awaited (EOF), a receiver's report
// (BOF_REQUEST, DATA_REQUEST, TRANSFER_DONE and the credit-bearing ACK in
// one state report), and the sender's "no such file any more"
// (FILE_TIMEOUT). None of them carries an ack vector.

// Body sizes of the file frames' fixed parts.
const (
	fileOfferHead  = 54 // id, size, block size, stamp, hash, name length
	fileDataHead   = 4  // id
	fileEndHead    = 18 // id, blocks, srtt, stamp, count
	fileStatusHead = 30 // id, incarnation, state, reason, credit, held, top, echo, delay, count
	fileGoneLen    = 5  // id, reason
	// FileDataHead is the bytes of a FileData body before the block.
	FileDataHead = fileDataHead
	// MaxFileName bounds a file's name (a relative path) in an offer.
	MaxFileName = 4096
	// FileHashLen is the length of a file's content hash (SHA-256, or
	// BLAKE3's default 32-byte output).
	FileHashLen = 32
)

// FileHashAlg names the algorithm of a file's content hash: a FileOffer
// carries it in a byte after the name, present only when it is not
// SHA-256 (so an offer of a SHA-256 file is what it was before the byte,
// and a receiver from before the byte drops an offer that has it).
type FileHashAlg uint8

const (
	// FileHashSHA256 is SHA-256 (FIPS 180-4): the offer has no
	// algorithm byte.
	FileHashSHA256 FileHashAlg = 1
	// FileHashBLAKE3 is BLAKE3 with its default 32-byte output (what
	// b3sum prints).
	FileHashBLAKE3 FileHashAlg = 2
)

// Known reports whether a is an algorithm this build hashes with.
func (a FileHashAlg) Known() bool { return a == FileHashSHA256 || a == FileHashBLAKE3 }

// String is the algorithm's name as its command-line tool spells it
// ("sha256", "blake3"), or "hash(N)" for an id this build does not know.
func (a FileHashAlg) String() string {
	switch a {
	case FileHashSHA256:
		return "sha256"
	case FileHashBLAKE3:
		return "blake3"
	}
	return "hash(" + itoa(int(a)) + ")"
}

// ParseFileHashAlg returns the algorithm String names.
func ParseFileHashAlg(s string) (FileHashAlg, bool) {
	for _, a := range []FileHashAlg{FileHashSHA256, FileHashBLAKE3} {
		if s == a.String() {
			return a, true
		}
	}
	return 0, false
}

// FileOfferBody announces a file before its data (IBRMP's BOF, §III.B.1):
// its transfer id, size, block size, content hash and name. Stamp is the
// sender's clock in microseconds, echoed by reports for the round trip.
// A Hash of all zeros says the hash comes in the file's FileEnd instead
// (the sender hashes the file while its pass sends it). Alg is the
// hash's algorithm, for both; 0 encodes as SHA-256 (no algorithm byte),
// and decodes as FileHashSHA256.
type FileOfferBody struct {
	ID        uint32
	Size      uint64
	BlockSize uint32
	Stamp     uint32
	Hash      [FileHashLen]byte
	Name      []byte
	Alg       FileHashAlg
}

// algByte reports whether the offer carries its algorithm in a byte.
func (o *FileOfferBody) algByte() bool { return o.Alg != 0 && o.Alg != FileHashSHA256 }

// Blocks is the file's number of blocks.
func (o *FileOfferBody) Blocks() uint64 { return FileBlocks(o.Size, o.BlockSize) }

// FileBlocks is the number of blocks of size bytes at blockSize bytes a
// block (0 for an empty file or a zero block size).
func FileBlocks(size uint64, blockSize uint32) uint64 {
	if blockSize == 0 {
		return 0
	}
	return (size + uint64(blockSize) - 1) / uint64(blockSize)
}

func (o *FileOfferBody) FrameType() Type { return FileOffer }
func (o *FileOfferBody) Len() int {
	if o.algByte() {
		return fileOfferHead + len(o.Name) + 1
	}
	return fileOfferHead + len(o.Name)
}
func (o *FileOfferBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, o.ID)
	b = be.AppendUint64(b, o.Size)
	b = be.AppendUint32(b, o.BlockSize)
	b = be.AppendUint32(b, o.Stamp)
	b = append(b, o.Hash[:]...)
	b = be.AppendUint16(b, uint16(len(o.Name)))
	b = append(b, o.Name...)
	if o.algByte() {
		b = append(b, byte(o.Alg))
	}
	return b
}
func (o *FileOfferBody) flags() Flags { return 0 }

// FileDataBody is one block of a file (IBRMP's DATA, with a block number
// in the header's Seq instead of a byte offset).
type FileDataBody struct {
	ID   uint32
	Data []byte
}

func (d *FileDataBody) FrameType() Type { return FileData }
func (d *FileDataBody) Len() int        { return fileDataHead + len(d.Data) }
func (d *FileDataBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, d.ID)
	return append(b, d.Data...)
}
func (d *FileDataBody) flags() Flags { return 0 }

// FileEndBody ends a file's multicast pass (IBRMP's EOF, §III.B.3): its
// block count, the sender's smoothed round trip in microseconds (the
// receivers' timers follow it), a stamp as in the offer, and the members
// of the snapshot taken before the first FileEnd that have not yet
// reported the file done (§III.D). It is repeated until the file closes.
// Hash, if not all zeros, is the file's SHA-256, after the member list:
// the hash of a file whose offer left it out (FileOfferBody); a FileEnd
// without it ends at the member list, as before.
type FileEndBody struct {
	ID      uint32
	Blocks  uint32
	SRTT    uint32
	Stamp   uint32
	Awaited []MemberID
	Hash    [FileHashLen]byte
}

func (e *FileEndBody) FrameType() Type { return FileEnd }
func (e *FileEndBody) Len() int {
	if e.Hash == ([FileHashLen]byte{}) {
		return fileEndHead + 2*len(e.Awaited)
	}
	return fileEndHead + 2*len(e.Awaited) + FileHashLen
}
func (e *FileEndBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, e.ID)
	b = be.AppendUint32(b, e.Blocks)
	b = be.AppendUint32(b, e.SRTT)
	b = be.AppendUint32(b, e.Stamp)
	b = be.AppendUint16(b, uint16(len(e.Awaited)))
	for _, m := range e.Awaited {
		b = be.AppendUint16(b, uint16(m))
	}
	if e.Hash != ([FileHashLen]byte{}) {
		b = append(b, e.Hash[:]...)
	}
	return b
}
func (e *FileEndBody) flags() Flags { return 0 }

// FileState is what a receiver's report says of its transfer.
type FileState uint8

const (
	// FileNeedOffer: the receiver knows the file only by its id (its
	// offer was lost): IBRMP's BOF_REQUEST.
	FileNeedOffer FileState = 1
	// FileReceiving: the missing ranges are a DATA_REQUEST.
	FileReceiving FileState = 2
	// FileDone: every block held and the hash matched: TRANSFER_DONE.
	FileDone FileState = 3
	// FileFailed: the receiver gave up; Reason says why.
	FileFailed FileState = 4
)

func (s FileState) valid() bool { return s >= FileNeedOffer && s <= FileFailed }

func (s FileState) String() string {
	switch s {
	case FileNeedOffer:
		return "needs offer"
	case FileReceiving:
		return "receiving"
	case FileDone:
		return "done"
	case FileFailed:
		return "failed"
	}
	return "state(" + itoa(int(s)) + ")"
}

// FileReason says why a receiver failed a file (FileFailed) or why a
// sender answered FileGone.
type FileReason uint8

const (
	// FileReasonNone goes with every state but FileFailed.
	FileReasonNone FileReason = 0
	// FileStorage: the receiver's sink refused the file (no room, a bad
	// name, an I/O error).
	FileStorage FileReason = 1
	// FileHashMismatch: the blocks were all there, and their hash was
	// not the offer's, twice.
	FileHashMismatch FileReason = 2
	// FileClosed: the sender closed the file (its per-file timer, §III.E).
	FileClosed FileReason = 3
	// FileAborted: the sender gave the file up (its source failed, or it
	// was cancelled).
	FileAborted FileReason = 4
	// FileUnknown: the sender never sent a file of that id in this
	// incarnation.
	FileUnknown FileReason = 5
	// FileHashUnknown: the offer names a hash algorithm the receiver
	// does not know (FileHashAlg); it stores nothing it cannot verify.
	FileHashUnknown FileReason = 6
	// FileDeclined: the receiver does not take the file (its sink
	// declined it: an rbcastd with no recvfile client and no -inbox).
	// A decoder from before this reason refuses the report
	// (file.status.reason) and drops it: that sender names the receiver
	// silent past its failure timeout, as it did before.
	FileDeclined FileReason = 7
	// FileOverMTU, FileTooLarge, FileNoSpace and FileNameTooLong: the
	// offer is beyond one of the receiver's limits, which each names: its
	// blocks are larger than the receiver's MTU carries, it is larger
	// than the receiver takes (more blocks than it keeps a bit for, or
	// more bytes than its operator allows; until 2026-12-01 said "more
	// blocks than the receiver takes"), it does not fit
	// the room left on the receiver's disk, or its name is longer than
	// the receiver's file system takes. The receiver stores nothing. A
	// decoder from before these reasons refuses the report
	// (file.status.reason), as one from before FileDeclined does.
	FileOverMTU     FileReason = 8
	FileTooLarge    FileReason = 9
	FileNoSpace     FileReason = 10
	FileNameTooLong FileReason = 11
	// FileTooBigForFS: the file is larger than a file may be where the
	// receiver stores it (its file system's largest file, ext4's 16 TiB
	// or FAT's 4 GiB; its process's RLIMIT_FSIZE). A decoder from before
	// it (reasons 8-11's too) refuses the report (file.status.reason).
	FileTooBigForFS FileReason = 12
	// FileBadName: the name is not a local file path where the receiver
	// stores files (absolute, climbing out with "..", the directory
	// itself, or where it keeps partial copies), and the receiver refuses
	// it as it refuses an offer beyond a limit. A decoder from before it
	// refuses the report (file.status.reason).
	FileBadName FileReason = 13
	// FileReasonMax is the highest reason this decoder takes.
	FileReasonMax = FileBadName
)

// Limit reports whether r names a limit of the receiver that the offer
// is beyond, or a rule of its names (FileBadName): it refused the offer.
func (r FileReason) Limit() bool { return r >= FileOverMTU && r <= FileReasonMax }

func (r FileReason) String() string {
	switch r {
	case FileReasonNone:
		return "none"
	case FileStorage:
		return "storage failed"
	case FileHashMismatch:
		return "hash mismatch"
	case FileClosed:
		return "closed by the sender"
	case FileAborted:
		return "aborted by the sender"
	case FileUnknown:
		return "unknown to the sender"
	case FileHashUnknown:
		return "hash algorithm unknown to the receiver"
	case FileDeclined:
		return "declined by the receiver"
	case FileOverMTU:
		return "blocks larger than the receiver's MTU"
	case FileTooLarge:
		return "larger than the receiver takes"
	case FileNoSpace:
		return "no room on the receiver's disk"
	case FileNameTooLong:
		return "name too long for the receiver's file system"
	case FileTooBigForFS:
		return "larger than the receiver's file system allows"
	case FileBadName:
		return "name not a local file path at the receiver"
	}
	return "reason(" + itoa(int(r)) + ")"
}

// FileStatusBody is one receiver's report on one transfer, to its
// sender's MAC (IBRMP's BOF_REQUEST, DATA_REQUEST, TRANSFER_DONE and the
// accumulated ACK of §III.C in one state report). The header's Seq counts
// the receiver's reports, so an older one arriving late is ignored.
type FileStatusBody struct {
	ID uint32
	// Incarnation is the sender's incarnation of the transfer (the
	// header's is the receiver's): a restarted sender counts ids from 1
	// again, and must not take a report on its old run's file for one on
	// its new run's.
	Incarnation uint32
	State       FileState
	Reason      FileReason // with FileFailed only
	// Credit is how many repair frames the receiver takes until its next
	// report (§III.C).
	Credit uint16
	// Held is the number of blocks the receiver holds; Top is one past
	// the highest block it has seen sent (the block count once it knows
	// the pass ended). Missing lists the blocks below Top it lacks,
	// ascending and disjoint (a prefix of them when they do not fit).
	Held, Top uint32
	// Echo is the last stamp the receiver saw from the sender, Delay how
	// long ago, in microseconds (RTCP's LSR and DLSR).
	Echo, Delay uint32
	Missing     []Range
}

func (s *FileStatusBody) FrameType() Type { return FileStatus }
func (s *FileStatusBody) Len() int        { return fileStatusHead + rangeLen*len(s.Missing) }
func (s *FileStatusBody) AppendBody(b []byte) []byte {
	b = be.AppendUint32(b, s.ID)
	b = be.AppendUint32(b, s.Incarnation)
	b = append(b, byte(s.State), byte(s.Reason))
	b = be.AppendUint16(b, s.Credit)
	b = be.AppendUint32(b, s.Held)
	b = be.AppendUint32(b, s.Top)
	b = be.AppendUint32(b, s.Echo)
	b = be.AppendUint32(b, s.Delay)
	return appendRanges(b, s.Missing)
}
func (s *FileStatusBody) flags() Flags { return 0 }

// FileGoneBody tells a receiver that a file it asks for is no longer
// (or never was) available: IBRMP's FILE_TIMEOUT (§III.E), sent once per
// receiver and file.
type FileGoneBody struct {
	ID     uint32
	Reason FileReason // FileClosed, FileAborted or FileUnknown
}

func (g *FileGoneBody) FrameType() Type { return FileGone }
func (g *FileGoneBody) Len() int        { return fileGoneLen }
func (g *FileGoneBody) AppendBody(b []byte) []byte {
	return append(be.AppendUint32(b, g.ID), byte(g.Reason))
}
func (g *FileGoneBody) flags() Flags { return 0 }

// checkFileBody validates the bodies of types 0x40–0x4F.
func checkFileBody(t Type, body []byte, start int) error {
	atLeast := func(field string, n int) error {
		if len(body) < n {
			return decodeErr(ErrBody, field, start, "%s body is %d bytes, needs at least %d", t, len(body), n)
		}
		return nil
	}
	if err := atLeast("file", 4); err != nil {
		return err
	}
	if be.Uint32(body) == 0 {
		return decodeErr(ErrBody, "file.id", start, "file id 0 is reserved")
	}
	switch t {
	case FileOffer:
		if err := atLeast("file.offer", fileOfferHead); err != nil {
			return err
		}
		size, bs := be.Uint64(body[4:]), be.Uint32(body[12:])
		if bs == 0 {
			return decodeErr(ErrBody, "file.offer.block_size", start+12, "block size 0")
		}
		if n := FileBlocks(size, bs); n > 0xffffffff {
			return decodeErr(ErrBody, "file.offer.size", start+4, "%d bytes in blocks of %d are %d blocks, more than 32-bit block numbers count", size, bs, n)
		}
		n := int(be.Uint16(body[52:]))
		if n == 0 || n > MaxFileName || len(body) != fileOfferHead+n && len(body) != fileOfferHead+n+1 {
			return decodeErr(ErrBody, "file.offer.name", start+52, "name of %d bytes (want 1..%d), body has %d after the fixed part (the name, and the hash algorithm's byte if not SHA-256)", n, MaxFileName, len(body)-fileOfferHead)
		}
		if len(body) > fileOfferHead+n {
			// Any other id decodes: the receiver's core refuses the
			// file, and says so to the sender (FileHashUnknown).
			if a := FileHashAlg(body[fileOfferHead+n]); a == 0 || a == FileHashSHA256 {
				return decodeErr(ErrBody, "file.offer.hash_alg", start+fileOfferHead+n, "hash algorithm %d (SHA-256 is an offer without the byte; 0 is reserved)", a)
			}
		}
		for i, c := range body[fileOfferHead : fileOfferHead+n] {
			if c == 0 {
				return decodeErr(ErrBody, "file.offer.name", start+fileOfferHead+i, "NUL byte in the name")
			}
		}
		return nil
	case FileData:
		return atLeast("file.data", fileDataHead+1)
	case FileEnd:
		if err := atLeast("file.end", fileEndHead); err != nil {
			return err
		}
		n := int(be.Uint16(body[16:]))
		if len(body) != fileEndHead+2*n && len(body) != fileEndHead+2*n+FileHashLen {
			return decodeErr(ErrBody, "file.end.awaited", start+16, "%d members need %d bytes (%d with the file's hash), body has %d", n, fileEndHead+2*n, fileEndHead+2*n+FileHashLen, len(body))
		}
		if len(body) > fileEndHead+2*n && [FileHashLen]byte(body[fileEndHead+2*n:]) == ([FileHashLen]byte{}) {
			return decodeErr(ErrBody, "file.end.hash", start+fileEndHead+2*n, "a hash of all zeros (leave it out instead)")
		}
		for i := range n {
			if MemberID(be.Uint16(body[fileEndHead+2*i:])) == NoMember {
				return decodeErr(ErrBody, "file.end.awaited", start+fileEndHead+2*i, "member id 0x%04x is reserved for 'no member'", uint16(NoMember))
			}
		}
		return nil
	case FileStatus:
		if err := atLeast("file.status", fileStatusHead); err != nil {
			return err
		}
		st, r := FileState(body[8]), FileReason(body[9])
		if !st.valid() {
			return decodeErr(ErrBody, "file.status.state", start+8, "state %d (want 1 needs offer, 2 receiving, 3 done, 4 failed)", st)
		}
		if st == FileFailed && (r == FileReasonNone || r > FileReasonMax) || st != FileFailed && r != FileReasonNone {
			return decodeErr(ErrBody, "file.status.reason", start+9, "reason %d with state %v (want 1..%d with failed, 0 otherwise)", r, st, FileReasonMax)
		}
		n := int(be.Uint16(body[28:]))
		if len(body) != fileStatusHead+n*rangeLen {
			return decodeErr(ErrBody, "file.status.missing", start+28, "%d ranges need %d bytes, body has %d", n, fileStatusHead+n*rangeLen, len(body))
		}
		top := be.Uint32(body[16:])
		var prev uint32
		for i := range n {
			off := fileStatusHead + i*rangeLen
			r := readRange(body[off:])
			if r.Last < r.First || r.Last >= top || i > 0 && r.First <= prev {
				return decodeErr(ErrBody, "file.status.missing", start+off, "range %d is %d..%d (want first <= last < top %d, above the range before)", i, r.First, r.Last, top)
			}
			prev = r.Last
		}
		return nil
	case FileGone:
		if len(body) != fileGoneLen {
			return decodeErr(ErrBody, "file.gone", start, "%s body is %d bytes, must be %d", t, len(body), fileGoneLen)
		}
		if r := FileReason(body[4]); r < FileClosed || r > FileUnknown {
			return decodeErr(ErrBody, "file.gone.reason", start+4, "reason %d (want 3 closed, 4 aborted, 5 unknown)", r)
		}
		return nil
	}
	return decodeErr(ErrType, "type", offType, "type 0x%02x", uint8(t))
}

// FileID returns the transfer id of a file frame (types 0x40–0x44).
func (v View) FileID() uint32 { return be.Uint32(v.Body()) }

// FileOffer returns the body of a FileOffer frame; Name aliases it.
func (v View) FileOffer() FileOfferBody {
	b := v.Body()
	n := fileOfferHead + int(be.Uint16(b[52:]))
	o := FileOfferBody{ID: be.Uint32(b), Size: be.Uint64(b[4:]), BlockSize: be.Uint32(b[12:]), Stamp: be.Uint32(b[16:]), Name: b[fileOfferHead:n], Alg: FileHashSHA256}
	if len(b) > n {
		o.Alg = FileHashAlg(b[n])
	}
	copy(o.Hash[:], b[20:52])
	return o
}

// FileBlock returns a FileData frame's block (aliasing the frame); its
// number is the header's Seq.
func (v View) FileBlock() []byte { return v.Body()[fileDataHead:] }

// FileEnd returns the body of a FileEnd frame but its member list, which
// FileAwaited reads.
func (v View) FileEnd() (id, blocks, srtt, stamp uint32) {
	b := v.Body()
	return be.Uint32(b), be.Uint32(b[4:]), be.Uint32(b[8:]), be.Uint32(b[12:])
}

// MemberIDs is a view of a list of member ids (FileEnd's awaited).
type MemberIDs []byte

func (m MemberIDs) Len() int          { return len(m) / 2 }
func (m MemberIDs) At(i int) MemberID { return MemberID(be.Uint16(m[2*i:])) }
func (v View) FileAwaited() MemberIDs {
	b := v.Body()
	return MemberIDs(b[fileEndHead : fileEndHead+2*int(be.Uint16(b[16:]))])
}

// FileEndHash returns the file's hash a FileEnd frame carries after its
// member list, and whether it carries one (a file whose offer's hash was
// all zeros).
func (v View) FileEndHash() (h [FileHashLen]byte, ok bool) {
	b := v.Body()
	at := fileEndHead + 2*int(be.Uint16(b[16:]))
	if len(b) < at+FileHashLen {
		return h, false
	}
	return [FileHashLen]byte(b[at:]), true
}

// FileStatus returns the body of a FileStatus frame but its ranges, which
// FileMissing reads.
func (v View) FileStatus() FileStatusBody {
	b := v.Body()
	return FileStatusBody{ID: be.Uint32(b), Incarnation: be.Uint32(b[4:]), State: FileState(b[8]), Reason: FileReason(b[9]), Credit: be.Uint16(b[10:]),
		Held: be.Uint32(b[12:]), Top: be.Uint32(b[16:]), Echo: be.Uint32(b[20:]), Delay: be.Uint32(b[24:])}
}

// FileMissing returns a FileStatus frame's missing ranges.
func (v View) FileMissing() RangeList { return RangeList(v.Body()[fileStatusHead-listHeaderLen:]) }

// FileGone returns the body of a FileGone frame.
func (v View) FileGone() FileGoneBody {
	b := v.Body()
	return FileGoneBody{ID: be.Uint32(b), Reason: FileReason(b[4])}
}

// decodeFile is Decode for types 0x40–0x4F.
func (v View) decodeFile() Body {
	switch v.Type() {
	case FileOffer:
		o := v.FileOffer()
		o.Name = append([]byte{}, o.Name...)
		return &o
	case FileData:
		return &FileDataBody{ID: v.FileID(), Data: append([]byte{}, v.FileBlock()...)}
	case FileEnd:
		id, blocks, srtt, stamp := v.FileEnd()
		e := &FileEndBody{ID: id, Blocks: blocks, SRTT: srtt, Stamp: stamp}
		for i, ml := 0, v.FileAwaited(); i < ml.Len(); i++ {
			e.Awaited = append(e.Awaited, ml.At(i))
		}
		e.Hash, _ = v.FileEndHash()
		return e
	case FileStatus:
		s := v.FileStatus()
		s.Missing = ranges(v.FileMissing())
		if len(s.Missing) == 0 {
			s.Missing = nil
		}
		return &s
	case FileGone:
		g := v.FileGone()
		return &g
	}
	return nil
}
