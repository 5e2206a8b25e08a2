package reliable

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet/netns"
	"github.com/rbcast/rbcast/testnet/netns/netnstest"
)

// Order Total on a real network: four namespaces on a bridge, ring links,
// nftables loss per member (lossFor), every member sending at once. Every
// member's delivered log — every message, its own included, with its
// sender — must be identical byte for byte, and each sender's stream in it
// must hash to what the sender sent.

// totalLog is one member's delivered sequence and, per sender, the stream
// hash and byte count.
type totalLog struct {
	log    bytes.Buffer
	hashes map[frame.MemberID][]byte
	bytes  map[frame.MemberID]int
}

// sendTotal sends perSender bytes from g in messages of random size (half
// of them small, so both methods of the hybrid run); it returns the
// stream's SHA-256, or an error.
func sendTotal(ctx context.Context, g *Group, perSender int) ([]byte, error) {
	h := sha256.New()
	rng := rand.New(rand.NewPCG(uint64(g.Self()), 77))
	buf := make([]byte, g.MaxMessage())
	for total := 0; total < perSender; {
		n := rng.IntN(g.MaxMessage() + 1)
		if rng.IntN(2) == 0 {
			n = rng.IntN(128)
		}
		m := buf[:min(n, perSender-total)]
		for i := range m {
			m[i] = byte(rng.Uint32())
		}
		hashMessage(h, m)
		if err := g.Send(ctx, m); err != nil {
			return nil, fmt.Errorf("member %d: Send after %d bytes: %w", g.Self(), total, err)
		}
		total += len(m)
	}
	return h.Sum(nil), nil
}

// recvTotal receives until every member in from has delivered perSender
// bytes here.
func recvTotal(ctx context.Context, g *Group, from []frame.MemberID, perSender int) (*totalLog, error) {
	tl := &totalLog{hashes: map[frame.MemberID][]byte{}, bytes: map[frame.MemberID]int{}}
	hs := map[frame.MemberID]interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
	}{}
	var buf []byte
	for done := 0; done < len(from); {
		id, data, err := g.RecvAppend(ctx, buf[:0])
		if err != nil {
			return tl, fmt.Errorf("member %d: Recv: %w (have %v bytes)", g.Self(), err, tl.bytes)
		}
		buf = data
		var hdr [6]byte
		binary.BigEndian.PutUint16(hdr[:], uint16(id))
		binary.BigEndian.PutUint32(hdr[2:], uint32(len(data)))
		tl.log.Write(hdr[:])
		tl.log.Write(data)
		if hs[id] == nil {
			hs[id] = sha256.New()
		}
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(data)))
		hs[id].Write(n[:])
		hs[id].Write(data)
		tl.bytes[id] += len(data)
		for _, f := range from {
			if f == id && tl.bytes[id] == perSender {
				done++
			}
		}
	}
	for id, h := range hs {
		tl.hashes[id] = h.Sum(nil)
	}
	return tl, nil
}

// checkTotalLogs compares the survivors' logs byte for byte and each
// sender's stream with what it sent.
func checkTotalLogs(t *testing.T, groups []*Group, logs []*totalLog, sent map[frame.MemberID][]byte) {
	t.Helper()
	ref := -1
	for i, l := range logs {
		if l == nil {
			continue
		}
		for id, want := range sent {
			if got := l.hashes[id]; !bytes.Equal(got, want) {
				t.Errorf("member %d: stream of member %d: SHA-256 %x, sender's %x", groups[i].Self(), id, got, want)
			}
		}
		if ref < 0 {
			ref = i
			continue
		}
		if !bytes.Equal(l.log.Bytes(), logs[ref].log.Bytes()) {
			a, b := l.log.Bytes(), logs[ref].log.Bytes()
			p := 0
			for p < min(len(a), len(b)) && a[p] == b[p] {
				p++
			}
			t.Errorf("member %d's log (%d bytes) differs from member %d's (%d bytes) from byte %d on", groups[i].Self(), len(a), groups[ref].Self(), len(b), p)
		}
	}
}

