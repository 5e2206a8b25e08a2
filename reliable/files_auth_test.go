package reliable

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/filestore"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable/files"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// The files' link under a group key (issue 25, docs/auth.md): the tests
// below run runners on a real-time simulated segment, each on a link
// wrapped by Wrap, and look at the wire under the authentication.

const filesAuthGroup = 99

func filesTestKey(t testing.TB, seed byte) *auth.Key {
	t.Helper()
	secret := make([]byte, auth.KeySize)
	for i := range secret {
		secret[i] = seed + byte(i)
	}
	k, err := auth.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// filesTap records what a link sends and lets a test change what it
// receives, underneath the authentication (on the wire).
type filesTap struct {
	link.Link
	mu     sync.Mutex
	sent   [][]byte
	tamper func(eth []byte)      // called on every frame received, may change it
	after  func(frames [][]byte) // called with every batch sent
}

// set sets the tap's hooks (the runner's loop reads them).
func (t *filesTap) set(tamper func([]byte), after func([][]byte)) {
	t.mu.Lock()
	t.tamper, t.after = tamper, after
	t.mu.Unlock()
}

func (t *filesTap) Unwrap() link.Link { return t.Link }

func (t *filesTap) Send(frames [][]byte) (int, error) {
	t.mu.Lock()
	for _, f := range frames {
		t.sent = append(t.sent, bytes.Clone(f))
	}
	after := t.after
	t.mu.Unlock()
	n, err := t.Link.Send(frames)
	if after != nil {
		after(frames[:n])
	}
	return n, err
}

func (t *filesTap) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := t.Link.Recv(deadline, frames)
	t.mu.Lock()
	tamper := t.tamper
	t.mu.Unlock()
	if tamper != nil {
		for _, f := range frames[:n] {
			tamper(f.Data)
		}
	}
	return n, err
}

func (t *filesTap) frames() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([][]byte(nil), t.sent...)
}

// keyedRun is a segment of runners, member i+1 on taps[i].
type keyedRun struct {
	net     *rtnet.Net
	taps    []*filesTap
	runners []*Files
	cols    []*fileReports
	dirs    []string
}

// startKeyed starts one runner per entry of keys, each with that
// authentication (nil: none), every link under a tap; tune, if set,
// adjusts each runner's configuration.
func startKeyed(t *testing.T, seed uint64, keys []*auth.Config, tune func(i int, c *files.Config)) *keyedRun {
	t.Helper()
	k := &keyedRun{net: rtnet.New(t, seed)}
	var ms []frame.MemberInfo
	for i := range keys {
		tp := &filesTap{Link: k.net.Attach(t, testnet.EndpointConfig{})}
		k.taps = append(k.taps, tp)
		ms = append(ms, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(tp.HardwareAddr()), Incarnation: 1})
	}
	for i, a := range keys {
		var l link.Link = k.taps[i]
		if a != nil {
			al, err := WrapFiles(l, filesAuthGroup, 0, *a)
			if err != nil {
				t.Fatal(err)
			}
			l = al
		}
		dir := t.TempDir()
		cfg := files.Config{Group: filesAuthGroup, Self: ms[i].ID, Members: ms, Rate: 20_000_000, Sink: &filestore.Dir{Root: dir}}
		if tune != nil {
			tune(i, &cfg)
		}
		r, err := StartFiles(l, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		c := newFileReports()
		r.Subscribe(c.add)
		k.runners, k.cols, k.dirs = append(k.runners, r), append(k.cols, c), append(k.dirs, dir)
	}
	return k
}

// filesPattern is 32 bytes the tests plant in a file and look for on the wire.
var filesPattern = []byte("rbcast issue 25: secret block!!!")

// plantedFile writes a file of random bytes with filesPattern at the start
// of every 1000 bytes, and returns its bytes and path.
func plantedFile(t *testing.T, size int) ([]byte, string) {
	t.Helper()
	data := make([]byte, size)
	rand.Read(data)
	for off := 0; off+len(filesPattern) <= size; off += 1000 {
		copy(data[off:], filesPattern)
	}
	path := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data, path
}

// send queues path from runner 0 and waits for its verdict.
func (k *keyedRun) send(t *testing.T, path string) files.Report {
	t.Helper()
	s, err := filestore.OpenSource(path, "data.bin")
	if err != nil {
		t.Fatal(err)
	}
	id, err := k.runners[0].Send(s.Outgoing(nil))
	if err != nil {
		t.Fatal(err)
	}
	var v files.Report
	k.cols[0].wait(t, "the verdict", func(rs []files.Report) bool {
		for _, r := range rs {
			if r.Kind == files.Verdict && r.Meta.ID == id {
				v = r
				return true
			}
		}
		return false
	})
	return v
}

