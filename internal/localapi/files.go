package localapi

// Files (docs/local-api.md, "Files"): rbcastd sendfile and recvfile.

// File message types.
const (
	// TSendFile: send one file to the group (rbcastd sendfile).
	TSendFile Type = 0x0b
	// TReceiveFiles: store the files the group sends in a directory, and
	// report each (rbcastd recvfile).
	TReceiveFiles Type = 0x0c
	// TSendFileAlg: SendFile naming the hash's algorithm (version 4).
	TSendFileAlg Type = 0x0d

	// TFileQueued answers SendFile: the file's id, size and hash.
	TFileQueued Type = 0x89
	// TFileVerdict: the outcome of a file sent on this connection.
	TFileVerdict Type = 0x8a
	// TReceivingFiles answers ReceiveFiles.
	TReceivingFiles Type = 0x8b
	// TFileReport: a file received (stored, hash checked) or given up.
	TFileReport Type = 0x8c
	// TFileSent: FileVerdict with the file's hash (version 3), for a
	// file whose FileQueued had none: the daemon hashed it as it sent it.
	TFileSent Type = 0x8d
	// TFileSentAlg: FileSent of a file hashed with another algorithm
	// than SHA-256, which it names (version 4).
	TFileSentAlg Type = 0x8e
	// TFileReportAlg: FileReport of such a file (version 4).
	TFileReportAlg Type = 0x8f
	// TFileRoom: a place is free at the daemon for a file queued, after
	// a SendFile refused with CodeQueuedBound on this connection
	// (version 6).
	TFileRoom Type = 0x90
)

// FileHashLen is the length of a file's hash (SHA-256 or BLAKE3).
const FileHashLen = 32

// Hash algorithms (frame.FileHashAlg's values): 0 in a message means
// SHA-256, the only one before version 4.
const (
	FileHashSHA256 uint8 = 1
	FileHashBLAKE3 uint8 = 2
)

// hashAlgByte reports whether alg goes in a message of its own type
// (SendFileAlg, FileSentAlg, FileReportAlg): any but SHA-256.
func hashAlgByte(alg uint8) bool { return alg != 0 && alg != FileHashSHA256 }

// SendFile asks the daemon to send the regular file at Path (absolute)
// to the group under Name (a relative path, '/'-separated). To lists the
// receivers the verdict waits for; empty means every member of the group
// but the daemon's own when the file's multicast pass ends. The daemon
// opens and hashes the file itself, so only a client of the daemon's own
// user (or root) may ask. It answers FileQueued, later FileVerdict, or an
// Error (code CodeRefused; the connection stays open). HashAlg names the
// algorithm the daemon hashes the file with (version 4: SendFileAlg);
// 0 (a plain SendFile) is SHA-256.
type SendFile struct {
	To      []uint16
	Name    string
	Path    string
	HashAlg uint8
}

// FileQueued answers SendFile: the file is queued as ID (unique for the
// daemon's incarnation), with the size and SHA-256 the daemon read. To a
// client of version 3 the daemon sends a Hash of zeros: it hashes the
// file as it sends it (not before its first block), and the file's
// verdict (TFileSent) carries the hash.
type FileQueued struct {
	ID   uint32
	Size uint64
	Hash [FileHashLen]byte
	Name string
}

