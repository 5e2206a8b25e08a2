package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/rbcast/rbcast/capture/invariant"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
)

func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// smallCapture writes a pcap with two members' frames: Data 0..3 from
// member 1 (seq 2 missing unless repaired), an Ack from member 2.
func smallCapture(t *testing.T, repaired bool, payload3 string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "small.pcap")
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	mac1, mac2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	var at int64
	add := func(src [6]byte, h frame.Header, b frame.Body) {
		data := frame.AppendEthernet(nil, frame.Broadcast, src, frame.EtherType)
		data, err := frame.Append(data, &h, b)
		if err != nil {
			t.Fatal(err)
		}
		at += 1000
		ts := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, at), CaptureLength: len(data), Length: len(data)}
		if err := w.WritePacket(ts, data); err != nil {
			t.Fatal(err)
		}
	}
	data := func(seq uint32, p string, flags frame.Flags) {
		add(mac1, frame.Header{Group: 5, Sender: 1, Incarnation: 1, Seq: seq, AckBase: 1, Acks: []uint32{seq + 1, 0}, Flags: flags}, &frame.Payload{T: frame.Data, Data: []byte(p)})
	}
	data(0, "zero", 0)
	data(1, "one", 0)
	data(3, "three", 0)
	add(mac2, frame.Header{Group: 5, Sender: 2, Incarnation: 1, Seq: 0, AckBase: 1, Acks: []uint32{2, 0}}, &frame.NackBody{Target: 1, Ranges: []frame.Range{{First: 2, Last: 2}}})
	if repaired {
		data(2, "two", frame.FlagRetransmit)
	}
	data(3, payload3, frame.FlagRetransmit)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckExitCodes(t *testing.T) {
	good := smallCapture(t, true, "three")
	if code, out, errOut := runCmd("check", good); code != 0 || !strings.Contains(out, "all invariants hold") {
		t.Fatalf("check on a good capture: exit %d\n%s%s", code, out, errOut)
	}
	bad := smallCapture(t, false, "THREE, changed")
	code, out, _ := runCmd("check", bad)
	if code != 1 {
		t.Fatalf("check on a broken capture: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"VIOLATION seq-reuse [frames 3,5]: member 1.1 seq 3",
		"VIOLATION unrepaired-gap [frames 3]: at capture: seq 2 of member 1.1",
		"2 violations",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := runCmd("check", "-group", "6", good); code != 1 {
		t.Errorf("check -group 6 on a group-5 capture: exit %d, want 1", code)
	}
}

func TestCommandsRun(t *testing.T) {
	good := smallCapture(t, true, "three")
	code, out, errOut := runCmd("timeline", good)
	if code != 0 || strings.Count(out, "\n") != 2+6 || !strings.Contains(out, "Nack") || !strings.Contains(out, "to 1 want 2") {
		t.Fatalf("timeline: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd("summary", good)
	if code != 0 || !strings.Contains(out, "sender 1.1") || !strings.Contains(out, "gap seq 2 opened") || !strings.Contains(out, "nacked by member 2: 1 distinct seqs") {
		t.Fatalf("summary: exit %d\n%s%s", code, out, errOut)
	}
	args := []string{"simulate", "-node", "2", "-members", "1=02:00:00:00:00:01@1,2=02:00:00:00:00:02@1", "-data", good}
	code, out, errOut = runCmd(args...)
	if code != 0 {
		t.Fatalf("simulate: exit %d\n%s%s", code, out, errOut)
	}
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "deliver") {
			f := strings.Fields(l)
			got = append(got, f[len(f)-1])
		}
	}
	want := []string{"7a65726f", "6f6e65", "74776f", "7468726565"} // zero one two three
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("simulate delivered %v, want %v\n%s", got, want, out)
	}
	if _, again, _ := runCmd(args...); again != out {
		t.Fatal("simulate printed differently on a second run")
	}
}

func TestUsageAndErrors(t *testing.T) {
	for _, cmd := range []string{"timeline", "summary", "check", "simulate", "inject"} {
		// Asked for, the usage is the output: stdout, as the top
		// level's, not stderr.
		code, out, errOut := runCmd(cmd, "-h")
		if code != 0 || !strings.Contains(out, "usage: pcap-replay "+cmd) || errOut != "" {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
	}
	if code, _, errOut := runCmd("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d %q", code, errOut)
	}
	if code, _, errOut := runCmd("check", "/nonexistent/x.pcap"); code != 2 || !strings.Contains(errOut, "/nonexistent/x.pcap") {
		t.Errorf("missing file: exit %d %q", code, errOut)
	}
	good := smallCapture(t, true, "three")
	data, _ := os.ReadFile(good)
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	os.WriteFile(cut, data[:len(data)-10], 0o644)
	code, _, errOut := runCmd("timeline", cut)
	if code != 2 || !strings.Contains(errOut, "cut.pcap: byte offset") || !strings.Contains(errOut, "truncated record") {
		t.Errorf("truncated file: exit %d %q", code, errOut)
	}
	if code, out, errOut := runCmd("timeline", "-partial", cut); code != 0 || strings.Count(out, "\n") != 2+5 || !strings.Contains(errOut, "byte offset") {
		t.Errorf("truncated file with -partial: exit %d, %d lines, %q", code, strings.Count(out, "\n"), errOut)
	}
	if code, _, errOut := runCmd("simulate", good); code != 2 || !strings.Contains(errOut, "-node") {
		t.Errorf("simulate without -node: exit %d %q", code, errOut)
	}
	if code, _, errOut := runCmd("simulate", "-node", "2", "-members", "1=zz", good); code != 2 || !strings.Contains(errOut, `"zz" is not a 6-byte MAC`) {
		t.Errorf("bad -members: exit %d %q", code, errOut)
	}
	for _, bad := range [][]string{{"-protocol", "raft"}, {"-method", "method3"}, {"-resilience", "always"}, {"-initial-global", "x"}} {
		args := append(append([]string{"simulate", "-node", "2"}, bad...), good)
		if code, _, errOut := runCmd(args...); code != 2 || !strings.Contains(errOut, bad[0]+" ") {
			t.Errorf("simulate %v: exit %d %q", bad, code, errOut)
		}
	}
	// A PBP capture re-run as the sequencer: the core drops every frame.
	if code, out, errOut := runCmd("simulate", "-node", "2", "-protocol", "seq", good); code != 0 || !strings.Contains(out, "sequencer, method hybrid") || !strings.Contains(out, "not handled by the sequencer") {
		t.Errorf("simulate -protocol seq on a PBP capture: exit %d\n%s%s", code, out, errOut)
	}
	// A PBP capture re-run as a PCODE member: the core refuses every frame;
	// a bad PCODE setting is an error naming it.
	if code, out, errOut := runCmd("simulate", "-node", "2", "-protocol", "pcode", good); code != 0 || !strings.Contains(out, "PCODE, send buffer 256, early buffer 64") || !strings.Contains(out, "not a PCODE frame") {
		t.Errorf("simulate -protocol pcode on a PBP capture: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCmd("simulate", "-node", "2", "-protocol", "pcode", "-early-buffer", "-3", good); code != 2 || !strings.Contains(errOut, "-early-buffer -3: want -1 (none)") {
		t.Errorf("simulate -protocol pcode -early-buffer -3: exit %d %q", code, errOut)
	}
	if code, out, errOut := runCmd("simulate", "-node", "2", "-protocol", "seq", "-resilience", "sequencer", good); code != 0 || !strings.Contains(out, "sequencer, method hybrid") {
		t.Errorf("simulate -resilience sequencer: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCmd("timeline", "-udp", "7000,x", good); code != 2 || !strings.Contains(errOut, `-udp "7000,x": want UDP ports like 7000,7001, or any`) {
		t.Errorf("timeline -udp 7000,x: exit %d %q", code, errOut)
	}
	// An Ethernet capture read as UDP carriage: nothing of ours in it.
	if code, out, errOut := runCmd("timeline", "-udp", "any", good); code != 0 || !strings.Contains(out, "not a UDP datagram of the carriage: no IP header") {
		t.Errorf("timeline -udp any on an Ethernet capture: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCmd("inject", good); code != 2 || !strings.Contains(errOut, "-i IFACE is required") {
		t.Errorf("inject without -i: exit %d %q", code, errOut)
	}
}

// TestCheckHelpListsKinds: 'check -h' names every violation kind check can
// report, so its list cannot fall behind the analysis again (it lacked the
// sequencer's global-reuse and sequenced-twice).
func TestCheckHelpListsKinds(t *testing.T) {
	code, stderr, _ := runCmd("check", "-h") // the usage, on stdout
	if code != 0 {
		t.Errorf("check -h: exit %d, want 0", code)
	}
	for _, k := range []string{invariant.KindSeqReuse, invariant.KindGlobalReuse, invariant.KindSequencedTwice, invariant.KindGap, invariant.KindOrder,
		invariant.KindNackStorm, invariant.KindForeign, invariant.KindVersion, invariant.KindCorrupt, invariant.KindImplausible} {
		if !strings.Contains(stderr, "  "+k+" ") {
			t.Errorf("check -h does not list %q:\n%s", k, stderr)
		}
	}
}

// sink keeps what is sent through it (the frames auth.Link seals).
type sink struct{ sent [][]byte }

func (l *sink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		l.sent = append(l.sent, bytes.Clone(f))
	}
	return len(frames), nil
}
func (l *sink) Recv(time.Time, []link.Frame) (int, error) { return 0, nil }
func (l *sink) MTU() int                                  { return 1500 }
func (l *sink) HardwareAddr() net.HardwareAddr            { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (l *sink) Stats() (link.Stats, error)                { return link.Stats{}, nil }
func (l *sink) Close() error                              { return nil }

// sealedCapture is smallCapture (repaired) with every frame sealed under
// the key in keyPath, then a replay of its first frame and a Data 3 with
// another payload under another key: a rogue's.
func sealedCapture(t *testing.T, keyPath string) string {
	t.Helper()
	key, err := auth.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(smallCapture(t, true, "three"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	seal := func(k *auth.Key, at int64, frames ...[]byte) [][]byte {
		l := &sink{}
		a, err := auth.Wrap(l, auth.Config{Group: 5, Key: k, Now: func() time.Time { return time.Unix(at, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range frames {
			if _, err := a.Send([][]byte{fr}); err != nil {
				t.Fatal(err)
			}
		}
		return l.sent
	}
	var plain [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		plain = append(plain, data)
	}
	sealed := seal(key, 1700000000, plain...)
	sealed = append(sealed, sealed[0])
	secret := make([]byte, auth.KeySize)
	other, _ := auth.NewKey(secret)
	forged := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0, 0, 0, 0, 1}, frame.EtherType)
	forged, _ = frame.Append(forged, &frame.Header{Group: 5, Sender: 1, Incarnation: 1, Seq: 3, AckBase: 1, Acks: []uint32{4, 0}}, &frame.Payload{T: frame.Data, Data: []byte("THREE, forged")})
	sealed = append(sealed, seal(other, 1700000002, forged)...) // counters ahead of the group's

	return writeFrames(t, "sealed.pcap", sealed)
}

// writeFrames writes frames to a pcap file named name in a temporary
// directory, one microsecond apart from 1700000001 s, and returns its
// path.
func writeFrames(t *testing.T, name string, frames [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	for i, d := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000001, int64(i)*1000), CaptureLength: len(d), Length: len(d)}
		if err := w.WritePacket(ci, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// check -key-file judges what an authenticated member's cores would see:
// the rogue's forged frame 3 (a seq-reuse without the key) and its replay
// are dropped and listed, and the invariants hold.
func TestCheckKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "group.key")
	if _, err := auth.Generate(keyPath, nil); err != nil {
		t.Fatal(err)
	}
	capt := sealedCapture(t, keyPath)
	if code, out, _ := runCmd("check", capt); code != 1 || !strings.Contains(out, "VIOLATION seq-reuse") {
		t.Fatalf("check without the key: exit %d, want 1 and a seq-reuse\n%s", code, out)
	}
	code, out, errOut := runCmd("check", "-key-file", keyPath, capt)
	if code != 0 {
		t.Fatalf("check -key-file: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"auth: 6 frames verified, 2 dropped before any core",
		"1 dropped: a replay (counter seen before) (frames 7)",
		"1 dropped: a key id of neither key slot (frames 8)",
		"all invariants hold",
	} {
		if !strings.Contains(out, want) && !(strings.Contains(want, "key id") && strings.Contains(out, "1 dropped: the tag does not verify (frames 8)")) {
			t.Errorf("check -key-file output lacks %q:\n%s", want, out)
		}
	}
	if code, out, errOut := runCmd("simulate", "-node", "2", "-key-file", keyPath, capt); code != 0 || !strings.Contains(out, "auth: 6 frames verified, 2 dropped") {
		t.Errorf("simulate -key-file: exit %d\n%s%s", code, out, errOut)
	}
	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, bytes.Repeat([]byte("ab"), 32), 0o644)
	os.Chmod(open, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "-key-file", filepath.Join(dir, "none.key"), capt}, "pcap-replay check: -key-file: auth: bad key file"},
		{[]string{"simulate", "-node", "2", "-key-file", open, capt}, "is readable by others than its owner"},
		{[]string{"check", "-key-file", keyPath, "-key-file", keyPath, "-key-file", keyPath, capt}, "at most two key files"},
	} {
		if code, _, errOut := runCmd(c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Each failure is one line naming the program and the command once
// ("pcap-replay CMD: "), with the capture's path whole however it is
// spelt: internal/replay's errors start with what went wrong, not with
// "simulate: ", and nothing rewrites them. A path holding
// ": pcap-replay: " in simulate's error is what a text heuristic got
// wrong.
func TestErrorsNameProgramOnce(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	small := smallCapture(t, true, "three")
	odd := filepath.Join(dir, "x: pcap-replay: y.pcapng")
	data, err := os.ReadFile(small)
	if err != nil {
		t.Fatal(err)
	}
	oddSmall := filepath.Join(dir, "run: pcap-replay: small.pcap")
	if err := os.WriteFile(oddSmall, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "-node", "0", odd}, "pcap-replay simulate: capture: open " + odd + ": no such file or directory\n"},
		{[]string{"simulate", "-node", "0", "simulate"}, "pcap-replay simulate: capture: open simulate: no such file or directory\n"},
		{[]string{"timeline", odd}, "pcap-replay timeline: capture: open " + odd + ": no such file or directory\n"},
		{[]string{"simulate", "-node", "0", "-protocol", "paxos", small}, "pcap-replay simulate: -protocol \"paxos\": want auto, pbp, seq, views or pcode\n"},
		{[]string{"simulate", "-node", "0", small}, "pcap-replay simulate: member 0 is not in the member list 1=02:00:00:00:00:01@1,2=02:00:00:00:00:02@1\n"},
		{[]string{"simulate", "-node", "1", "-iface", "3", small}, "pcap-replay simulate: interface 3 does not exist; " + small + " has 1 (0=if0)\n"},
		{[]string{"simulate", "-node", "1", "-iface", "3", oddSmall}, "pcap-replay simulate: interface 3 does not exist; " + oddSmall + " has 1 (0=if0)\n"},
	} {
		code, _, errOut := runCmd(c.args...)
		if code != 2 || errOut != c.want {
			t.Errorf("%v: exit %d, stderr\n%q\nwant exit 2 and\n%q", c.args, code, errOut, c.want)
		}
	}
}

// A negative size or duration is refused naming the flag and its value,
// before the capture is read: the cores' own checks name their Config
// fields (Window, AckDelay), which the user never typed.
func TestSimulateNegativeFlags(t *testing.T) {
	small := smallCapture(t, true, "three")
	for _, c := range []struct{ flag, value, want string }{
		{"window", "-5", "-window -5: want 0 (the default) or more"},
		{"mtu", "-1", "-mtu -1: want 0 (the default) or more"},
		{"max-payload", "-1", "-max-payload -1: want 0 (the default) or more"},
		{"threshold", "-1", "-threshold -1: want 0 (the default) or more"},
		{"history", "-1", "-history -1: want 0 (the default) or more"},
		{"quorum", "-1", "-quorum -1: want 0 (the default) or more"},
		{"found", "-1", "-found -1: want 0..60"},
		{"max-members", "-1", "-max-members -1: want 0..60 (0: from the capture)"},
		{"flow-window", "-1", "-flow-window -1: want 0 (the default) or more"},
		{"status-window", "-1", "-status-window -1: want 0 (the default) or more"},
		{"early-buffer", "-2", "-early-buffer -2: want -1 (none), 0 (the default) or more"},
		{"ack-delay", "-1ms", "-ack-delay -1ms: want 0 (the default) or more"},
		{"resend-timeout", "-1ms", "-resend-timeout -1ms: want 0 (the default) or more"},
		{"nack-timeout", "-1ms", "-nack-timeout -1ms: want 0 (the default) or more"},
		{"heartbeat", "-1s", "-heartbeat -1s: want 0 (the default) or more"},
		{"failure-timeout", "-1s", "-failure-timeout -1s: want 0 (the default) or more"},
		{"bundle-delay", "-1us", "-bundle-delay -1µs: want 0 (the default) or more"},
		{"election-retry", "-1ms", "-election-retry -1ms: want 0 (the default) or more"},
		{"join-retry", "-1ms", "-join-retry -1ms: want > 0 (0: the default)"},
		{"initial-rtt", "-1ms", "-initial-rtt -1ms: want 0 (the default) or more"},
		{"min-timer", "-1ms", "-min-timer -1ms: want 0 (the default) or more"},
		{"max-timer", "-1ms", "-max-timer -1ms: want 0 (the default) or more"},
	} {
		code, _, errOut := runCmd("simulate", "-node", "1", "-"+c.flag, c.value, small)
		if want := "pcap-replay simulate: " + c.want + "\n"; code != 2 || errOut != want {
			t.Errorf("-%s %s: exit %d, stderr %q; want exit 2 and %q", c.flag, c.value, code, errOut, want)
		}
	}
}