// received checks that receiver i stored data.
func (k *keyedRun) received(t *testing.T, i int, data []byte) {
	t.Helper()
	k.cols[i].wait(t, "received", func(rs []files.Report) bool { return len(rs) > 0 && rs[0].Kind == files.Received })
	got, err := os.ReadFile(filepath.Join(k.dirs[i], "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("member %d stored %d bytes that differ from the %d sent", i+1, len(got), len(data))
	}
}

// A file sent on authenticated links arrives byte for byte; every frame
// on the wire carries a tag; with Encrypt no frame holds the file's
// plaintext (a 32-byte pattern planted in it), without it they do (the
// search finds what is there).
func TestFilesAuthFileArrives(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(map[bool]string{false: "mac", true: "encrypt"}[encrypt], func(t *testing.T) {
			key := filesTestKey(t, 1)
			a := &auth.Config{Key: key, Encrypt: encrypt}
			k := startKeyed(t, 3, []*auth.Config{a, a, a}, nil)
			data, path := plantedFile(t, 300_000)
			if v := k.send(t, path); !v.OK() {
				t.Fatalf("verdict not OK: %v", v)
			}
			for i := 1; i < 3; i++ {
				k.received(t, i, data)
				st := k.runners[i].Stats()
				if st.Auth == nil || st.Auth.Verified == 0 || st.Auth.Dropped() != 0 || st.Auth.Encrypt != encrypt || st.Auth.Active != key.Fingerprint() {
					t.Errorf("member %d: auth stats %+v", i+1, st.Auth)
				}
			}
			wire := k.taps[0].frames()
			planted := 0
			for _, eth := range wire {
				_, b, err := frame.SplitEthernet(eth, frame.EtherType)
				if err != nil {
					t.Fatal(err)
				}
				v, err := frame.ParseSealed(b)
				if err != nil || v.Flags()&frame.FlagAuth == 0 {
					t.Fatalf("a frame on the wire without an auth section (%v): %x", err, eth)
				}
				if bytes.Contains(eth, filesPattern) {
					planted++
				}
			}
			if st := k.runners[0].Stats(); st.Auth == nil || st.Auth.Sent < uint64(len(wire)) {
				t.Errorf("sender's auth stats %+v, %d frames on the wire", st.Auth, len(wire))
			}
			switch {
			case encrypt && planted > 0:
				t.Fatalf("%d of %d frames on the wire hold the file's plaintext (the 32-byte pattern) under -encrypt", planted, len(wire))
			case !encrypt && planted == 0:
				t.Fatalf("no frame of %d on the wire holds the pattern without encryption: the search finds nothing", len(wire))
			}
			t.Logf("%d frames on the wire, %d with the pattern", len(wire), planted)
		})
	}
}

// Tampered and forged frames of the files' group are dropped by the
// authentication and counted by reason, and the transfer completes
// byte for byte: member 2 has every 5th FileData frame it receives
// changed on its way in (a bit of the body flipped, the CRC
// recomputed); a rogue station replays the sender's frames and sends
// FileData and FileEnd frames of its own in the sender's name.
func TestFilesAuthForgedFramesDropped(t *testing.T) {
	key := filesTestKey(t, 1)
	a := &auth.Config{Key: key, Encrypt: true}
	k := startKeyed(t, 5, []*auth.Config{a, a, a}, nil)
	rogue := k.net.Attach(t, testnet.EndpointConfig{})
	tampered := 0 // the receiving loop's only
	k.taps[1].set(func(eth []byte) {
		_, b, err := frame.SplitEthernet(eth, frame.EtherType)
		if err != nil || len(b) < frame.HeaderLen || frame.View(b).Type() != frame.FileData {
			return
		}
		if tampered++; tampered%5 == 0 {
			b[len(b)-frame.CRCLen-1] ^= 0x40
			frame.SetCRC(b)
		}
	}, nil)
	data, path := plantedFile(t, 400_000)
	// The rogue acts on what the sender sends, as it goes out.
	forged := 0 // the sending loop's only
	k.taps[0].set(nil, func(frames [][]byte) {
		for _, eth := range frames {
			forged++
			if forged%10 != 0 {
				continue
			}
			rogue.Send([][]byte{eth}) // a replay
			_, b, err := frame.SplitEthernet(eth, frame.EtherType)
			if err != nil {
				continue
			}
			v := frame.View(b)
			// Frames in the sender's name without a tag: a block of
			// other bytes, and a FileEnd.
			src := [6]byte(rogue.HardwareAddr())
			h := frame.Header{Group: filesAuthGroup, Sender: v.Sender(), Incarnation: v.Incarnation()}
			f := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
			f, err = frame.Append(f, &h, &frame.FileDataBody{ID: 1, Data: bytes.Repeat([]byte("forged"), 100)})
			if err != nil {
				t.Error(err)
				return
			}
			g := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
			g, err = frame.Append(g, &h, &frame.FileEndBody{ID: 1, Blocks: 1})
			if err != nil {
				t.Error(err)
				return
			}
			rogue.Send([][]byte{f, g})
		}
	})
	if v := k.send(t, path); !v.OK() {
		t.Fatalf("verdict not OK: %v", v)
	}
	for i := 1; i < 3; i++ {
		k.received(t, i, data)
		st := k.runners[i].Stats().Auth
		if st.Replay == 0 || st.Unauthenticated == 0 {
			t.Errorf("member %d: replays and unauthenticated frames not counted: %+v", i+1, st)
		}
		if i == 1 && st.BadTag == 0 {
			t.Errorf("member 2: tampered frames not counted as bad_tag: %+v", st)
		}
		if c := k.runners[i].Stats().Core; c.FilesReceived != 1 || c.HashMismatches != 0 {
			t.Errorf("member %d: core counters %+v", i+1, c)
		}
		// The rogue's unsigned frames are unauthenticated, not a key
		// mismatch.
		rs := k.runners[i].Stats()
		want := fmt.Sprintf("unauthenticated: %d frames of the files' group carried no authentication tag", rs.Auth.Unauthenticated)
		if m, u := rs.KeyMismatch(), rs.Unauthenticated(); m != "" || !strings.HasPrefix(u, want) {
			t.Errorf("member %d: KeyMismatch %q, Unauthenticated %q; want none, and %q…", i+1, m, u, want)
		}
	}
	t.Logf("member 2: %+v", k.runners[1].Stats().Auth)
}

