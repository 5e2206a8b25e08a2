package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/capture"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/link/afpacket"
	"github.com/rbcast/rbcast/link/auth"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// TestInjectIntoAuthenticatedGroupNetns: three members of an
// authenticated group on a namespace segment (prefix rba, 5% nftables
// loss into two of them) send over ring links while a fourth station
// records every frame it hears into a capture file. While the members send
// a second round, the station injects the whole recording back onto the
// segment (what pcap-replay inject does). Every member delivers exactly
// the messages sent, in order per sender (the streams hash equal), and
// drops the replayed frames, counted.
func TestInjectIntoAuthenticatedGroupNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN for namespaces, CAP_NET_RAW for AF_PACKET)")
	}
	const n, k = 3, 1500
	topo := netnstest.Up(t, netns.Options{Hosts: n + 1, Prefix: "rba" + randomSuffix()})
	for i := 1; i < n; i++ {
		if err := topo.Hosts[i].SetLoss(netns.In, netns.Loss{Percent: 5, EtherType: frame.EtherType}); err != nil {
			t.Fatal(err)
		}
	}
	key := testKey(t, 3)
	links := make([]link.Link, n)
	for i := range n {
		h := topo.Hosts[i]
		if err := h.Do(func() (err error) { links[i], err = ring.Open(h.Iface, ring.Config{}); return err }); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
	}
	rogueHost := topo.Hosts[n]
	var rogue link.Link
	if err := rogueHost.Do(func() (err error) {
		rogue, err = afpacket.Open(rogueHost.Iface, afpacket.Config{RecvBuffer: 16 << 20})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	path := filepath.Join(t.TempDir(), "recorded.pcapng")
	w, err := capture.CreateFile(path, capture.WriterOptions{QueueBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := capture.Wrap(rogue, w, capture.Options{Interface: "rogue"})
	if err != nil {
		t.Fatal(err)
	}
	stopRec := make(chan struct{})
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		buf := make([]link.Frame, 64)
		for {
			select {
			case <-stopRec:
				return
			default:
			}
			if _, err := rec.Recv(time.Now().Add(50*time.Millisecond), buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("recorder: %v", err)
				return
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := make([]map[frame.MemberID][][]byte, n)
	groups := make([]*reliable.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		got[i] = map[frame.MemberID][][]byte{}
		cfg := reliable.Config{Group: 21, Size: n, Server: i == 0, Logger: quietLogger(), Auth: &auth.Config{Key: key},
			Deliver: func(from frame.MemberID, data []byte) {
				mu.Lock()
				got[i][from] = append(got[i][from], bytes.Clone(data))
				mu.Unlock()
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[i], errs[i] = reliable.Join(ctx, links[i], cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: Join: %v", i, err)
		}
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	send := func(round int) {
		for _, g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range k {
					if err := g.Send(ctx, message(round, m, g.Self())); err != nil {
						t.Errorf("member %d: Send: %v", g.Self(), err)
						return
					}
				}
			}()
		}
	}
	waitDelivered := func(per int) {
		for {
			mu.Lock()
			done := true
			for i := range n {
				for _, g := range groups {
					if g.Self() != groups[i].Self() {
						done = done && len(got[i][g.Self()]) >= per
					}
				}
			}
			mu.Unlock()
			if done {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("not every member delivered %d messages of every other in time", per)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	send(1)
	wg.Wait()
	waitDelivered(k)
	time.Sleep(200 * time.Millisecond) // the last acknowledgements, recorded too
	close(stopRec)
	<-recDone
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := ReadFile(path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	frames := Frames(c, false)
	broadcast := 0
	for _, f := range frames {
		if f.Data[0] == 0xff {
			broadcast++
		}
	}
	before := make([]auth.Stats, n)
	for i, g := range groups {
		before[i] = *g.Stats().Auth
	}

	// Round 2, with the recording injected into it.
	injected := make(chan error, 1)
	go func() {
		sent, err := Inject(ctx, rogue, frames, InjectOptions{Speed: 4})
		if err == nil && sent != len(frames) {
			err = fmt.Errorf("injected %d of %d frames", sent, len(frames))
		}
		injected <- err
	}()
	send(2)
	wg.Wait()
	waitDelivered(2 * k)
	if err := <-injected; err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the last injected frames arrive

	mu.Lock()
	defer mu.Unlock()
	for i, g := range groups {
		for _, s := range groups {
			if s.Self() == g.Self() {
				continue
			}
			want := sha256.New()
			for round := 1; round <= 2; round++ {
				for m := range k {
					want.Write(message(round, m, s.Self()))
				}
			}
			have := sha256.New()
			for _, d := range got[i][s.Self()] {
				have.Write(d)
			}
			if !bytes.Equal(have.Sum(nil), want.Sum(nil)) {
				t.Errorf("member %d: the %d messages delivered from member %d do not hash as the %d sent", g.Self(), len(got[i][s.Self()]), s.Self(), 2*k)
			}
		}
		a := *g.Stats().Auth
		dropped := a.Dropped() - before[i].Dropped()
		replays := a.Replay + a.TooOld + a.EarlierIncarnation - before[i].Replay - before[i].TooOld - before[i].EarlierIncarnation
		// Every broadcast frame reaches every member but 5%. A member's
		// own frames pass its verifier (it never verified its own
		// stream) and its core discards them: a third of the frames.
		if min := uint64(float64(broadcast) * 0.5); replays < min {
			t.Errorf("member %d dropped %d replayed frames (%d in all) of %d broadcast injected: %+v", g.Self(), replays, dropped, broadcast, a)
		}
		if a.BadTag+a.UnknownKey+a.Unauthenticated != 0 {
			t.Errorf("member %d dropped genuine-looking frames for their tag or key: %+v", g.Self(), a)
		}
		t.Logf("member %d: %d replayed frames dropped (replay %d, too old %d, earlier incarnation %d)", g.Self(), replays,
			a.Replay-before[i].Replay, a.TooOld-before[i].TooOld, a.EarlierIncarnation-before[i].EarlierIncarnation)
	}
	t.Logf("recorded %d frames, injected %d (%d broadcast) during round 2", len(c.Records), len(frames), broadcast)
}

// message is message m of a round from a member, 100 bytes or so.
func message(round, m int, from frame.MemberID) []byte {
	return fmt.Appendf(nil, "round %d message %d from member %d %s", round, m, from, bytes.Repeat([]byte{'.'}, 64))
}
