package localapi

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden")

// goldenCases is one example of every message type; each has a vector in
// testdata/golden/<name>.hex, the bytes docs/local-api.md describes.
func goldenCases() []struct {
	name string
	m    Message
} {
	return []struct {
		name string
		m    Message
	}{
		{"hello", &Hello{Version: 1, Flags: HelloWaitReady}},
		{"send", &Send{Data: []byte("hello, group")}},
		{"send_unreliable", &SendUnreliable{Data: []byte("at most once")}},
		{"send_level_safe", &SendLevel{Level: OrderSafe}},
		{"flush", &Flush{}},
		{"subscribe_all", &Subscribe{From: AllMembers}},
		{"subscribe_one", &Subscribe{From: 3}},
		{"status", &Status{}},
		{"send_batch", &SendBatch{Msgs: [][]byte{[]byte("first"), {}, []byte("third message")}}},
		{"deliver_batch", &DeliverBatch{Msgs: []Deliver{{From: 1, Data: []byte("from one")}, {From: 3, Data: []byte("from three")}}}},
		{"welcome", &Welcome{Version: 1, Self: 2, Group: 7, Members: 4, Order: OrderTotal, Ready: true, MaxMessage: 1460}},
		{"welcome_safe", &Welcome{Version: 2, Self: 1, Group: 7, Members: 3, Order: OrderSafe, Ready: true, MaxMessage: 1460}},
		{"welcome_not_ready", &Welcome{Version: 1, Self: NoMember, Group: 7, Members: 4}},
		{"flushed", &Flushed{Accepted: 3425}},
		{"subscribed", &Subscribed{From: 3}},
		{"deliver", &Deliver{From: 3, Data: []byte("hello, group")}},
		{"status_json", &StatusJSON{JSON: []byte(`{"group":7,"self":2,"ready":true}`)}},
		{"error", &Error{Code: CodeTooLarge, Text: "message of 2000 bytes; the daemon accepts at most 1460 bytes per message"}},
		{"hello_v2", &Hello{Version: 2, Flags: HelloWaitReady | HelloBatch}},
		{"ring_setup", &RingSetup{Ring: RingSend, Size: 4 << 20}},
		{"doorbell", &Doorbell{Ring: RingDeliver}},
		{"ring_ready", &RingReady{Ring: RingDeliver, Size: 4 << 20}},
		{"daemon_doorbell", &DaemonDoorbell{Ring: RingSend}},
		{"rekey_install", &Rekey{Step: RekeyInstall, Path: "/etc/rbcast/next.key"}},
		{"rekey_activate", &Rekey{Step: RekeyActivate, Fingerprint: 0x3f2a9c0d11e4b752}},
		{"rekey_retire", &Rekey{Step: RekeyRetire}},
		{"send_file", &SendFile{To: []uint16{2, 5}, Name: "images/disk.img", Path: "/srv/images/disk.img"}},
		{"send_file_all", &SendFile{Name: "notes.txt", Path: "/home/op/notes.txt"}},
		{"file_queued", &FileQueued{ID: 3, Size: 1 << 30, Hash: goldenHash(), Name: "images/disk.img"}},
		{"file_verdict", &FileVerdict{ID: 3, Done: []uint16{1, 2}, Missing: []FileMiss{{Member: 4, Cause: FileCauseSilent, Held: 1000, Blocks: 733431}}}},
		{"file_verdict_ok", &FileVerdict{ID: 4, Done: []uint16{1}}},
		{"file_sent", &FileVerdict{ID: 5, Done: []uint16{1, 2}, Hash: goldenHash()}},
		{"file_sent_blake3", &FileVerdict{ID: 5, Done: []uint16{1}, Missing: []FileMiss{{Member: 2, Cause: FileCauseOldHashAlg, Blocks: 23}}, Hash: goldenHash(), HashAlg: FileHashBLAKE3}},
		{"send_file_blake3", &SendFile{To: []uint16{2}, Name: "images/disk.img", Path: "/srv/images/disk.img", HashAlg: FileHashBLAKE3}},
		{"receive_files", &ReceiveFiles{Dir: "/srv/inbox"}},
		{"receiving_files", &ReceivingFiles{Dir: "/srv/inbox"}},
		{"file_report", &FileReport{Kind: FileReceived, Sender: 1, Incarnation: 7, ID: 3, Size: 1 << 30, Hash: goldenHash(), Name: "images/disk.img"}},
		{"file_report_incomplete", &FileReport{Kind: FileIncomplete, Cause: FileCauseRestarted, Sender: 1, Incarnation: 7, ID: 4, Size: 12, Hash: goldenHash(), Name: "notes.txt"}},
		{"file_report_blake3", &FileReport{Kind: FileReceived, Sender: 1, Incarnation: 7, ID: 3, Size: 1 << 30, Hash: goldenHash(), Name: "images/disk.img", HashAlg: FileHashBLAKE3}},
		{"file_room", &FileRoom{}},
		{"error_queued_bound", &Error{Code: CodeQueuedBound, Text: "sendfile c: 2 files are queued at this daemon and not yet judged, its bound (2: of its RLIMIT_NOFILE, 258, 64 kept for files still open after their verdict, 128 for files it receives, 64 for the rest); send it again after a verdict"}},
	}
}