// Causes in FileMiss and FileReport (reliable/files.Cause).
const (
	FileCauseStorage   uint8 = 1  // the receiver could not store it
	FileCauseHash      uint8 = 2  // its hash never matched
	FileCauseClosed    uint8 = 3  // the sender closed the file (timed out)
	FileCauseAborted   uint8 = 4  // the sender gave it up
	FileCauseUnknown   uint8 = 5  // the sender does not know it
	FileCauseSilent    uint8 = 16 // silent past the failure timeout
	FileCauseLeft      uint8 = 17 // the sender left before the file's pass
	FileCauseRestarted uint8 = 18 // the sender restarted
	// FileCauseOldReceiver (a verdict's): the receiver is an rbcastd from
	// before offers without a hash (it judged the file against zeros).
	FileCauseOldReceiver uint8 = 19
	// FileCauseHashUnknown: the receiver does not know the file's hash
	// algorithm (it stored nothing it could not verify).
	FileCauseHashUnknown uint8 = 6
	// FileCauseDeclined: the receiver declined the file (at an rbcastd:
	// no recvfile client and no -inbox), and said so.
	FileCauseDeclined uint8 = 7
	// FileCauseOverMTU, FileCauseTooLarge, FileCauseNoSpace,
	// FileCauseNameTooLong: the file is beyond one of the receiver's
	// limits (its blocks larger than its MTU, larger than it takes: its
	// run -files-max-size or the most blocks it keeps track of, no room
	// on its disk, a name too long for its file system); it
	// refused the file and said which.
	FileCauseOverMTU     uint8 = 8
	FileCauseTooLarge    uint8 = 9
	FileCauseNoSpace     uint8 = 10
	FileCauseNameTooLong uint8 = 11
	// FileCauseTooBigForFS: the file is larger than the receiver's file
	// system (or its RLIMIT_FSIZE) allows a file to be; refused so too.
	FileCauseTooBigForFS uint8 = 12
	// FileCauseBadName: the file's name is not a local file path at the
	// receiver (absolute, "..", the directory itself, or under
	// .rbcast-partial); it refused the file.
	FileCauseBadName uint8 = 13
	// FileCauseOldHashAlg (a verdict's): the receiver is an rbcastd from
	// before hash algorithms had names, which cannot read the offer of a
	// file not hashed with SHA-256.
	FileCauseOldHashAlg uint8 = 20
)

// FileMiss is a receiver the verdict waited for that does not hold the
// file: why, and how many of the file's blocks it last said it held.
type FileMiss struct {
	Member       uint16
	Cause        uint8
	Held, Blocks uint32
}

// FileVerdict is the outcome of file ID: the receivers that hold it
// (hash checked), those that do not, and Text (the sender's read error
// of a file it gave up, or why the daemon abandoned it). Hash, if not
// zeros, is the file's hash, hashed as it was sent, under HashAlg (0:
// SHA-256); such a verdict is a TFileSent message (version 3), or for
// another algorithm than SHA-256 a TFileSentAlg (version 4), else a
// TFileVerdict.
type FileVerdict struct {
	ID      uint32
	Done    []uint16
	Missing []FileMiss
	Text    string
	Hash    [FileHashLen]byte
	HashAlg uint8
}

// FileRoom tells a client that a SendFile of it was refused with
// CodeQueuedBound that a place for a queued file has become free since
// (a file's verdict, or a SendFile that took a place and failed): it
// may send the file again, and may be refused again (another client
// took the place first), after which another FileRoom comes once the
// next place frees. The daemon sends one FileRoom however many
// refusals came since the last, always after them; it carries nothing
// (version 6).
type FileRoom struct{}

// ReceiveFiles asks the daemon to store the files the group sends from
// now on under Dir (absolute; the daemon writes it, so only a client of
// the daemon's own user, or root, may ask) while the connection is open,
// and to report each with FileReport. The daemon answers
// ReceivingFiles, or an Error; after ReceivingFiles the client only
// reads.
type ReceiveFiles struct{ Dir string }

// ReceivingFiles answers ReceiveFiles: files are stored under Dir.
type ReceivingFiles struct{ Dir string }

// FileReport kinds.
const (
	FileReceived   uint8 = 1 // stored under its name, hash checked
	FileIncomplete uint8 = 2 // given up (Cause says why); nothing under its name
)

// FileReport reports a file received here, or given up. HashAlg is
// Hash's algorithm (0: SHA-256); another than SHA-256 makes it a
// TFileReportAlg (version 4).
type FileReport struct {
	Kind        uint8
	Cause       uint8 // FileIncomplete
	Sender      uint16
	Incarnation uint32
	ID          uint32
	Size        uint64
	Hash        [FileHashLen]byte
	Name        string
	HashAlg     uint8
}

