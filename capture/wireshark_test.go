package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// memLink is a link.Link that accepts every frame and receives nothing.
type memLink struct {
	mac   net.HardwareAddr
	stats link.Stats
}

func (m *memLink) Send(frames [][]byte) (int, error) {
	m.stats.FramesSent += uint64(len(frames))
	return len(frames), nil
}
func (m *memLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	return 0, os.ErrDeadlineExceeded
}
func (m *memLink) MTU() int                       { return 1500 }
func (m *memLink) HardwareAddr() net.HardwareAddr { return m.mac }
func (m *memLink) Stats() (link.Stats, error)     { return m.stats, nil }
func (m *memLink) Close() error                   { return nil }

// writeGoldenCapture writes one frame of every golden vector, in order
// (then two v2 sequencer frames as the runtime sends them),
// through a wrapped link, and returns the file's path.
func writeGoldenCapture(t *testing.T, dir string) (string, []golden) {
	t.Helper()
	gs := goldenFrames(t)
	// The golden sequencer vectors carry 4-entry ack vectors; the runtime's
	// v2 sequencer frames carry 2 (delivered and received cursor), which
	// the dissector labels differently: add one of each kind it names.
	hdr := frame.Header{Group: 7, Sender: 2, Incarnation: 9, Seq: 40, AckBase: 1, Acks: []uint32{38, 40}}
	for _, body := range []frame.Body{
		&frame.SeqDataBody{Epoch: 3, Safe: 37, Held: 36, UID: frame.UID{Origin: 2, Incarnation: 9, Seq: 5}, Data: []byte("two cursors")},
		&frame.StatusBody{T: frame.SeqStatusRequest, Epoch: 3, Delivered: 40, Safe: 38, Held: 35},
		&frame.SeqMemberBody{Epoch: 3, Safe: 39, Held: 36, Change: frame.MemberReadmitted, Member: 4, Incarnation: 11},
	} {
		b, err := frame.Append(nil, &hdr, body)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, golden{fmt.Sprintf("runtime %v, 2 cursors", body.FrameType()), b})
	}
	path := filepath.Join(dir, "golden.pcapng")
	w, err := CreateFile(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{Node: "3", Interface: "golden0", Clock: func() time.Time { clock = clock.Add(time.Millisecond); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if _, err := c.Send([][]byte{ethernet(g.b)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, gs
}

// tshark returns the path of tshark, or skips the test when it is missing
// and we are not root. As root (CI) a missing tshark is a failure:
// scripts/ensure-deps.sh installs it.
func tshark(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tshark")
	if err == nil {
		return path
	}
	if os.Geteuid() != 0 {
		t.Skip("tshark is not installed (Debian package tshark; scripts/ensure-deps.sh installs it when run as root): skipping the Wireshark dissector test")
	}
	t.Fatal("tshark is not installed: run scripts/ensure-deps.sh as root (it installs the Debian package tshark)")
	return ""
}

// runTshark decodes file with the dissector and returns one map of field
// values per frame (several occurrences joined by ",").
func runTshark(t *testing.T, file string, fields []string) []map[string]string {
	t.Helper()
	return runTsharkWith(t, file, fields, nil)
}

// runTsharkWith is runTshark with more tshark arguments (preferences).
func runTsharkWith(t *testing.T, file string, fields, extra []string) []map[string]string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("wireshark", "rbcast.lua"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-n", "-X", "lua_script:" + script, "-r", file, "-T", "fields",
		"-E", "separator=/t", "-E", "aggregator=,", "-E", "quote=n", "-E", "occurrence=a"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	args = append(args, extra...)
	cmd := exec.Command(tshark(t), args...)
	// Keep the user's Wireshark profile (and its plugins) out of the test.
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
	}
	// tshark warns about running as root; anything about Lua is an error
	// in the dissector.
	if strings.Contains(stderr.String(), "Lua") || strings.Contains(stderr.String(), "lua") {
		t.Fatalf("tshark reported a Lua problem:\n%s", stderr.String())
	}
	var out []map[string]string
	for _, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		vals := strings.Split(line, "\t")
		if len(vals) != len(fields) {
			t.Fatalf("tshark line has %d fields, want %d: %q", len(vals), len(fields), line)
		}
		m := map[string]string{}
		for i, f := range fields {
			m[f] = vals[i]
		}
		out = append(out, m)
	}
	return out
}

// dissectorFields lists every field the dissector defines for frame
// content; expectFields says what each must hold for a frame.
var dissectorFields = []string{
	"rbcast.version", "rbcast.type", "rbcast.flags", "rbcast.flags.auth", "rbcast.flags.bundle",
	"rbcast.flags.retransmit", "rbcast.flags.ack_request", "rbcast.flags.hash_alg", "rbcast.length", "rbcast.sender", "rbcast.group",
	"rbcast.incarnation", "rbcast.seq", "rbcast.ack_base", "rbcast.ack_count", "rbcast.ack", "rbcast.ack.member",
	"rbcast.auth.algorithm", "rbcast.auth.length", "rbcast.auth.key", "rbcast.auth.counter", "rbcast.auth.tag",
	"rbcast.payload", "rbcast.bundle.count", "rbcast.msg.length", "rbcast.msg",
	"rbcast.nack.target", "rbcast.range_count", "rbcast.range.first", "rbcast.range.last",
	"rbcast.join.requested", "rbcast.join.window", "rbcast.join.mtu", "rbcast.join.nonce", "rbcast.join.config_hash",
	"rbcast.welcome.nonce", "rbcast.welcome.assigned", "rbcast.welcome.members", "rbcast.welcome.config_hash",
	"rbcast.start.count", "rbcast.member.id", "rbcast.member.mac", "rbcast.member.incarnation",
	"rbcast.epoch", "rbcast.origin", "rbcast.origin.incarnation", "rbcast.origin.seq",
	"rbcast.accept.count", "rbcast.accept.global", "rbcast.status.sequenced", "rbcast.status.delivered",
	"rbcast.safe", "rbcast.held", "rbcast.member.change", "rbcast.member.reason",
	"rbcast.election.phase", "rbcast.election.reserved", "rbcast.election.candidate", "rbcast.election.last_global",
	"rbcast.view", "rbcast.view.next", "rbcast.view.base", "rbcast.view.members", "rbcast.flush.sent", "rbcast.flush.count",
	"rbcast.flush.coord", "rbcast.flush.member", "rbcast.flush.gone", "rbcast.flush.left", "rbcast.flush.delivered", "rbcast.cut.count", "rbcast.cut.member", "rbcast.cut.cut",
	"rbcast.cut.holder", "rbcast.cut.from", "rbcast.commit.base_count", "rbcast.commit.from_base", "rbcast.relay.base", "rbcast.relay.frame", "rbcast.refuse.nonce",
	"rbcast.refuse.reason", "rbcast.refuse.config_hash", "rbcast.remove.view",
	"rbcast.mismatch.reason", "rbcast.mismatch.refused", "rbcast.mismatch.fingerprint",
	"rbcast.pcode.step", "rbcast.pcode.global", "rbcast.pcode.stream", "rbcast.pcode.reserved",
	"rbcast.pcode.targets_length", "rbcast.pcode.target", "rbcast.pcode.nack.kind", "rbcast.pcode.source",
	"rbcast.pcode.last", "rbcast.pcode.echo", "rbcast.pcode.point_base", "rbcast.pcode.point_count", "rbcast.pcode.point",
	"rbcast.pcode.abort.reason", "rbcast.pcode.member", "rbcast.pcode.text_length", "rbcast.pcode.text",
	"rbcast.file.id", "rbcast.file.size", "rbcast.file.block_size", "rbcast.file.stamp", "rbcast.file.hash", "rbcast.file.hash_alg",
	"rbcast.file.name_length", "rbcast.file.name", "rbcast.file.blocks", "rbcast.file.srtt", "rbcast.file.awaited_count",
	"rbcast.file.awaited", "rbcast.file.incarnation", "rbcast.file.state", "rbcast.file.reason", "rbcast.file.credit",
	"rbcast.file.held", "rbcast.file.top", "rbcast.file.echo", "rbcast.file.delay",
	"rbcast.crc32c", "rbcast.crc32c.computed", "rbcast.crc32c.status",
	"frame.interface_name", "frame.interface_description", "frame.packet_flags_direction", "_ws.expert.message",
}

type joined []string

func (j *joined) add(format string, args ...any) { *j = append(*j, fmt.Sprintf(format, args...)) }
func (j joined) String() string                  { return strings.Join(j, ",") }

// expectFields computes, from frame's own decoder, what tshark must show.
func expectFields(v frame.View) map[string]string {
	m := map[string]string{}
	for _, f := range dissectorFields {
		m[f] = ""
	}
	bit := func(f frame.Flags) string {
		if v.Flags()&f != 0 {
			return "1"
		}
		return "0"
	}
	d := func(x any) string { return fmt.Sprint(x) }
	m["rbcast.version"] = d(v.Version())
	m["rbcast.type"] = fmt.Sprintf("0x%02x", uint8(v.Type()))
	m["rbcast.flags"] = fmt.Sprintf("0x%04x", uint16(v.Flags()))
	m["rbcast.flags.auth"] = bit(frame.FlagAuth)
	m["rbcast.flags.bundle"] = bit(frame.FlagBundle)
	m["rbcast.flags.retransmit"] = bit(frame.FlagRetransmit)
	m["rbcast.flags.ack_request"] = bit(frame.FlagAckRequest)
	m["rbcast.flags.hash_alg"] = bit(frame.FlagHashAlg)
	m["rbcast.length"] = d(v.Length())
	m["rbcast.sender"] = d(uint16(v.Sender()))
	m["rbcast.group"] = d(v.Group())
	m["rbcast.incarnation"] = d(v.Incarnation())
	m["rbcast.view"] = d(v.ViewID())
	m["rbcast.seq"] = d(v.Seq())
	m["rbcast.ack_base"] = d(uint16(v.AckBase()))
	m["rbcast.ack_count"] = d(v.AckCount())
	var acks, members joined
	// v2 sequencer frames: two cursors (delivered, received), both of the
	// sequencer ack_base's stream.
	seqAcks := v.Type() >= frame.SeqRequest && v.Type() <= frame.SeqMember && v.AckCount() == 2
	for i := range v.AckCount() {
		acks.add("%d", v.Ack(i))
		if seqAcks {
			members.add("%d", int(v.AckBase()))
		} else {
			members.add("%d", int(v.AckBase())+i)
		}
	}
	m["rbcast.ack"], m["rbcast.ack.member"] = acks.String(), members.String()
	if alg, tag, ok := v.Auth(); ok {
		m["rbcast.auth.algorithm"] = d(alg)
		m["rbcast.auth.length"] = d(len(tag))
		m["rbcast.auth.tag"] = hex.EncodeToString(tag)
		key, counter := v.AuthKey()
		m["rbcast.auth.key"], m["rbcast.auth.counter"] = d(key), d(counter)
	}
	if p := v.Payload(); len(p) > 0 {
		m["rbcast.payload"] = hex.EncodeToString(p)
	}
	if v.Flags()&frame.FlagBundle != 0 {
		var lens, msgs joined
		n := 0
		for it := v.Messages(); ; n++ {
			msg, ok := it.Next()
			if !ok {
				break
			}
			lens.add("%d", len(msg))
			if len(msg) > 0 {
				msgs.add("%x", msg)
			}
		}
		m["rbcast.bundle.count"], m["rbcast.msg.length"], m["rbcast.msg"] = d(n), lens.String(), msgs.String()
	}
	ranges := func(rl frame.RangeList) {
		var first, last joined
		for i := range rl.Len() {
			first.add("%d", rl.At(i).First)
			last.add("%d", rl.At(i).Last)
		}
		m["rbcast.range_count"], m["rbcast.range.first"], m["rbcast.range.last"] = d(rl.Len()), first.String(), last.String()
	}
	switch v.Type() {
	case frame.Nack:
		m["rbcast.nack.target"] = d(uint16(v.NackTarget()))
		ranges(v.NackRanges())
	case frame.Join:
		j := v.Join()
		m["rbcast.join.requested"], m["rbcast.join.window"], m["rbcast.join.mtu"] = d(uint16(j.Requested)), d(j.Window), d(j.MTU)
		m["rbcast.join.nonce"], m["rbcast.join.config_hash"] = fmt.Sprintf("0x%016x", j.Nonce), fmt.Sprintf("0x%016x", j.ConfigHash)
	case frame.Welcome:
		w := v.Welcome()
		m["rbcast.welcome.nonce"], m["rbcast.welcome.config_hash"] = fmt.Sprintf("0x%016x", w.Nonce), fmt.Sprintf("0x%016x", w.ConfigHash)
		m["rbcast.welcome.assigned"], m["rbcast.welcome.members"] = d(uint16(w.Assigned)), d(w.Members)
	case frame.Start:
		ml := v.Members()
		var ids, macs, incs joined
		for i := range ml.Len() {
			mi := ml.At(i)
			ids.add("%d", mi.ID)
			macs.add("%v", net.HardwareAddr(mi.MAC[:]))
			incs.add("%d", mi.Incarnation)
		}
		m["rbcast.start.count"], m["rbcast.member.id"], m["rbcast.member.mac"], m["rbcast.member.incarnation"] = d(ml.Len()), ids.String(), macs.String(), incs.String()
	case frame.SeqData:
		u := v.SeqDataUID()
		m["rbcast.epoch"] = d(v.SeqDataEpoch())
		m["rbcast.origin"], m["rbcast.origin.incarnation"], m["rbcast.origin.seq"] = d(uint16(u.Origin)), d(u.Incarnation), d(u.Seq)
		m["rbcast.safe"], m["rbcast.held"] = d(v.SeqDataSafe()), d(v.SeqDataHeld())
	case frame.SeqAccept:
		al := v.Accepts()
		var glob, orig, inc, seq joined
		for i := range al.Len() {
			a := al.At(i)
			glob.add("%d", a.Global)
			orig.add("%d", a.UID.Origin)
			inc.add("%d", a.UID.Incarnation)
			seq.add("%d", a.UID.Seq)
		}
		m["rbcast.epoch"], m["rbcast.accept.count"], m["rbcast.accept.global"] = d(v.AcceptEpoch()), d(al.Len()), glob.String()
		m["rbcast.origin"], m["rbcast.origin.incarnation"], m["rbcast.origin.seq"] = orig.String(), inc.String(), seq.String()
		m["rbcast.safe"], m["rbcast.held"] = d(v.AcceptSafe()), d(v.AcceptHeld())
	case frame.SeqStatusRequest:
		m["rbcast.epoch"], m["rbcast.status.sequenced"] = d(v.StatusEpoch()), d(v.StatusDelivered())
		m["rbcast.safe"], m["rbcast.held"] = d(v.StatusSafe()), d(v.StatusHeld())
	case frame.SeqStatusReply:
		m["rbcast.epoch"], m["rbcast.status.delivered"] = d(v.StatusEpoch()), d(v.StatusDelivered())
	case frame.SeqRetransmit:
		m["rbcast.epoch"] = d(v.RetransmitEpoch())
		ranges(v.RetransmitRanges())
	case frame.SeqElection:
		e := v.Election()
		m["rbcast.epoch"], m["rbcast.election.phase"], m["rbcast.election.reserved"] = d(e.Epoch), d(uint8(e.Phase)), "0"
		m["rbcast.election.candidate"], m["rbcast.election.last_global"] = d(uint16(e.Candidate)), d(e.LastGlobal)
	case frame.PcodeData:
		p := v.PcodeData()
		var ts joined
		for i, b := range p.Targets {
			for bit := range 8 {
				if b&(1<<bit) != 0 {
					ts.add("%d", 8*i+bit)
				}
			}
		}
		m["rbcast.pcode.step"], m["rbcast.pcode.global"], m["rbcast.pcode.stream"], m["rbcast.pcode.reserved"] = d(p.Step), d(p.Global), d(uint8(p.Stream)), "0"
		m["rbcast.pcode.targets_length"], m["rbcast.pcode.target"] = d(len(p.Targets)), ts.String()
		if len(p.Data) > 0 {
			m["rbcast.payload"] = hex.EncodeToString(p.Data)
		}
	case frame.PcodeNack:
		n := v.PcodeNack()
		m["rbcast.pcode.nack.kind"], m["rbcast.pcode.stream"], m["rbcast.pcode.source"] = d(uint8(n.Kind)), d(uint8(n.Stream)), d(uint16(n.Target))
		m["rbcast.pcode.last"], m["rbcast.pcode.step"] = d(n.Last), d(n.Step)
	case frame.PcodeStatus:
		pl := v.PcodeStatusPoint()
		var pts joined
		for i := range pl.Len() {
			pts.add("%d", pl.At(i))
		}
		m["rbcast.pcode.global"], m["rbcast.pcode.echo"] = d(v.PcodeStatusGlobal()), d(v.PcodeStatusEcho())
		m["rbcast.pcode.point_base"], m["rbcast.pcode.point_count"], m["rbcast.pcode.point"] = d(uint16(pl.Base())), d(pl.Len()), pts.String()
	case frame.PcodeAbort:
		a := v.PcodeAbort()
		m["rbcast.pcode.abort.reason"], m["rbcast.pcode.reserved"], m["rbcast.pcode.member"], m["rbcast.pcode.step"] = d(uint8(a.Reason)), "0", d(uint16(a.Member)), d(a.Step)
		m["rbcast.pcode.text_length"], m["rbcast.pcode.text"] = d(len(a.Text)), string(a.Text)
	case frame.FileOffer:
		o := v.FileOffer()
		m["rbcast.file.id"], m["rbcast.file.size"], m["rbcast.file.block_size"], m["rbcast.file.stamp"] = d(o.ID), d(o.Size), d(o.BlockSize), d(o.Stamp)
		m["rbcast.file.hash"], m["rbcast.file.name_length"], m["rbcast.file.name"] = hex.EncodeToString(o.Hash[:]), d(len(o.Name)), string(o.Name)
		if o.Alg != frame.FileHashSHA256 {
			m["rbcast.file.hash_alg"] = d(uint8(o.Alg))
		}
	case frame.FileData:
		m["rbcast.file.id"], m["rbcast.payload"] = d(v.FileID()), hex.EncodeToString(v.FileBlock())
	case frame.FileEnd:
		id, blocks, srtt, st := v.FileEnd()
		var aw joined
		for i, ml := 0, v.FileAwaited(); i < ml.Len(); i++ {
			aw.add("%d", ml.At(i))
		}
		m["rbcast.file.id"], m["rbcast.file.blocks"], m["rbcast.file.srtt"], m["rbcast.file.stamp"] = d(id), d(blocks), d(srtt), d(st)
		m["rbcast.file.awaited_count"], m["rbcast.file.awaited"] = d(v.FileAwaited().Len()), aw.String()
		if h, ok := v.FileEndHash(); ok {
			m["rbcast.file.hash"] = hex.EncodeToString(h[:])
		}
	case frame.FileStatus:
		st := v.FileStatus()
		m["rbcast.file.id"], m["rbcast.file.incarnation"], m["rbcast.file.state"], m["rbcast.file.reason"] = d(st.ID), d(st.Incarnation), d(uint8(st.State)), d(uint8(st.Reason))
		m["rbcast.file.credit"], m["rbcast.file.held"], m["rbcast.file.top"] = d(st.Credit), d(st.Held), d(st.Top)
		m["rbcast.file.echo"], m["rbcast.file.delay"] = d(st.Echo), d(st.Delay)
		rl := v.FileMissing()
		var first, last joined
		for i := range rl.Len() {
			first.add("%d", rl.At(i).First)
			last.add("%d", rl.At(i).Last)
		}
		m["rbcast.range_count"], m["rbcast.range.first"], m["rbcast.range.last"] = d(rl.Len()), first.String(), last.String()
	case frame.FileGone:
		g := v.FileGone()
		m["rbcast.file.id"], m["rbcast.file.reason"] = d(g.ID), d(uint8(g.Reason))
	case frame.SeqMember:
		c := v.SeqMemberChange()
		m["rbcast.epoch"], m["rbcast.safe"], m["rbcast.held"] = d(c.Epoch), d(c.Safe), d(c.Held)
		m["rbcast.member.change"], m["rbcast.member.reason"] = d(uint8(c.Change)), d(uint8(c.Reason))
		m["rbcast.member.id"], m["rbcast.member.incarnation"] = d(uint16(c.Member)), d(c.Incarnation)
	case frame.ViewJoin:
		j := v.ViewJoin()
		m["rbcast.join.requested"], m["rbcast.join.mtu"] = d(uint16(j.Requested)), d(j.MTU)
		m["rbcast.join.nonce"], m["rbcast.join.config_hash"] = fmt.Sprintf("0x%016x", j.Nonce), fmt.Sprintf("0x%016x", j.ConfigHash)
	case frame.ViewPrepare, frame.ViewCommit:
		ml := v.ViewMembers()
		var ids, macs, incs joined
		for i := range ml.Len() {
			mi := ml.At(i)
			ids.add("%d", mi.ID)
			macs.add("%v", net.HardwareAddr(mi.MAC[:]))
			incs.add("%d", mi.Incarnation)
		}
		m["rbcast.view.next"], m["rbcast.view.base"], m["rbcast.view.members"] = d(v.ViewNext()), d(v.ViewBase()), d(ml.Len())
		m["rbcast.member.id"], m["rbcast.member.mac"], m["rbcast.member.incarnation"] = ids.String(), macs.String(), incs.String()
		if v.Type() == frame.ViewCommit {
			cl := v.CommitCuts()
			var mem, cut, hold, from joined
			for i := range cl.Len() {
				x := cl.At(i)
				mem.add("%d", x.Member)
				cut.add("%d", x.Cut)
				hold.add("%d", x.Holder)
				from.add("%d", x.From)
			}
			m["rbcast.cut.count"], m["rbcast.cut.member"], m["rbcast.cut.cut"] = d(cl.Len()), mem.String(), cut.String()
			m["rbcast.cut.holder"], m["rbcast.cut.from"] = hold.String(), from.String()
			var fb joined
			for i := range ml.Len() {
				if v.CommitFromBase(i) {
					fb.add("%d", ml.At(i).ID)
				}
			}
			m["rbcast.commit.base_count"], m["rbcast.commit.from_base"] = d(v.CommitBaseCount()), fb.String()
		}
	case frame.ViewFlush:
		dl := v.FlushDelivered()
		var mem, gone, left, next joined
		bit := func(b bool) int {
			if b {
				return 1
			}
			return 0
		}
		for i := range dl.Len() {
			mem.add("%d", dl.At(i).Member)
			gone.add("%d", bit(dl.At(i).Gone))
			left.add("%d", bit(dl.At(i).Left))
			next.add("%d", dl.At(i).Next)
		}
		m["rbcast.view.next"], m["rbcast.view.base"], m["rbcast.flush.sent"] = d(v.ViewNext()), d(v.ViewBase()), d(v.FlushSent())
		m["rbcast.flush.coord"] = d(v.FlushCoord())
		m["rbcast.flush.count"], m["rbcast.flush.member"], m["rbcast.flush.delivered"] = d(dl.Len()), mem.String(), next.String()
		m["rbcast.flush.gone"], m["rbcast.flush.left"] = gone.String(), left.String()
	case frame.ViewRelay:
		m["rbcast.relay.base"], m["rbcast.relay.frame"] = d(v.RelayBase()), hex.EncodeToString(v.RelayFrame())
	case frame.ViewRefuse:
		r := v.ViewRefuse()
		m["rbcast.refuse.nonce"], m["rbcast.refuse.reason"] = fmt.Sprintf("0x%016x", r.Nonce), d(uint8(r.Reason))
		m["rbcast.refuse.config_hash"] = fmt.Sprintf("0x%016x", r.ConfigHash)
	case frame.GroupRemove:
		m["rbcast.remove.view"] = d(v.RemovedView())
	case frame.ViewSuspect:
		var ids joined
		for _, id := range v.Suspects() {
			ids.add("%d", id)
		}
		m["rbcast.suspect.count"], m["rbcast.suspect.member"] = d(len(v.Suspects())), ids.String()
	case frame.KeyMismatch:
		k := v.KeyMismatch()
		m["rbcast.mismatch.reason"], m["rbcast.mismatch.refused"] = d(uint8(k.Reason)), d(uint8(k.Refused))
		m["rbcast.mismatch.fingerprint"] = fmt.Sprintf("0x%016x", k.Fingerprint)
	}
	m["rbcast.crc32c"] = fmt.Sprintf("0x%08x", v.CRC())
	m["rbcast.crc32c.computed"] = m["rbcast.crc32c"]
	m["rbcast.crc32c.status"] = "1"
	m["frame.interface_name"] = "golden0"
	m["frame.interface_description"] = "rbcast node 3 on golden0 (02:00:00:00:00:03, MTU 1500)"
	m["frame.packet_flags_direction"] = "0x00000002"
	if v.Retransmission() {
		m["_ws.expert.message"] = "Retransmission"
	}
	return m
}

// TestDissectorGolden writes one frame of every golden vector with a
// Writer, decodes the file with tshark and the Lua dissector, and checks
// every field against frame's decoder.
func TestDissectorGolden(t *testing.T) {
	tshark(t)
	path, gs := writeGoldenCapture(t, t.TempDir())
	rows := runTshark(t, path, dissectorFields)
	if len(rows) != len(gs) {
		t.Fatalf("tshark decoded %d frames, wrote %d", len(rows), len(gs))
	}
	for i, g := range gs {
		v, err := frame.Parse(g.b)
		if err != nil {
			t.Fatal(err)
		}
		want := expectFields(v)
		for _, f := range dissectorFields {
			if rows[i][f] != want[f] {
				t.Errorf("%s: %s = %q, want %q", g.name, f, rows[i][f], want[f])
			}
		}
	}
}

// withCRC recomputes the CRC of an rbcast frame after a test changed it.
func withCRC(b []byte) []byte {
	n := len(b) - frame.CRCLen
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestDissectorExpertInfo checks that broken frames are flagged: bad CRC,
// bad length, unknown version, type and critical flag, malformed bodies.
func TestDissectorExpertInfo(t *testing.T) {
	tshark(t)
	byName := map[string][]byte{}
	for _, g := range goldenFrames(t) {
		byName[g.name] = g.b
	}
	clone := func(name string) []byte { return bytes.Clone(byName[name]) }
	cases := []struct {
		name   string
		b      []byte
		expert string // substring of _ws.expert.message
		status string // rbcast.crc32c.status, "" when not reached
	}{
		{"bad crc", func() []byte { b := clone("data"); b[34] ^= 0xff; return b }(), "Bad CRC-32C: frame says 799e55df, bytes give ", "0"},
		{"length beyond frame", func() []byte { b := clone("ack"); b[4], b[5] = 0x01, 0x00; return withCRC(b) }(), "Length field disagrees with the frame: length field 256, frame has 48 bytes", "1"},
		{"short", clone("ack")[:20], "shorter than the 32-byte header", ""},
		{"version", func() []byte { b := clone("ack"); b[0] = 1; return withCRC(b) }(), "Unsupported version", ""},
		{"unknown type", func() []byte { b := clone("ack"); b[1] = 0x7e; return withCRC(b) }(), "Unknown frame type", "1"},
		{"critical flag", func() []byte { b := clone("ack"); b[3] |= 0x08; return withCRC(b) }(), "Unknown critical flag", "1"},
		{"welcome no id", func() []byte {
			b := clone("welcome")
			b[frame.HeaderLen+8], b[frame.HeaderLen+9] = 0xff, 0xff
			return withCRC(b)
		}(), "reserved for 'no member'", "1"},
		{"nack range backwards", func() []byte {
			b := clone("nack")
			// first range 5..7 becomes 7..5
			off := frame.HeaderLen + 4*frame.AckEntryLen + 4
			binary.BigEndian.PutUint32(b[off:], 7)
			binary.BigEndian.PutUint32(b[off+4:], 5)
			return withCRC(b)
		}(), "last before first", "1"},
		{"election phase", func() []byte { b := clone("seq_election"); b[frame.HeaderLen+4] = 9; return withCRC(b) }(), "phase 9 (want 1..3)", "1"},
		{"member change", func() []byte {
			b := clone("seq_member")
			b[frame.HeaderLen+4*frame.AckEntryLen+12] = 5
			return withCRC(b)
		}(), "change 5 (want 1 removed or 2 readmitted)", "1"},
		{"member reason", func() []byte {
			b := clone("seq_member")
			b[frame.HeaderLen+4*frame.AckEntryLen+13] = 0
			return withCRC(b)
		}(), "reason 0 with change removed", "1"},
		{"file range at top", func() []byte {
			b := clone("file_status")
			binary.BigEndian.PutUint32(b[frame.HeaderLen+30+8+4:], 3)
			return withCRC(b)
		}(), "range 1 is 2..3 (want first <= last < top 3", "1"},
		{"flush flags", func() []byte {
			b := clone("view_flush_left")
			// the last entry's flags byte: left without gone
			b[len(b)-frame.CRCLen-5] = 2
			return withCRC(b)
		}(), "flush.delivered.flags", "1"},
		{"file status reason 14", func() []byte {
			b := clone("file_status_bad_name")
			b[frame.HeaderLen+9] = 14
			return withCRC(b)
		}(), "reason 14 with state failed", "1"},
		{"file gone reason", func() []byte { b := clone("file_gone"); b[frame.HeaderLen+4] = 1; return withCRC(b) }(), "reason 1 (want 3 closed, 4 aborted, 5 unknown)", "1"},
		{"file offer hash alg 1", func() []byte { b := clone("file_offer_blake3"); b[len(b)-frame.CRCLen-1] = 1; return withCRC(b) }(), "hash algorithm 1 (SHA-256 is an offer without the byte", "1"},
		{"truncated bundle", func() []byte {
			b := clone("data_bundle")
			// the last message's length (0) claims 200 bytes
			n := len(b) - frame.CRCLen
			binary.BigEndian.PutUint16(b[n-2:], 200)
			return withCRC(b)
		}(), "message of 200 bytes", "1"},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "broken.pcapng")
	w, err := CreateFile(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(&memLink{mac: net.HardwareAddr(testSrc[:])}, w, Options{Node: "3", Interface: "golden0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range cases {
		// Not padded: "short" and "length" must not gain bytes.
		eth := append(frame.AppendEthernet(nil, frame.Broadcast, testSrc, frame.EtherType), cs.b...)
		if _, err := c.Send([][]byte{eth}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rows := runTshark(t, path, []string{"rbcast.type", "_ws.expert.message", "rbcast.crc32c.status"})
	if len(rows) != len(cases) {
		t.Fatalf("tshark decoded %d frames, wrote %d", len(rows), len(cases))
	}
	for i, cs := range cases {
		if got := rows[i]["_ws.expert.message"]; !strings.Contains(got, cs.expert) {
			t.Errorf("%s: expert info %q, want it to contain %q", cs.name, got, cs.expert)
		}
		if got := rows[i]["rbcast.crc32c.status"]; got != cs.status {
			t.Errorf("%s: CRC status %q, want %q", cs.name, got, cs.status)
		}
	}
}