// allTypes lists every message type, so a new one without a vector fails.
var allTypes = []Type{THello, TSend, TFlush, TSubscribe, TStatus, TSendBatch, TWelcome, TFlushed, TSubscribed, TDeliver, TStatusJSON, TDeliverBatch, TError,
	TRingSetup, TDoorbell, TRingReady, TDaemonDoorbell, TRekey, TSendUnreliable, TSendLevel,
	TSendFile, TReceiveFiles, TFileQueued, TFileVerdict, TReceivingFiles, TFileReport,
	TSendFileAlg, TFileSentAlg, TFileReportAlg, TFileRoom}

func goldenHashBytes() []byte { h := goldenHash(); return h[:] }

// goldenHash is a file hash for the vectors: bytes 0, 1, ..., 31.
func goldenHash() (h [FileHashLen]byte) {
	for i := range h {
		h[i] = byte(i)
	}
	return h
}

func hexDump(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		n := min(16, len(b))
		s.WriteString(hex.EncodeToString(b[:n]))
		s.WriteByte('\n')
		b = b[n:]
	}
	return s.String()
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func TestGoldenVectors(t *testing.T) {
	seen := map[Type]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			got := c.m.Append(nil)
			path := filepath.Join("testdata", "golden", c.name+".hex")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(hexDump(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := readHex(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from %s:\n got %x\nwant %x", path, got, want)
			}
			m, err := Decode(want)
			if err != nil {
				t.Fatalf("golden vector does not decode: %v", err)
			}
			if !reflect.DeepEqual(m, c.m) {
				t.Fatalf("decoded %#v, want %#v", m, c.m)
			}
			seen[m.Type()] = true
		})
	}
	for _, ty := range allTypes {
		if !seen[ty] {
			t.Errorf("message type %v has no golden vector", ty)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		p    []byte
		want string
	}{
		{"empty", nil, "empty packet"},
		{"unknown type", []byte{0x42}, "unknown message type 0x42"},
		{"short hello", []byte{byte(THello), 0, 1}, "bad Hello message at byte 3: 3 bytes, want 5"},
		{"long flush", []byte{byte(TFlush), 0}, "bad Flush message at byte 1: 2 bytes, want 1"},
		{"short deliver", []byte{byte(TDeliver), 0}, "bad Deliver message at byte 2: 2 bytes, want at least 3"},
		{"welcome order", (&Welcome{Version: 1}).Append(nil)[:11:11], "bad Welcome message at byte 11: 11 bytes, want 17"},
		{"welcome bad order", func() []byte { b := (&Welcome{Version: 1}).Append(nil); b[11] = 9; return b }(), "at byte 11: order 9"},
		{"welcome bad ready", func() []byte { b := (&Welcome{Version: 1}).Append(nil); b[12] = 2; return b }(), "at byte 12: ready flag 2"},
		{"empty batch", []byte{byte(TSendBatch)}, "bad SendBatch message at byte 1: no messages"},
		{"short rekey", []byte{byte(TRekey), 1, 0}, "bad Rekey message at byte 3: 3 bytes, want at least 10"},
		{"rekey step", (&Rekey{Step: 4}).Append(nil), "bad Rekey message at byte 1: step 4, want 1 (install), 2 (activate) or 3 (retire)"},
		{"rekey install no path", (&Rekey{Step: RekeyInstall}).Append(nil), "bad Rekey message at byte 10: install without a key file path"},
		{"rekey activate nothing", (&Rekey{Step: RekeyActivate}).Append(nil), "bad Rekey message at byte 2: activate without a fingerprint"},
		{"batch entry cut", []byte{byte(TSendBatch), 0, 0, 0, 5, 'a', 'b'}, "bad SendBatch message at byte 1: message of 5 bytes, only 2 left"},
		{"batch header cut", []byte{byte(TSendBatch), 0, 0, 0, 1, 'a', 0, 0}, "bad SendBatch message at byte 6: entry header of 4 bytes cut short: 2 left"},
		{"deliver batch cut", []byte{byte(TDeliverBatch), 0, 1, 0, 0, 0, 9}, "bad DeliverBatch message at byte 3: message of 9 bytes, only 0 left"},
		{"batch too big", append([]byte{byte(TSendBatch)}, make([]byte, MaxBatch)...), "at most 65536"},
		{"ring setup short", []byte{byte(TRingSetup), 0, 0, 1}, "bad RingSetup message at byte 4: 4 bytes, want 6"},
		{"ring setup bad ring", []byte{byte(TRingSetup), 2, 0, 1, 0, 0}, "bad RingSetup message at byte 1: ring 2"},
		{"doorbell bad ring", []byte{byte(TDaemonDoorbell), 7}, "bad DaemonDoorbell message at byte 1: ring 7"},
		{"send level bad level", []byte{byte(TSendLevel), 3}, "bad SendLevel message at byte 1: level 3, want 0 (fifo), 1 (agreed) or 2 (safe)"},
		{"send level short", []byte{byte(TSendLevel)}, "bad SendLevel message at byte 1: 1 bytes, want 2"},
		{"error text too long", append([]byte{byte(TError), 0, 1}, make([]byte, MaxText+1)...), "at most 4096"},
		{"send file no path", (&SendFile{Name: "a"}).Append(nil), "bad SendFile message at byte 6: no path"},
		{"send file empty name", (&SendFile{Path: "/a"}).Append(nil), "bad SendFile message at byte 3: an empty name"},
		{"send file members cut", []byte{byte(TSendFile), 0, 9, 0, 1}, "bad SendFile message at byte 3: 9 members need 18 bytes"},
		{"send file name cut", []byte{byte(TSendFile), 0, 0, 0, 9, 'a'}, "bad SendFile message at byte 3: a name of 9 bytes, only 1 left"},
		{"verdict missing cut", []byte{byte(TFileVerdict), 0, 0, 0, 1, 0, 0, 0, 2, 0}, "bad FileVerdict message at byte 9: 2 members missing need 22 bytes, only 1 left"},
		{"sent zero hash", append(append([]byte{byte(TFileSent), 0, 0, 0, 1}, make([]byte, FileHashLen)...), 0, 0, 0, 0), "bad FileSent message at byte 5: a hash of zeros"},
		{"sent short", []byte{byte(TFileSent), 0, 0, 0, 1, 0, 0, 0, 0}, "bad FileSent message"},
		{"sent alg sha256", append(append([]byte{byte(TFileSentAlg), 0, 0, 0, 1, 1}, goldenHashBytes()...), 0, 0, 0, 0), "hash algorithm 1 (SHA-256 goes in the message without the byte"},
		{"sent alg zero hash", append(append([]byte{byte(TFileSentAlg), 0, 0, 0, 1, 2}, make([]byte, FileHashLen)...), 0, 0, 0, 0), "at byte 6: a hash of zeros"},
		{"send file alg 0", append([]byte{byte(TSendFileAlg), 0}, (&SendFile{Name: "a", Path: "/a"}).Append(nil)[1:]...), "at byte 1: hash algorithm 0"},
		{"file report alg 1", func() []byte { b := (&FileReport{Kind: 1, HashAlg: 2}).Append(nil); b[21] = 1; return b }(), "at byte 21: hash algorithm 1"},
		{"receive files no dir", []byte{byte(TReceiveFiles)}, "bad ReceiveFiles message at byte 1: no directory"},
		{"file report kind", func() []byte { b := (&FileReport{Kind: 1}).Append(nil); b[1] = 3; return b }(), "bad FileReport message at byte 1: kind 3"},
		{"file queued short", []byte{byte(TFileQueued), 0, 0, 0, 1}, "bad FileQueued message at byte 5: 5 bytes, want at least 45"},
		{"file room long", []byte{byte(TFileRoom), 0}, "bad FileRoom message at byte 1: 2 bytes, want 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode(c.p)
			if err == nil {
				t.Fatalf("decoded %#v, want an error", m)
			}
			if !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want one containing %q wrapping ErrDecode", err, c.want)
			}
		})
	}
}