func (m *SendFile) Type() Type {
	if hashAlgByte(m.HashAlg) {
		return TSendFileAlg
	}
	return TSendFile
}
func (*FileQueued) Type() Type { return TFileQueued }
func (m *FileVerdict) Type() Type {
	switch {
	case m.Hash == ([FileHashLen]byte{}):
		return TFileVerdict
	case hashAlgByte(m.HashAlg):
		return TFileSentAlg
	}
	return TFileSent
}
func (*FileRoom) Type() Type       { return TFileRoom }
func (*ReceiveFiles) Type() Type   { return TReceiveFiles }
func (*ReceivingFiles) Type() Type { return TReceivingFiles }
func (m *FileReport) Type() Type {
	if hashAlgByte(m.HashAlg) {
		return TFileReportAlg
	}
	return TFileReport
}

// MaxFileName bounds a file's name (frame.MaxFileName's value).
const MaxFileName = 4096

// Layout:
//
//	SendFile:       type, n u16, n × member u16, name length u16, name, path
//	SendFileAlg:    type, alg u8, then as SendFile
//	FileQueued:     type, id u32, size u64, hash [32], name
//	FileVerdict:    type, id u32, done n u16, n × member u16, missing m u16,
//	                m × (member u16, cause u8, held u32, blocks u32), text
//	FileSent:       type, id u32, hash [32], then as FileVerdict
//	FileSentAlg:    type, id u32, alg u8, hash [32], then as FileVerdict
//	ReceiveFiles:   type, dir
//	ReceivingFiles: type, dir
//	FileReport:     type, kind u8, cause u8, sender u16, incarnation u32,
//	                id u32, size u64, hash [32], name
//	FileReportAlg:  as FileReport, alg u8 before the hash
//	FileRoom:       type
const (
	sendFileMin    = 5
	fileQueuedMin  = 45
	fileVerdictMin = 9
	fileMissLen    = 11
	fileReportMin  = 53 // TFileReport; TFileReportAlg one more
)

func (m *SendFile) Append(b []byte) []byte {
	b = append(b, byte(m.Type()))
	if m.Type() == TSendFileAlg {
		b = append(b, m.HashAlg)
	}
	b = be.AppendUint16(b, uint16(len(m.To)))
	for _, id := range m.To {
		b = be.AppendUint16(b, id)
	}
	b = be.AppendUint16(b, uint16(len(m.Name)))
	return append(append(b, m.Name...), m.Path...)
}

func (m *FileQueued) Append(b []byte) []byte {
	b = be.AppendUint32(append(b, byte(TFileQueued)), m.ID)
	b = be.AppendUint64(b, m.Size)
	return append(append(b, m.Hash[:]...), m.Name...)
}

func (m *FileVerdict) Append(b []byte) []byte {
	b = be.AppendUint32(append(b, byte(m.Type())), m.ID)
	switch m.Type() {
	case TFileSentAlg:
		b = append(append(b, m.HashAlg), m.Hash[:]...)
	case TFileSent:
		b = append(b, m.Hash[:]...)
	}
	b = be.AppendUint16(b, uint16(len(m.Done)))
	for _, id := range m.Done {
		b = be.AppendUint16(b, id)
	}
	b = be.AppendUint16(b, uint16(len(m.Missing)))
	for _, x := range m.Missing {
		b = be.AppendUint16(b, x.Member)
		b = append(b, x.Cause)
		b = be.AppendUint32(be.AppendUint32(b, x.Held), x.Blocks)
	}
	t := m.Text
	if len(t) > MaxText {
		t = t[:MaxText]
	}
	return append(b, t...)
}

func (*FileRoom) Append(b []byte) []byte { return append(b, byte(TFileRoom)) }

func (m *ReceiveFiles) Append(b []byte) []byte {
	return append(append(b, byte(TReceiveFiles)), m.Dir...)
}

func (m *ReceivingFiles) Append(b []byte) []byte {
	return append(append(b, byte(TReceivingFiles)), m.Dir...)
}