// lossyRings makes the 4-host segment of the netns tests, with lossFor's
// loss into each host, and a ring link on every host. Its namespaces
// take a random prefix (netns.Options), so two test processes at once
// do not collide on fixed names.
func lossyRings(t *testing.T) (*netns.Topology, []link.Link) {
	topo := netnstest.Up(t, netns.Options{Hosts: 4})
	for i, l := range lossFor {
		if l.Percent > 0 {
			if err := topo.Hosts[i].SetLoss(netns.In, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	return topo, openRings(t, topo)
}

// Registered group (host 0 the server and so the sequencer), the hybrid
// method, everyone sending 1 MB at once.
func TestNetnsTotal(t *testing.T) {
	topo, links := lossyRings(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := joinAll(t, ctx, topo, links, Config{Group: 17, Order: Total}, false)
	const perSender = 1 << 20
	var ids []frame.MemberID
	for _, g := range groups {
		ids = append(ids, g.Self())
	}
	sent := map[frame.MemberID][]byte{}
	logs := make([]*totalLog, len(groups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i, g := range groups {
		wg.Add(2)
		go func() {
			defer wg.Done()
			h, err := sendTotal(ctx, g, perSender)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			sent[g.Self()] = h
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			l, err := recvTotal(ctx, g, ids, perSender)
			if err != nil {
				t.Error(err)
				return
			}
			logs[i] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		return
	}
	checkTotalLogs(t, groups, logs, sent)
	closeAll(t, groups)
	t.Logf("4 members × %d MB, total order, in %v (%.1f MB/s delivered per member); logs of %d bytes identical",
		perSender>>20, elapsed, float64(4*perSender)/elapsed.Seconds()/1e6, logs[0].log.Len())
	for i, g := range groups {
		st := g.Stats()
		t.Logf("host %d (loss %+v): sequencer %d, requests %d resent %d, sequenced %d, retransmissions asked %d answered %d, repair p50 %v p99 %v, kernel drops %d, held %d",
			i, lossFor[i], totalStats(st).Sequencer, totalStats(st).RequestsSent, totalStats(st).RequestsResent, totalStats(st).Sequenced,
			totalStats(st).RetransmitsAsked, totalStats(st).RetransmitsAnswered, st.RepairP50, st.RepairP99, st.Link.KernelDrops, st.HeldData)
	}
}

// crashLink is a link that can be crashed: from then on it sends nothing
// and delivers nothing (the ring under it stays open, since the Group's
// loop may hold views into it).
type crashLink struct {
	link.Link
	crashed atomic.Bool
}

func (l *crashLink) Send(frames [][]byte) (int, error) {
	if l.crashed.Load() {
		return len(frames), nil
	}
	return l.Link.Send(frames)
}

func (l *crashLink) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n, err := l.Link.Recv(deadline, frames)
	if l.crashed.Load() {
		return 0, err
	}
	return n, err
}

// The sequencer (host 0, member 0) crashes mid-stream: its link goes
// silent both ways. The three others elect member 1, agree on where the old
// sequencer's order ends, and finish; their logs are identical byte for
// byte and hold every byte each of them sent.
func TestNetnsTotalSequencerCrash(t *testing.T) {
	topo, links := lossyRings(t)
	crash := &crashLink{Link: links[0]}
	links[0] = crash
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	groups := joinAll(t, ctx, topo, links, Config{Group: 18, Order: Total,
		HeartbeatInterval: 50 * time.Millisecond, FailureTimeout: time.Second}, true)
	const perSender = 1 << 20
	survivors := []frame.MemberID{1, 2, 3}
	sent := map[frame.MemberID][]byte{}
	logs := make([]*totalLog, len(groups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	crashed := make(chan struct{})
	ctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	for i, g := range groups {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if i == 0 {
				sendTotal(ctx0, g, perSender) // it crashes: its stream is cut short
				return
			}
			h, err := sendTotal(ctx, g, perSender)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			sent[g.Self()] = h
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			if i == 0 {
				// Crash once a third of the others' streams arrived.
				var buf []byte
				n := 0
				for n < perSender {
					_, data, err := g.RecvAppend(ctx, buf[:0])
					if err != nil {
						break
					}
					buf, n = data, n+len(data)
				}
				crash.crashed.Store(true)
				cancel0()
				close(crashed)
				return
			}
			l, err := recvTotal(ctx, g, survivors, perSender)
			if err != nil {
				t.Error(err)
				return
			}
			logs[i] = l
		}()
	}
	wg.Wait()
	if t.Failed() {
		for _, g := range groups {
			st := g.Stats()
			t.Logf("member %d: events %v; members %+v; stats %+v", g.Self(), st.Events, g.Members(), totalStats(st))
		}
		return
	}
	<-crashed
	checkTotalLogs(t, groups, logs, sent)
	for i, g := range groups[1:] {
		st := g.Stats()
		if totalStats(st).Sequencer != 1 || totalStats(st).Epoch < 2 {
			t.Errorf("member %d: sequencer %d epoch %d after the crash; want 1, >= 2", g.Self(), totalStats(st).Sequencer, totalStats(st).Epoch)
		}
		t.Logf("host %d: sequencer %d epoch %d, log %d bytes, events %v", i+1, totalStats(st).Sequencer, totalStats(st).Epoch, logs[i+1].log.Len(), st.Events)
	}
}
