package replay

import (
	"bytes"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
)

func testKey(t testing.TB, seed byte) *auth.Key {
	secret := make([]byte, auth.KeySize)
	for i := range secret {
		secret[i] = seed ^ byte(i*11)
	}
	k, err := auth.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A capture of an authenticated lossy run (encrypted, and not), verified
// with the group key: every frame verifies, check finds nothing, and
// simulate re-runs every member to exactly its live deliveries (reading
// the encrypted bodies decrypted).
func TestAuthenticateCheckSimulate(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(map[bool]string{false: "mac", true: "encrypt"}[encrypt], func(t *testing.T) {
			key := testKey(t, 1)
			run := runLossyAuth(t, filepath.Join(t.TempDir(), "auth.pcapng"), 5, 3, 200, 0.05, &auth.Config{Key: key, Encrypt: encrypt})
			c, err := ReadFile(run.path, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			all := len(c.Records)
			res, err := Authenticate(c, AuthOptions{Keys: []*auth.Key{key}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != all || len(res.Dropped) != 0 {
				t.Fatalf("%d of %d frames verified, dropped %v", res.Verified, all, res.Dropped[:min(5, len(res.Dropped))])
			}
			if vs := Check(c, CheckOptions{}); Judged(vs) != 0 {
				t.Fatalf("check found %d violations, the first %+v", Judged(vs), vs[0])
			}
			for i, m := range run.members {
				sim, err := Simulate(c, SimOptions{Node: m.ID, Members: run.members, Iface: -1})
				if err != nil {
					t.Fatal(err)
				}
				if len(run.got[i]) != 2*200 || len(sim.Deliveries) != len(run.got[i]) {
					t.Fatalf("member %d: re-run delivered %d messages, the live node %d", m.ID, len(sim.Deliveries), len(run.got[i]))
				}
				for k, d := range sim.Deliveries {
					if want := run.got[i][k]; d.From != want.From || !bytes.Equal(d.Data, want.Data) {
						t.Fatalf("member %d delivery %d: re-run %d %q, live %d %q", m.ID, k, d.From, d.Data, want.From, want.Data)
					}
				}
			}
		})
	}
}

// A capture with a rogue's frames in it (every frame of member 1's
// interface replayed later, some with a flipped bit and the CRC recomputed,
// frames under another key): Authenticate drops exactly the rogue's
// frames, by reason, and check and simulate see what they see without
// the rogue.
func TestAuthenticateDropsRogueFrames(t *testing.T) {
	key := testKey(t, 1)
	run := runLossyAuth(t, filepath.Join(t.TempDir(), "auth.pcapng"), 6, 3, 100, 0.05, &auth.Config{Key: key})
	clean, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attacked, _ := ReadFile(run.path, ReadOptions{})
	last := attacked.Records[len(attacked.Records)-1]
	n, at := last.N, last.Time
	var replays, flips int
	for _, r := range slices.Clone(attacked.Records) {
		if r.Iface != 0 || r.Dir != DirIn || r.View == nil {
			continue
		}
		n++
		at = at.Add(time.Microsecond)
		cp := r
		cp.N, cp.Time, cp.Data = n, at, bytes.Clone(r.Data)
		cp.decode(frame.EtherType)
		attacked.Records = append(attacked.Records, cp)
		replays++
		if replays%10 == 0 {
			n++
			fl := cp
			fl.N, fl.Data = n, bytes.Clone(r.Data)
			fl.Data[len(fl.Data)-6] ^= 0x20
			frame.SetCRC(fl.Data[frame.EthernetHeaderLen:])
			fl.decode(frame.EtherType)
			attacked.Records = append(attacked.Records, fl)
			flips++
		}
	}
	// Frames under another key, from a station of its own.
	l := &sink{}
	wrong, err := auth.Wrap(l, auth.Config{Group: 7, Key: testKey(t, 2)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		b := frame.AppendEthernet(nil, frame.Broadcast, [6]byte{2, 0xee, 0, 0, 0, 1}, frame.EtherType)
		h := frame.Header{Group: 7, Sender: 1, Incarnation: 1, Seq: uint32(i)}
		b, _ = frame.Append(b, &h, &frame.Payload{T: frame.Data, Data: []byte("forged")})
		if _, err := wrong.Send([][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range l.sent {
		n++
		r := Record{N: n, Time: at, Iface: 0, Dir: DirIn, Data: b}
		r.decode(frame.EtherType)
		attacked.Records = append(attacked.Records, r)
	}

	cres, err := Authenticate(clean, AuthOptions{Keys: []*auth.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	ares, err := Authenticate(attacked, AuthOptions{Keys: []*auth.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, d := range ares.Dropped {
		reasons[d.Reason]++
	}
	// A flipped copy of a frame already verified is a replay: the window
	// is checked before the tag.
	want := map[string]int{"a replay (counter seen before)": replays + flips, "a key id of neither key slot": 5}
	if len(cres.Dropped) != 0 || ares.Verified != cres.Verified || !mapsEqual(reasons, want) {
		t.Fatalf("clean: %d verified, %d dropped; attacked: %d verified, dropped %v, want %v", cres.Verified, len(cres.Dropped), ares.Verified, reasons, want)
	}
	if len(attacked.Records) != len(clean.Records) {
		t.Fatalf("%d records left of the attacked capture, %d of the clean one", len(attacked.Records), len(clean.Records))
	}
	if vs := Check(attacked, CheckOptions{}); Judged(vs) != 0 {
		t.Fatalf("check found %d violations in the attacked capture: %+v", Judged(vs), vs[0])
	}
	s1, err := Simulate(clean, SimOptions{Node: run.members[0].ID, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Simulate(attacked, SimOptions{Node: run.members[0].ID, Members: run.members, Iface: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(s1.Deliveries, s2.Deliveries, func(a, b SimDelivery) bool { return a.From == b.From && bytes.Equal(a.Data, b.Data) }) {
		t.Fatalf("simulate delivered %d messages on the attacked capture, %d on the clean one", len(s2.Deliveries), len(s1.Deliveries))
	}
	var out bytes.Buffer
	ares.Write(&out)
	if !strings.Contains(out.String(), "dropped: a replay (counter seen before) (frames ") {
		t.Errorf("Write:\n%s", out.String())
	}
	t.Logf("%s", out.String())

	if _, err := Authenticate(clean, AuthOptions{}); err == nil || !strings.Contains(err.Error(), "0 keys given") {
		t.Errorf("no key: %v", err)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sink is a link that keeps what is sent through it.
type sink struct{ sent [][]byte }

func (l *sink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		l.sent = append(l.sent, bytes.Clone(f))
	}
	return len(frames), nil
}
func (l *sink) Recv(time.Time, []link.Frame) (int, error) { return 0, nil }
func (l *sink) MTU() int                                  { return 1500 }
func (l *sink) HardwareAddr() net.HardwareAddr            { return net.HardwareAddr{2, 0xee, 0, 0, 0, 1} }
func (l *sink) Stats() (link.Stats, error)                { return link.Stats{}, nil }
func (l *sink) Close() error                              { return nil }