func (m *FileReport) Append(b []byte) []byte {
	b = append(b, byte(m.Type()), m.Kind, m.Cause)
	b = be.AppendUint16(b, m.Sender)
	b = be.AppendUint32(b, m.Incarnation)
	b = be.AppendUint32(b, m.ID)
	b = be.AppendUint64(b, m.Size)
	if m.Type() == TFileReportAlg {
		b = append(b, m.HashAlg)
	}
	return append(append(b, m.Hash[:]...), m.Name...)
}

// decodeFile decodes the file messages (allocating: they are rare).
func decodeFile(p []byte) (Message, error) {
	t := Type(p[0])
	atLeast := func(n int) error {
		if len(p) < n {
			return decodeErr(t, len(p), "%d bytes, want at least %d", len(p), n)
		}
		return nil
	}
	checkPath := func(off int, what string) error {
		switch {
		case len(p)-off > MaxText:
			return decodeErr(t, off, "a %s of %d bytes, at most %d", what, len(p)-off, MaxText)
		case len(p) == off:
			return decodeErr(t, off, "no %s", what)
		}
		return nil
	}
	// checkAlg refuses an algorithm byte that a plain message says
	// (SHA-256) or that is reserved (0).
	checkAlg := func(off int) error {
		if !hashAlgByte(p[off]) {
			return decodeErr(t, off, "hash algorithm %d (SHA-256 goes in the message without the byte; 0 is reserved)", p[off])
		}
		return nil
	}
	switch t {
	case TSendFile, TSendFileAlg:
		m := &SendFile{}
		off := 1
		if t == TSendFileAlg {
			if err := atLeast(sendFileMin + 1); err != nil {
				return nil, err
			}
			if err := checkAlg(1); err != nil {
				return nil, err
			}
			m.HashAlg, off = p[1], 2
		}
		if err := atLeast(off - 1 + sendFileMin); err != nil {
			return nil, err
		}
		n := int(be.Uint16(p[off:]))
		off += 2
		if len(p)-off < 2*n+2 {
			return nil, decodeErr(t, off, "%d members need %d bytes and the name's length, only %d left", n, 2*n, len(p)-off)
		}
		if n > 0 {
			m.To = make([]uint16, n)
		}
		for i := range n {
			m.To[i] = be.Uint16(p[off:])
			off += 2
		}
		nl := int(be.Uint16(p[off:]))
		off += 2
		switch {
		case nl == 0:
			return nil, decodeErr(t, off-2, "an empty name")
		case nl > MaxFileName:
			return nil, decodeErr(t, off-2, "a name of %d bytes, at most %d", nl, MaxFileName)
		case nl > len(p)-off:
			return nil, decodeErr(t, off-2, "a name of %d bytes, only %d left", nl, len(p)-off)
		}
		m.Name = string(p[off : off+nl])
		off += nl
		if err := checkPath(off, "path"); err != nil {
			return nil, err
		}
		m.Path = string(p[off:])
		return m, nil
	case TFileQueued:
		if err := atLeast(fileQueuedMin); err != nil {
			return nil, err
		}
		m := &FileQueued{ID: be.Uint32(p[1:]), Size: be.Uint64(p[5:]), Hash: [FileHashLen]byte(p[13:45]), Name: string(p[45:])}
		if len(m.Name) > MaxFileName {
			return nil, decodeErr(t, 45, "a name of %d bytes, at most %d", len(m.Name), MaxFileName)
		}
		return m, nil
	case TFileVerdict, TFileSent, TFileSentAlg:
		least, off, at := fileVerdictMin, 5, 5
		switch t {
		case TFileSent:
			least, off = fileVerdictMin+FileHashLen, 5+FileHashLen
		case TFileSentAlg:
			least, off, at = fileVerdictMin+1+FileHashLen, 6+FileHashLen, 6
		}
		if err := atLeast(least); err != nil {
			return nil, err
		}
		m := &FileVerdict{ID: be.Uint32(p[1:])}
		if t == TFileSentAlg {
			if err := checkAlg(5); err != nil {
				return nil, err
			}
			m.HashAlg = p[5]
		}
		if t != TFileVerdict {
			if m.Hash = [FileHashLen]byte(p[at:]); m.Hash == ([FileHashLen]byte{}) {
				return nil, decodeErr(t, at, "a hash of zeros (a verdict without a hash is a FileVerdict)")
			}
		}
		n := int(be.Uint16(p[off:]))
		off += 2
		if len(p)-off < 2*n+2 {
			return nil, decodeErr(t, off, "%d members done need %d bytes and the missing count, only %d left", n, 2*n, len(p)-off)
		}
		if n > 0 {
			m.Done = make([]uint16, n)
		}
		for i := range n {
			m.Done[i] = be.Uint16(p[off:])
			off += 2
		}
		k := int(be.Uint16(p[off:]))
		off += 2
		if len(p)-off < k*fileMissLen {
			return nil, decodeErr(t, off, "%d members missing need %d bytes, only %d left", k, k*fileMissLen, len(p)-off)
		}
		if k > 0 {
			m.Missing = make([]FileMiss, k)
		}
		for i := range k {
			m.Missing[i] = FileMiss{Member: be.Uint16(p[off:]), Cause: p[off+2], Held: be.Uint32(p[off+3:]), Blocks: be.Uint32(p[off+7:])}
			off += fileMissLen
		}
		if len(p)-off > MaxText {
			return nil, decodeErr(t, off, "%d bytes of text, at most %d", len(p)-off, MaxText)
		}
		m.Text = string(p[off:])
		return m, nil
	case TFileRoom:
		if len(p) != 1 {
			return nil, decodeErr(t, 1, "%d bytes, want 1", len(p))
		}
		return &FileRoom{}, nil
	case TReceiveFiles, TReceivingFiles:
		if err := checkPath(1, "directory"); err != nil {
			return nil, err
		}
		if t == TReceiveFiles {
			return &ReceiveFiles{Dir: string(p[1:])}, nil
		}
		return &ReceivingFiles{Dir: string(p[1:])}, nil
	case TFileReport, TFileReportAlg:
		at := 21
		if t == TFileReportAlg {
			at = 22
		}
		if err := atLeast(at + FileHashLen); err != nil {
			return nil, err
		}
		m := &FileReport{Kind: p[1], Cause: p[2], Sender: be.Uint16(p[3:]), Incarnation: be.Uint32(p[5:]), ID: be.Uint32(p[9:]),
			Size: be.Uint64(p[13:]), Hash: [FileHashLen]byte(p[at : at+FileHashLen]), Name: string(p[at+FileHashLen:])}
		if t == TFileReportAlg {
			if err := checkAlg(21); err != nil {
				return nil, err
			}
			m.HashAlg = p[21]
		}
		switch {
		case m.Kind != FileReceived && m.Kind != FileIncomplete:
			return nil, decodeErr(t, 1, "kind %d, want 1 (received) or 2 (incomplete)", m.Kind)
		case len(m.Name) > MaxFileName:
			return nil, decodeErr(t, at+FileHashLen, "a name of %d bytes, at most %d", len(m.Name), MaxFileName)
		}
		return m, nil
	}
	return nil, decodeErr(t, 0, "unknown message type %#02x", uint8(t))
}

// isFile reports whether t is a file message.
func isFile(t Type) bool {
	switch t {
	case TSendFile, TSendFileAlg, TReceiveFiles, TFileQueued, TFileVerdict, TReceivingFiles, TFileReport, TFileSent, TFileSentAlg, TFileReportAlg, TFileRoom:
		return true
	}
	return false
}

func fileTypeName(t Type) string {
	switch t {
	case TSendFile:
		return "SendFile"
	case TReceiveFiles:
		return "ReceiveFiles"
	case TFileQueued:
		return "FileQueued"
	case TFileVerdict:
		return "FileVerdict"
	case TReceivingFiles:
		return "ReceivingFiles"
	case TFileReport:
		return "FileReport"
	case TFileSent:
		return "FileSent"
	case TSendFileAlg:
		return "SendFileAlg"
	case TFileSentAlg:
		return "FileSentAlg"
	case TFileReportAlg:
		return "FileReportAlg"
	case TFileRoom:
		return "FileRoom"
	}
	return ""
}
