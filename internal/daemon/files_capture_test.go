package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/internal/replay"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// startCapturedFileGroup is startFileGroupWith with each daemon's two
// links, the group's and the files', wrapped by capture.Wrap as rbcastd
// -capture -flight-recorder wraps them: one interface each ("nI" and
// "nI/files"), every frame into w and checked by iv (either may be nil).
func startCapturedFileGroup(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string, ac *auth.Config, w *capture.Writer, iv *capture.Invariants) []*running {
	return startCapturedFileGroupWith(t, r, n, imp, inboxes, ac, w, func(_ int, o *capture.Options) { o.Invariants = iv })
}

// startCapturedFileGroupWith is startCapturedFileGroup with daemon i's
// capture options (its invariant checker, its flight recorder) set by
// opt; a daemon with a checker hands it the keys of every rotation step
// (Config.KeysChanged), as rbcastd run does.
func startCapturedFileGroupWith(t *testing.T, r *rtnet.Net, n int, imp []testnet.Impairment, inboxes []string, ac *auth.Config, w *capture.Writer, opt func(i int, o *capture.Options)) []*running {
	t.Helper()
	dir := t.TempDir()
	out := make([]*running, n)
	for i := range n {
		l, ml, fl := fileLinks(t, r, imp, i)
		opts := capture.Options{Node: fmt.Sprint(i + 1), Interface: fmt.Sprintf("n%d", i+1)}
		opt(i, &opts)
		cml, err := capture.Wrap(ml, w, opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.Interface += "/files"
		cfl, err := capture.Wrap(fl, w, opts)
		if err != nil {
			t.Fatal(err)
		}
		fc := &FilesConfig{Link: cfl, Rate: 50_000_000}
		if i < len(inboxes) {
			fc.Inbox = inboxes[i]
		}
		cfg := Config{Logger: quiet, Group: reliable.Config{Group: 7, Size: n, Server: i == 0, FailureTimeout: testFailureTimeout, Auth: ac}, Files: fc}
		if opts.Invariants != nil {
			cfg.KeysChanged = opts.Invariants.SetKeys
		}
		out[i] = startDaemon(t, cml, filepath.Join(dir, fmt.Sprintf("d%d.sock", i)), cfg)
		out[i].link = l
	}
	for _, x := range out {
		x.self(t)
	}
	return out
}

// A keyed group (MAC, and encrypted) sends a file with every daemon's
// links captured into one file and checked online with the group key
// (capture.Invariants.SetKeys, as rbcastd run -flight-recorder -key-file
// does). Online: every frame verifies, no violation, in particular no
// corrupt-frame for the encrypted Nacks, view frames and FileStatus and
// no seq-reuse for retransmissions sealed anew. Offline (pcap-replay
// -key-file: replay.Authenticate): every frame of both groups verifies,
// the timeline shows the file frames decoded (the name decrypted), check
// finds nothing; with another key every frame is dropped as a key of
// neither slot, listed by frame number, and check has nothing left to
// judge.
func TestFilesCaptureKeyed(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(map[bool]string{false: "mac", true: "encrypt"}[encrypt], func(t *testing.T) {
			dir := t.TempDir()
			_, key := keyFile(t, dir, 1)
			_, wrong := keyFile(t, dir, 2)
			path := filepath.Join(dir, "group.pcapng")
			w, err := capture.CreateFile(path, capture.WriterOptions{Application: "rbcastd"})
			if err != nil {
				t.Fatal(err)
			}
			iv := capture.NewInvariants(0, nil)
			if err := iv.SetKeys(key); err != nil {
				t.Fatal(err)
			}
			r := rtnet.New(t, 25)
			in1, in2 := t.TempDir(), t.TempDir()
			ds := startCapturedFileGroup(t, r, 3, []testnet.Impairment{{}, {Loss: 0.03}, {}}, []string{"", in1, in2},
				&auth.Config{Key: key, Encrypt: encrypt}, w, iv)
			src := filepath.Join(t.TempDir(), "secret name.bin")
			writeRandom(t, src, 300_000, 7)
			sendFileVia(t, ds[0].socket, "secret name.bin", src, 2)
			// And messages, repaired on the lossy receiver: encrypted
			// retransmissions are sealed anew (other ciphertext).
			mc, wel := dial(t, ds[0].socket, true)
			if _, err := sendAll(t, mc, randomBytes(3, 200_000), int(wel.MaxMessage)); err != nil {
				t.Fatal(err)
			}
			mc.Close()
			// The capture ends here; frames after its close are not
			// recorded (the daemons stop at the test's cleanup).
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			if c := iv.Counts(); len(c) != 0 {
				t.Errorf("online checks with the key found violations: %v", c)
			}
			verified, dropped := iv.AuthStats()
			for reason, n := range dropped {
				t.Errorf("online checks: %d frames did not verify (%s)", n, reason)
			}
			if verified == 0 {
				t.Fatal("online checks verified no frame")
			}

			read := func() *replay.Capture {
				c, err := replay.ReadFile(path, replay.ReadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			c := read()
			all := len(c.Records)
			res, err := replay.Authenticate(c, replay.AuthOptions{Keys: []*auth.Key{key}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != all || len(res.Dropped) != 0 {
				t.Fatalf("%d of %d frames verified, dropped %v", res.Verified, all, res.Dropped[:min(5, len(res.Dropped))])
			}
			var tl bytes.Buffer
			if err := replay.WriteTimeline(&tl, c); err != nil {
				t.Fatal(err)
			}
			var offers, blocks, statuses, retx int
			for _, line := range strings.Split(tl.String(), "\n") {
				switch {
				case strings.Contains(line, "ERROR"):
					t.Fatalf("a frame did not decode after -key-file: %s", line)
				case strings.Contains(line, `"secret name.bin" 300000B`):
					offers++
				case strings.Contains(line, " block "):
					blocks++
				case strings.Contains(line, " receiving ") || strings.Contains(line, " done "):
					statuses++
				}
				if strings.Contains(line, "RETX") && strings.Contains(line, " Data ") {
					retx++
				}
			}
			if offers == 0 || blocks < 300_000/1500 || statuses == 0 || retx == 0 {
				t.Fatalf("timeline: %d FileOffers with the name, %d FileData, %d FileStatus, %d Data retransmissions; want each decoded\n%.3000s", offers, blocks, statuses, retx, tl.String())
			}
			if vs := replay.Check(c, replay.CheckOptions{}); replay.Judged(vs) != 0 {
				t.Fatalf("check found %d violations, the first %v", replay.Judged(vs), vs[0])
			}

			// Another key: every frame, the files' too, dropped by reason
			// and frame number; nothing left for check to fault.
			c = read()
			res, err = replay.Authenticate(c, replay.AuthOptions{Keys: []*auth.Key{wrong}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != 0 || len(res.Dropped) != all {
				t.Fatalf("another key: %d frames verified, %d of %d dropped", res.Verified, len(res.Dropped), all)
			}
			if m := res.Mismatch(); !strings.Contains(m, "a key mismatch") {
				t.Errorf("another key: Mismatch says %q", m)
			}
			var out bytes.Buffer
			res.Write(&out)
			want := fmt.Sprintf("auth: 0 frames verified, %d dropped before any core (as a member's link drops them)\n  %d dropped: a key id of neither key slot (frames 1 2 3 4 5 6 7 8 9 10 and %d more)\n", all, all, all-10)
			if out.String() != want {
				t.Fatalf("another key: printed\n%s\nwant\n%s", out.String(), want)
			}
			if vs := replay.Check(c, replay.CheckOptions{}); replay.Judged(vs) != 0 {
				t.Fatalf("check of what another key left found %d violations, the first %v", replay.Judged(vs), vs[0])
			}
		})
	}
}

// Three daemons of an encrypted group, each with a flight recorder and
// its own invariant checker keyed as rbcastd run -flight-recorder
// -key-file keys it, rotate their key (rbcastd rekey install, activate,
// retire at every daemon) between two rounds of messages and files over
// a lossy segment. Each daemon hands its checker the keys of every step
// (Config.KeysChanged): the frames after the switch, under the new key,
// are verified and checked at every daemon (its verified count grows by
// at least the frames of the second round), none is dropped by the
// checker, none is reported as corrupt-frame or seq-reuse, and no
// recorder dumps.
func TestRekeyFlightRecorderFollows(t *testing.T) {
	oldKey, newPath, newKey := rotationKeys(t)
	dumps := t.TempDir()
	ivs := make([]*capture.Invariants, 3)
	recs := make([]*capture.Recorder, 3)
	for i := range ivs {
		rec, err := capture.NewRecorder(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
		ivs[i] = capture.NewInvariants(0, rec.DumpOnViolation(dumps, 0, nil))
		if err := ivs[i].SetKeys(oldKey); err != nil {
			t.Fatal(err)
		}
	}
	r := rtnet.New(t, 26)
	in0, in1, in2 := t.TempDir(), t.TempDir(), t.TempDir()
	ds := startCapturedFileGroupWith(t, r, 3, []testnet.Impairment{{}, {Loss: 0.03}, {}}, []string{in0, in1, in2},
		&auth.Config{Key: oldKey, Encrypt: true}, nil, func(i int, o *capture.Options) {
			o.Invariants, o.Recorder = ivs[i], recs[i]
		})
	round := func(n int) {
		t.Helper()
		mc, wel := dial(t, ds[0].socket, true)
		if _, err := sendAll(t, mc, randomBytes(uint64(n), 300_000), int(wel.MaxMessage)); err != nil {
			t.Fatal(err)
		}
		mc.Close()
		src := filepath.Join(t.TempDir(), fmt.Sprintf("f%d.bin", n))
		writeRandom(t, src, 300_000, uint64(n))
		sendFileVia(t, ds[0].socket, filepath.Base(src), src, 2)
	}
	round(1)
	for _, step := range rotation(newPath, newKey) {
		rekeyAll(t, ds, step)
		// Install and retire hand the checkers their keys before they
		// answer (Config.KeysChanged). After activate, a frame sealed
		// under the old key and read only after the retire is dropped
		// (unknown_key; docs/auth.md): wait until none is left. Each
		// link keeps a sender's order, so once every daemon read a
		// frame each other one sealed after its switch, it has read
		// all the old ones: on the group's link a message from each
		// daemon delivered at every other, on the files' link a file
		// from each daemon with the others' verdicts.
		if step.Step == localapi.RekeyActivate {
			switchedRound(t, ds, []string{in0, in1, in2})
		}
	}
	before := make([]uint64, 3)
	for i, iv := range ivs {
		before[i], _ = iv.AuthStats()
	}
	round(2)
	// 300 kB of messages and a 300 kB file: each daemon sends or
	// receives at least 400 frames of the second round.
	for i, iv := range ivs {
		verified, dropped := iv.AuthStats()
		if verified-before[i] < 400 {
			t.Errorf("daemon %d: its checker verified %d frames after the rotation, want the second round's (≥ 400)", i, verified-before[i])
		}
		for reason, n := range dropped {
			t.Errorf("daemon %d: its checker dropped %d frames: %s", i, n, reason)
		}
		if c := iv.Counts(); len(c) != 0 {
			t.Errorf("daemon %d: violations %v", i, c)
		}
		if a := ds[i].d.Status().Auth; a.Active != newKey.String() || len(a.Accepted) != 1 {
			t.Errorf("daemon %d: keys %+v, want %s alone", i, a, newKey)
		}
	}
	if es, _ := os.ReadDir(dumps); len(es) != 0 {
		t.Errorf("the flight recorders dumped %d files", len(es))
	}
}

// switchedRound sends a message from every daemon of ds, waits until
// every daemon delivered the others', and sends a file from every daemon
// to the others' inboxes (every daemon has one), waiting for its
// verdicts: afterwards each
// daemon has read, on both links, a frame that each other daemon sent
// after the call began.
func switchedRound(t *testing.T, ds []*running, inboxes []string) {
	t.Helper()
	subs := make([]*localapi.Conn, len(ds))
	for i, x := range ds {
		subs[i] = subscribe(t, x.socket, localapi.AllMembers)
	}
	for i, x := range ds {
		c, _ := dial(t, x.socket, true)
		if _, err := sendAll(t, c, []byte{byte('a' + i)}, 1); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	for i, sub := range subs {
		got, err := collect(sub, len(ds)-1)
		slices.Sort(got)
		var want []byte
		for k := range ds {
			if k != i {
				want = append(want, byte('a'+k))
			}
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("daemon %d's subscriber after the switch: %q, %v; want %q, one message from each other daemon", i, got, err, want)
		}
		sub.Close()
	}
	for i, x := range ds {
		name := fmt.Sprintf("switched%d.bin", i)
		src := filepath.Join(t.TempDir(), name)
		want := writeRandom(t, src, 20_000, uint64(100+i))
		sendFileVia(t, x.socket, name, src, len(ds)-1)
		for k, in := range inboxes {
			if k == i {
				continue
			}
			if got, err := os.ReadFile(filepath.Join(in, name)); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s in daemon %d's inbox: %d bytes (%v), want the %d sent", name, k, len(got), err, len(want))
			}
		}
	}
}