func TestErrorTextTruncated(t *testing.T) {
	b := (&Error{Code: CodeClosed, Text: strings.Repeat("x", MaxText+100)}).Append(nil)
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(m.(*Error).Text); got != MaxText {
		t.Fatalf("text of %d bytes, want it cut to %d", got, MaxText)
	}
}

// FuzzDecode: Decode never panics, and whatever decodes re-encodes to the
// same bytes.
func FuzzDecode(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.m.Append(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := Decode(p)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			return
		}
		if got := m.Append(nil); !bytes.Equal(got, p) {
			t.Fatalf("%v re-encodes to %x, decoded from %x", m.Type(), got, p)
		}
	})
}

// FuzzDecoder: a Decoder reused across packets decodes each as Decode
// does (nothing of one packet leaks into the next), and Entries yields a
// batch's entries, or its error, as Decode does.
func FuzzDecoder(f *testing.F) {
	cases := goldenCases()
	for i, c := range cases {
		f.Add(c.m.Append(nil), cases[(i+1)%len(cases)].m.Append(nil))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var d Decoder
		for _, p := range [][]byte{a, b, a} {
			want, werr := Decode(p)
			got, err := d.Decode(p)
			if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("Decoder: %v, Decode: %v", err, werr)
			}
			if err == nil && !bytes.Equal(got.Append(nil), want.Append(nil)) {
				t.Fatalf("Decoder gives %x, Decode %x", got.Append(nil), want.Append(nil))
			}
			if len(p) == 0 || Type(p[0]) != TSendBatch && Type(p[0]) != TDeliverBatch {
				continue
			}
			var entries []Deliver
			var eerr error
			for e, err := range Entries(p) {
				if err != nil {
					eerr = err
					break
				}
				entries = append(entries, e)
			}
			if (eerr == nil) != (werr == nil) {
				t.Fatalf("Entries: %v, Decode: %v", eerr, werr)
			}
			if eerr != nil {
				continue
			}
			switch m := want.(type) {
			case *SendBatch:
				for i, e := range entries {
					if !bytes.Equal(e.Data, m.Msgs[i]) || e.From != 0 {
						t.Fatalf("entry %d: %+v, Decode has %x", i, e, m.Msgs[i])
					}
				}
			case *DeliverBatch:
				if !reflect.DeepEqual(entries, m.Msgs) {
					t.Fatalf("Entries %+v, Decode %+v", entries, m.Msgs)
				}
			}
		}
	})
}

