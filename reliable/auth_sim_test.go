package reliable

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

func simKey(t testing.TB, seed byte) *auth.Key {
	secret := make([]byte, auth.KeySize)
	for i := range secret {
		secret[i] = seed ^ byte(i*7)
	}
	k, err := auth.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// authRun is one run of an authenticated group of n members on a lossy
// simulated segment: founding a view, k messages from each member, what
// each delivered and which views it installed.
type authRun struct {
	net     *testnet.Network
	eps     []*testnet.Endpoint
	drivers []*Driver
	got     [][]string // per member: "from:message" in delivery order, per sender FIFO
	views   [][]string // per member: the views installed
}

func newAuthRun(t *testing.T, seed uint64, n int, key *auth.Key, incBase uint32, clockAt time.Duration) *authRun {
	return newAuthRunConfig(t, seed, n, auth.Config{Key: key}, incBase, clockAt)
}

// newAuthRunConfig is newAuthRun with ac's authentication (Encrypt).
func newAuthRunConfig(t *testing.T, seed uint64, n int, ac auth.Config, incBase uint32, clockAt time.Duration) *authRun {
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &authRun{net: net, got: make([][]string, n), views: make([][]string, n)}
	for i := range n {
		ep, err := net.Attach(testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.03}})
		if err != nil {
			t.Fatal(err)
		}
		r.eps = append(r.eps, ep)
		i := i
		cfg := Config{Group: 9, Views: true, Size: n, RequestID: frame.MemberID(i), Incarnation: incBase + uint32(i),
			FailureTimeout: 300 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, Logger: quiet,
			Auth: &auth.Config{Key: ac.Key, Encrypt: ac.Encrypt, Now: func() time.Time { return net.Now().Add(clockAt) }},
			Deliver: func(from frame.MemberID, data []byte) {
				r.got[i] = append(r.got[i], fmt.Sprintf("%d:%s", from, data))
			},
			OnEvent: func(ev Event) {
				if ev.Kind == ViewInstalled {
					r.views[i] = append(r.views[i], fmt.Sprintf("%d%v", ev.View.ID, ids(ev.View.Members)))
				}
			},
		}
		d, err := NewDriver(ep, cfg, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		r.drivers = append(r.drivers, d)
		ep.Bind(d)
	}
	return r
}

