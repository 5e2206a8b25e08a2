package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link/auth"
)

// filesGroup is rbcastd's files' group of group 5 (internal/daemon
// FilesGroup): the same interface, a group id of its own.
const filesGroup = 5 ^ 0x80000000

// keyedFilesCapture writes a capture of an rbcastd group 5 under the key
// in keyPath (encrypted, or MAC only) that sent a file: a message, then
// on the files' group a FileOffer naming "secret.bin", its three blocks,
// a receiver's FileStatus and the FileEnd, each sealed as the daemon's
// links seal them.
func keyedFilesCapture(t *testing.T, keyPath string, encrypt bool) string {
	t.Helper()
	key, err := auth.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	mac1, mac2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	var sealed [][]byte
	seal := func(group uint32, src [6]byte, h frame.Header, b frame.Body) {
		t.Helper()
		h.Group = group
		l := &sink{}
		a, err := auth.Wrap(l, auth.Config{Group: group, Key: key, Encrypt: encrypt, Now: func() time.Time { return time.Unix(1700000000, int64(len(sealed))) }})
		if err != nil {
			t.Fatal(err)
		}
		data := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
		if data, err = frame.Append(data, &h, b); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Send([][]byte{data}); err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, l.sent...)
	}
	var hash [frame.FileHashLen]byte
	hash[0] = 0xab
	seal(5, mac1, frame.Header{Sender: 1, Incarnation: 1, Seq: 0, AckBase: 1, Acks: []uint32{1, 0}}, &frame.Payload{T: frame.Data, Data: []byte("hello")})
	seal(filesGroup, mac1, frame.Header{Sender: 1, Incarnation: 1}, &frame.FileOfferBody{ID: 1, Size: 3000, BlockSize: 1464, Stamp: 5, Hash: hash, Name: []byte("secret.bin")})
	for i := range uint32(3) {
		seal(filesGroup, mac1, frame.Header{Sender: 1, Incarnation: 1, Seq: i}, &frame.FileDataBody{ID: 1, Data: bytes.Repeat([]byte{byte(i)}, min(1464, 3000-int(i)*1464))})
	}
	seal(filesGroup, mac2, frame.Header{Sender: 2, Incarnation: 1, Seq: 1}, &frame.FileStatusBody{ID: 1, Incarnation: 1, State: frame.FileReceiving, Credit: 256, Held: 2, Top: 3, Missing: []frame.Range{{First: 1, Last: 1}}})
	seal(filesGroup, mac1, frame.Header{Sender: 1, Incarnation: 1}, &frame.FileEndBody{ID: 1, Blocks: 3, SRTT: 100, Awaited: []frame.MemberID{2}, Hash: hash})

	return writeFrames(t, "files.pcap", sealed)
}

// timeline, summary and check -key-file verify the files' group beside
// the message group (one Verifier per interface and group) and decode the
// file frames, decrypted under -encrypt; with another key every frame is
// listed as dropped with its reason and the command fails naming a key
// mismatch, instead of judging an empty capture.
func TestFilesKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyPath, wrongPath := filepath.Join(dir, "group.key"), filepath.Join(dir, "other.key")
	if _, err := auth.Generate(keyPath, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Generate(wrongPath, nil); err != nil {
		t.Fatal(err)
	}
	for _, encrypt := range []bool{false, true} {
		t.Run(map[bool]string{false: "mac", true: "encrypt"}[encrypt], func(t *testing.T) {
			capt := keyedFilesCapture(t, keyPath, encrypt)
			code, out, errOut := runCmd("timeline", "-key-file", keyPath, capt)
			if code != 0 {
				t.Fatalf("timeline -key-file: exit %d\n%s%s", code, out, errOut)
			}
			for _, want := range []string{
				"auth: 7 frames verified, 0 dropped before any core",
				"Data                0  acks@1=[1 0] g5 5B AUTH",
				`g2147483653 file 1 "secret.bin" 3000B in 3 blocks of 1464 sha256 ab00000000000000`,
				"g2147483653 file 1 block 2 72B",
				"g2147483653 file 1.1 receiving held 2 top 3 credit 256 missing 1",
				"g2147483653 file 1 end: 3 blocks, srtt 100µs, awaiting [2] hash ab00000000000000",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("timeline -key-file lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "ERROR") {
				t.Errorf("timeline -key-file shows undecoded frames:\n%s", out)
			}
			if encrypt {
				// Without the key the name and the structured bodies are
				// ciphertext.
				_, plain, _ := runCmd("timeline", capt)
				if strings.Contains(plain, "secret.bin") || !strings.Contains(plain, "ERROR") {
					t.Errorf("timeline without the key of an encrypted capture:\n%s", plain)
				}
			}
			if code, out, errOut := runCmd("summary", "-key-file", keyPath, capt); code != 0 || !strings.Contains(out, "auth: 7 frames verified") {
				t.Errorf("summary -key-file: exit %d\n%s%s", code, out, errOut)
			}
			if code, out, errOut := runCmd("check", "-key-file", keyPath, capt); code != 0 || !strings.Contains(out, "all invariants hold") {
				t.Errorf("check -key-file: exit %d\n%s%s", code, out, errOut)
			}
			for _, cmd := range []string{"timeline", "check"} {
				code, out, errOut := runCmd(cmd, "-key-file", wrongPath, capt)
				wantOut := "auth: 0 frames verified, 7 dropped before any core (as a member's link drops them)\n  7 dropped: a key id of neither key slot (frames 1 2 3 4 5 6 7)\n"
				wantErr := "pcap-replay " + cmd + ": -key-file: none of the capture's 7 rbcast frames verified: a key mismatch (the frames were sealed with another key than -key-file's)\n"
				if code != 2 || out != wantOut || errOut != wantErr {
					t.Errorf("%s -key-file (another key): exit %d\n%s%s\nwant exit 2\n%s%s", cmd, code, out, errOut, wantOut, wantErr)
				}
			}
		})
	}
}