// A Decoder decodes a stream of packets without allocating.
func TestDecoderAllocs(t *testing.T) {
	var packets [][]byte
	for _, c := range goldenCases() {
		if t := c.m.Type(); t != TError && t != TRekey && !isFile(t) { // their text is a string: allocated, and rare
			packets = append(packets, c.m.Append(nil))
		}
	}
	var d Decoder
	for _, p := range packets { // grow the batches' slices
		d.Decode(p)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, p := range packets {
			if _, err := d.Decode(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of %d packets, want 0", allocs, len(packets))
	}
}

// A daemon of version 1 refuses the Hello of version 2 and closes the
// connection: Hello then connects again in version 1, and rings are
// refused with the reason.
func TestHelloFallsBackToVersion1(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "v1.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			buf := make([]byte, 100)
			n, _ := c.Read(buf)
			m, err := Decode(buf[:n])
			if h, ok := m.(*Hello); err == nil && ok && h.Version == 1 {
				c.Write((&Welcome{Version: 1, Self: 0, Group: 1, Members: 1, Ready: true, MaxMessage: 1000}).Append(nil))
				c.Read(buf) // until the client closes
			} else {
				c.Write((&Error{Code: CodeVersion, Text: "this daemon speaks local API version 1"}).Append(nil))
			}
			c.Close()
		}
	}()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	w, err := c.Hello(HelloWaitReady)
	if err != nil || w.Version != 1 || c.Version() != 1 {
		t.Fatalf("Hello against a version 1 daemon: %+v, %v (agreed %d)", w, err, c.Version())
	}
	if _, err := c.SendRing(0); err == nil || !strings.Contains(err.Error(), "rings need version 2") {
		t.Fatalf("SendRing on version 1: %v", err)
	}
}