func ids(ms []frame.MemberInfo) []frame.MemberID {
	var out []frame.MemberID
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func (r *authRun) run(t *testing.T, k int) {
	r.net.RunFor(500 * time.Millisecond) // found the view
	next := make([]int, len(r.drivers))
	for round := 0; round < 100000; round++ {
		busy := false
		for i, d := range r.drivers {
			for next[i] < k {
				if d.Propose(r.net.Now(), []byte(fmt.Sprintf("m%d-%d", i, next[i]))) != nil {
					break
				}
				next[i]++
			}
			busy = busy || next[i] < k
		}
		if !busy {
			break
		}
		r.net.RunFor(time.Millisecond)
	}
	r.net.RunFor(2 * time.Second)
}

// perSender splits a member's deliveries by sender (FIFO promises each
// sender's order, not the interleaving).
func perSender(got []string) map[string][]string {
	m := map[string][]string{}
	for _, g := range got {
		from, _, _ := strings.Cut(g, ":")
		m[from] = append(m[from], g)
	}
	return m
}

// recorder is a station that keeps a copy of every frame it hears.
type recorder struct {
	ep     *testnet.Endpoint
	frames [][]byte
}

func (rec *recorder) Step(now time.Time) time.Time {
	rx := make([]link.Frame, 16)
	for {
		n, _ := rec.ep.Recv(time.Time{}, rx)
		if n == 0 {
			return time.Time{}
		}
		for _, f := range rx[:n] {
			rec.frames = append(rec.frames, bytes.Clone(f.Data))
		}
	}
}

// TestAuthRogueStation: a rogue on the segment replays every frame of
// the group it heard, flips bits in them and recomputes the CRC, injects
// frames under a wrong key, and replays frames of the members' earlier
// incarnations (a recorded earlier run). Every member delivers exactly
// what it delivers without the rogue, installs the same views, and every
// rejected frame is counted.
func TestAuthRogueStation(t *testing.T) {
	const n, k = 3, 40
	key := simKey(t, 1)

	// The members' earlier lives: the same MACs (the segment assigns them
	// in order), other incarnations, an hour earlier on their clocks.
	earlier := newAuthRun(t, 7, n, key, 100, -time.Hour)
	rec := &recorder{ep: must(earlier.net.Attach(testnet.EndpointConfig{}))}
	rec.ep.Bind(rec)
	earlier.run(t, 5)
	old := rec.frames

	clean := newAuthRun(t, 1, n, key, 1, 0)
	clean.run(t, k)

	rogued := newAuthRun(t, 1, n, key, 1, 0)
	live := &recorder{ep: must(rogued.net.Attach(testnet.EndpointConfig{}))}
	live.ep.Bind(live)
	rogued.net.RunFor(500 * time.Millisecond)
	heard := slices.Clone(live.frames)
	wrong, err := auth.Wrap(&nullLink{mac: live.ep.HardwareAddr()}, auth.Config{Group: 9, Key: simKey(t, 2)})
	if err != nil {
		t.Fatal(err)
	}
	var attack [][]byte
	for _, f := range heard {
		attack = append(attack, f) // replay
		flipped := bytes.Clone(f)
		flipped[len(flipped)-5] ^= 0x10
		frame.SetCRC(flipped[frame.EthernetHeaderLen:])
		attack = append(attack, flipped)
	}
	// Frames under the wrong key: the heard frames stripped of their
	// section cannot be rebuilt without the key, so the rogue seals
	// frames of its own.
	for i := range 20 {
		b := frame.AppendEthernet(nil, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, [6]byte(live.ep.HardwareAddr()), frame.EtherType)
		h := frame.Header{Group: 9, Sender: 0, Incarnation: 1, ViewID: 1, Seq: uint32(i)}
		b, _ = frame.Append(b, &h, &frame.Payload{T: frame.Data, Data: []byte("forged")})
		wrong.Send([][]byte{b})
	}
	attack = append(attack, wrong.Unwrap().(*nullLink).sent...)
	attack = append(attack, old...)
	sendAttack(t, rogued.net, live.ep, attack)
	rogued.run(t, k)

	for i := range n {
		if !slices.Equal(clean.views[i], rogued.views[i]) {
			t.Errorf("member %d installed %v with the rogue, %v without", i, rogued.views[i], clean.views[i])
		}
		c, r := perSender(clean.got[i]), perSender(rogued.got[i])
		for from, msgs := range c {
			if !slices.Equal(msgs, r[from]) {
				t.Errorf("member %d: from %s delivered %d messages with the rogue, %d without", i, from, len(r[from]), len(msgs))
			}
		}
		if len(clean.got[i]) != (n-1)*k && len(clean.got[i]) != n*k {
			t.Errorf("member %d delivered %d messages in the clean run", i, len(clean.got[i]))
		}
		for _, g := range rogued.got[i] {
			if strings.Contains(g, "forged") {
				t.Errorf("member %d delivered a forged message %q", i, g)
			}
		}
	}
	var dropped uint64
	var total auth.Stats
	for _, d := range rogued.drivers {
		s := d.Stats().Auth
		if s.Verified == 0 || s.Sent == 0 {
			t.Fatalf("a member sent %d and verified %d frames: not authenticated", s.Sent, s.Verified)
		}
		dropped += s.Dropped()
		total.Replay += s.Replay
		total.BadTag += s.BadTag
		total.UnknownKey += s.UnknownKey
		total.EarlierIncarnation += s.EarlierIncarnation
		total.TooOld += s.TooOld
		total.Own += s.Own
	}
	// Every attack frame reaches every member (no loss on the rogue's
	// way out, 3% in): each is dropped unless lost.
	if min := uint64(float64(len(attack)*n) * 0.9); dropped < min {
		t.Errorf("members dropped %d frames of %d×%d attacking (%+v)", dropped, len(attack), n, total)
	}
	if total.Replay+total.TooOld == 0 || total.BadTag == 0 || total.UnknownKey+total.BadTag == 0 || total.EarlierIncarnation+total.Replay == 0 || total.Own == 0 {
		t.Errorf("a kind of attack went uncounted: %+v", total)
	}
	t.Logf("attack frames %d, dropped %d: %+v", len(attack), dropped, total)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sendAttack has ep send frames, 32 at a time, every 5 ms from now on.
func sendAttack(t *testing.T, net *testnet.Network, ep *testnet.Endpoint, frames [][]byte) {
	for len(frames) > 0 {
		m := min(32, len(frames))
		if _, err := ep.Send(frames[:m]); err != nil {
			t.Fatal(err)
		}
		frames = frames[m:]
		net.RunFor(5 * time.Millisecond)
	}
}

// nullLink keeps what is sent through it.
type nullLink struct {
	mac  net.HardwareAddr
	sent [][]byte
}

func (l *nullLink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		l.sent = append(l.sent, bytes.Clone(f))
	}
	return len(frames), nil
}
func (l *nullLink) Recv(time.Time, []link.Frame) (int, error) { return 0, nil }
func (l *nullLink) MTU() int                                  { return 1500 }
func (l *nullLink) HardwareAddr() net.HardwareAddr            { return l.mac }
func (l *nullLink) Stats() (link.Stats, error)                { return link.Stats{}, nil }
func (l *nullLink) Close() error                              { return nil }

// TestAuthRotationDuringStream rotates the group key while every member
// streams on a lossy segment, in virtual time: each member installs the
// new key, then (members at different moments) activates it, then retires
// the old one. Deliveries equal those of the run without a rotation, no
// frame is dropped for its key, and every member ends on the new key
// alone.
func TestAuthRotationDuringStream(t *testing.T) {
	const n, k = 3, 1000
	oldKey, newKey := simKey(t, 1), simKey(t, 3)
	if oldKey.ID() == newKey.ID() {
		t.Fatalf("test keys share the id %d", oldKey.ID())
	}
	clean := newAuthRun(t, 5, n, oldKey, 1, 0)
	clean.run(t, k)

	rot := newAuthRun(t, 5, n, oldKey, 1, 0)
	links := make([]*auth.Link, n)
	for i, d := range rot.drivers {
		links[i] = d.l.(*auth.Link)
	}
	// Steps at these times after the view is founded, member i's
	// activation i×7 ms after the previous member's.
	type step struct {
		at time.Duration
		do func() error
	}
	var steps []step
	for i, a := range links {
		steps = append(steps, step{100 * time.Millisecond, func() error { return a.Install(newKey) }})
		steps = append(steps, step{200*time.Millisecond + time.Duration(i)*7*time.Millisecond, func() error { return a.Activate(newKey.Fingerprint()) }})
		steps = append(steps, step{400 * time.Millisecond, func() error { a.Retire(); return nil }})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	rot.net.RunFor(500 * time.Millisecond)
	start := rot.net.Now()
	next := make([]int, n)
	var deliveredAtRetire int
	for round := 0; round < 100000; round++ {
		for len(steps) > 0 && rot.net.Now().Sub(start) >= steps[0].at {
			if err := steps[0].do(); err != nil {
				t.Fatal(err)
			}
			if steps[0].at == 400*time.Millisecond && deliveredAtRetire == 0 {
				deliveredAtRetire = len(rot.got[0])
			}
			steps = steps[1:]
		}
		busy := len(steps) > 0
		for i, d := range rot.drivers { // one message a millisecond each
			if next[i] < k && d.Propose(rot.net.Now(), []byte(fmt.Sprintf("m%d-%d", i, next[i]))) == nil {
				next[i]++
			}
			busy = busy || next[i] < k
		}
		if !busy {
			break
		}
		rot.net.RunFor(time.Millisecond)
	}
	rot.net.RunFor(2 * time.Second)
	if deliveredAtRetire == 0 || deliveredAtRetire >= len(clean.got[0]) {
		t.Fatalf("member 0 had delivered %d of %d messages at the retirement: the rotation was not during the stream", deliveredAtRetire, len(clean.got[0]))
	}
	for i := range n {
		c, r := perSender(clean.got[i]), perSender(rot.got[i])
		for from, msgs := range c {
			if !slices.Equal(msgs, r[from]) {
				t.Errorf("member %d: from %s delivered %d messages across the rotation, %d without", i, from, len(r[from]), len(msgs))
			}
		}
		if !slices.Equal(clean.views[i], rot.views[i]) {
			t.Errorf("member %d installed %v across the rotation, %v without", i, rot.views[i], clean.views[i])
		}
		s := links[i].Auth()
		if s.Active != newKey.Fingerprint() || !slices.Equal(s.Accepted, []uint64{newKey.Fingerprint()}) {
			t.Errorf("member %d ends with key %016x accepting %x", i, s.Active, s.Accepted)
		}
		if s.UnknownKey+s.BadTag != 0 {
			t.Errorf("member %d dropped frames for their key: %+v", i, s)
		}
	}
	t.Logf("member 0 delivered %d of %d messages before the retirement", deliveredAtRetire, len(clean.got[0]))
}

// TestAuthEncryptedGroup: an encrypted group on a lossy segment founds its
// view and delivers what the same group delivers with the MAC alone:
// Nacks, Joins and view frames (structured bodies) verify, decrypt and
// reach the core like Data.
func TestAuthEncryptedGroup(t *testing.T) {
	const n, k = 3, 200
	key := simKey(t, 1)
	mac := newAuthRun(t, 11, n, key, 1, 0)
	mac.run(t, k)
	enc := newAuthRunConfig(t, 11, n, auth.Config{Key: key, Encrypt: true}, 1, 0)
	enc.run(t, k)
	for i := range n {
		if len(enc.got[i]) != (n-1)*k {
			t.Errorf("member %d delivered %d messages encrypted, want %d", i, len(enc.got[i]), (n-1)*k)
		}
		if !slices.Equal(enc.views[i], mac.views[i]) {
			t.Errorf("member %d installed %v encrypted, %v with the MAC alone", i, enc.views[i], mac.views[i])
		}
		c, r := perSender(mac.got[i]), perSender(enc.got[i])
		for from, msgs := range c {
			if !slices.Equal(msgs, r[from]) {
				t.Errorf("member %d: from %s delivered %d messages encrypted, %d with the MAC alone", i, from, len(r[from]), len(msgs))
			}
		}
		s := enc.drivers[i].Stats()
		if !s.Auth.Encrypt || s.Auth.Dropped() != 0 || s.BadFrames.Body != 0 {
			t.Errorf("member %d: auth %+v, malformed bodies %d", i, *s.Auth, s.BadFrames.Body)
		}
	}
}

// TestAuthEncryptedRegistration: an encrypted group founded by
// registration (Server, Size) registers and exchanges: registration steps
// the frames its link verified without their CRC (stepFrame), as the
// event loop does; a decrypted body no longer matches the wire's CRC, and
// a Welcome stepped with it would be dropped as corrupt.
func TestAuthEncryptedRegistration(t *testing.T) {
	r := rtnet.New(t, 25)
	key := simKey(t, 3)
	var links []*rtnet.Link
	var cfgs []Config
	for i := range 3 {
		links = append(links, r.Attach(t, testnet.EndpointConfig{}))
		cfgs = append(cfgs, Config{Group: 21, Size: 3, Server: i == 0, Logger: quiet, Auth: &auth.Config{Key: key, Encrypt: true}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, errs := joinRegistered(t, ctx, links, cfgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: Join: %v", i, err)
		}
	}
	exchange(t, groups, 50)
	for i, g := range groups {
		if s := g.Stats(); s.Auth == nil || s.Auth.Verified == 0 || s.Auth.Dropped() != 0 || s.BadFrames.Checksum != 0 {
			t.Errorf("member %d: auth %+v, %d frames dropped by checksum", i, s.Auth, s.BadFrames.Checksum)
		}
	}
}