// A receiver under another key, and one without a key, take nothing of
// a keyed sender's file: no block reaches their cores, the sender's
// verdict names both missing, and their counters say key mismatch.
func TestFilesAuthKeyMismatch(t *testing.T) {
	ka, kb := filesTestKey(t, 1), filesTestKey(t, 7)
	if ka.ID() == kb.ID() {
		t.Fatalf("test keys share the id %d", ka.ID())
	}
	k := startKeyed(t, 9, []*auth.Config{{Key: ka}, {Key: kb}, nil}, func(_ int, c *files.Config) { c.FailureTimeout = 500 * files.Millisecond })
	_, path := plantedFile(t, 100_000)
	v := k.send(t, path)
	if v.OK() || len(v.Missing) != 2 || len(v.Done) != 0 {
		t.Fatalf("verdict %v, want members 2 and 3 missing", v)
	}
	for i := 1; i < 3; i++ {
		st := k.runners[i].Stats()
		if st.Core.BlocksReceived != 0 || st.Core.FilesReceived != 0 {
			t.Errorf("member %d's core took frames of a sender under another key: %+v", i+1, st.Core)
		}
		if m := st.KeyMismatch(); !strings.Contains(m, "key mismatch") {
			t.Errorf("member %d: KeyMismatch() %q (stats %+v, auth %+v)", i+1, m, st, st.Auth)
		}
		if _, err := os.Stat(filepath.Join(k.dirs[i], "data.bin")); err == nil {
			t.Errorf("member %d stored the file", i+1)
		}
	}
	if st := k.runners[1].Stats(); st.Auth.UnknownKey == 0 {
		t.Errorf("member 2 (another key): unknown_key not counted: %+v", st.Auth)
	}
	if st := k.runners[2].Stats(); st.KeyedNoKey == 0 || !strings.Contains(st.KeyMismatch(), "this member has no key") {
		t.Errorf("member 3 (no key): %d frames with a tag dropped, %q", st.KeyedNoKey, st.KeyMismatch())
	}
	t.Logf("sender: %+v; member 2: %s; member 3: %s", k.runners[0].Stats().Auth, k.runners[1].Stats().KeyMismatch(), k.runners[2].Stats().KeyMismatch())
}

// Frames without a tag are told apart from frames under another key:
// KeyMismatch names only a key (another one, the other algorithm, a tag
// while this member has none), Unauthenticated only untagged frames, so
// a rogue's unsigned frames on a keyed member never read "key mismatch".
func TestFilesStatsMismatchAndUnauthenticated(t *testing.T) {
	const (
		unauth5  = "unauthenticated: 5 frames of the files' group carried no authentication tag and were dropped (their sender has no key: a member without -key-file, or a station that is no member)"
		unknown2 = "key mismatch: frames of the files' group dropped: 2 under a key id of neither accepted key (unknown_key), 1 with the other algorithm (-encrypt differs)"
		noKey3   = "key mismatch: 3 frames of the files' group carried an authentication tag, and this member has no key (-key-file)"
	)
	for _, c := range []struct {
		name                string
		st                  FilesStats
		mismatch, unauthent string
	}{
		{"nothing dropped", FilesStats{Auth: &auth.Stats{Replay: 4, BadTag: 1}}, "", ""},
		{"untagged only", FilesStats{Auth: &auth.Stats{Unauthenticated: 5}}, "", unauth5},
		{"another key", FilesStats{Auth: &auth.Stats{UnknownKey: 2, Algorithm: 1}}, unknown2, ""},
		{"both", FilesStats{Auth: &auth.Stats{Unauthenticated: 5, UnknownKey: 2, Algorithm: 1}}, unknown2, unauth5},
		{"no key here", FilesStats{KeyedNoKey: 3}, noKey3, ""},
	} {
		if m, u := c.st.KeyMismatch(), c.st.Unauthenticated(); m != c.mismatch || u != c.unauthent {
			t.Errorf("%s: KeyMismatch %q, Unauthenticated %q; want %q, %q", c.name, m, u, c.mismatch, c.unauthent)
		}
	}
}