// A client says hello again in the latest version an older daemon's
// refusal names, not in version 1 (rings and the files' hashes would be
// lost for a version-4 daemon; the queued files' bound's code for a
// version-6 client of a version-5 one).
func TestDaemonVersion(t *testing.T) {
	for text, want := range map[string]uint16{
		"this daemon speaks local API versions 1 to 5; the client speaks version 6": 5,
		"this daemon speaks local API versions 1 to 4; the client speaks version 5": 4,
		"this daemon speaks local API versions 1 to 2; the client speaks version 5": 2,
		"unsupported version": MinVersion,
		"this daemon speaks local API versions 1 to 9; the client speaks version 5": MinVersion,
	} {
		if got := daemonVersion(text); got != want {
			t.Errorf("%q: version %d, want %d", text, got, want)
		}
	}
}

// The client's errors start with what went wrong and name no program: a
// command prints its own name before them once (rbcastd's "rbcastd send:
// "), and a library user's program its own. An Error from the daemon is
// its text, whole, and the code's name.
func TestErrorsNameNoProgram(t *testing.T) {
	dir := t.TempDir()
	none := filepath.Join(dir, "rbcastd: none.sock")
	_, err := Dial(none)
	if want := "no daemon socket at " + none + " (is `rbcastd run` running for this group? pick its socket with -socket)"; err == nil || err.Error() != want {
		t.Errorf("Dial of a missing socket: %v, want %q", err, want)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(plain)
	if want := "nobody listens on " + plain + " (a stale socket: the daemon is not running)"; err == nil || err.Error() != want {
		t.Errorf("Dial of a regular file: %v, want %q", err, want)
	}
	var de *DialError
	if !errors.As(err, &de) || de.Path != plain {
		t.Errorf("Dial's error %v is not a *DialError of %s", err, plain)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{&DialError{Path: "/run/x.sock", Err: syscall.EACCES}, "permission denied on /run/x.sock (this user may not use the daemon's socket: see its mode and group)"},
		{&DialError{Path: "/run/x.sock", Err: syscall.EPROTOTYPE}, "/run/x.sock is not a SOCK_SEQPACKET socket (not an rbcastd socket?)"},
		{&DialError{Path: "/run/x.sock", Err: syscall.EIO}, "connecting to /run/x.sock: input/output error"},
		{ErrDaemonClosed, "the daemon closed the connection"},
		{&Error{Code: CodeRejoining, Text: "the group went on without this daemon"}, "the group went on without this daemon (rejoining)"},
		{fmt.Errorf("after 34 messages, writing out: %w", &Error{Code: CodeClosed, Text: "rbcastd stopped"}), "after 34 messages, writing out: rbcastd stopped (closed)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.err, got, c.want)
		}
	}
}
