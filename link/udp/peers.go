package udp

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// peer is a member the link knows: where to send to it, and its MAC.
type peer struct {
	addr   netip.AddrPort // without zone: the table's key
	scope  uint32         // interface index of an IPv6 link-local address
	mac    [6]byte
	static bool // from Config.Peers: never forgotten
	sa     sockaddr
	// heard is when the link last heard of the peer (nanoseconds since
	// the table's start; 0: never): a datagram from it, or a hello that
	// names it heard from more recently.
	heard atomic.Int64
}

// peerSet is one immutable version of the table: the hot paths read it
// without locking, changes replace it.
type peerSet struct {
	list   []*peer // everyone but this member, in the order learned
	byAddr map[netip.AddrPort]*peer
	byMAC  map[[6]byte]*peer
}

// peers is the link's member table. Static peers come from Config.Peers;
// others are learned from datagrams (multicast mode, and fan-out with
// Learn) and from hellos (fan-out with Learn), and forgotten once nobody
// has heard from them for the timeout.
type peers struct {
	self    netip.AddrPort
	selfMAC [6]byte
	open    bool // admits senders it does not know (multicast, or Learn)
	timeout time.Duration
	start   time.Time

	set atomic.Pointer[peerSet]
	mu  sync.Mutex // held while replacing set

	collisions atomic.Uint64 // learned addresses whose MAC another has
	learned    atomic.Uint64
}

func newPeers(self netip.AddrPort, selfMAC [6]byte, static []netip.AddrPort, scope uint32, open bool, timeout time.Duration) *peers {
	t := &peers{self: self, selfMAC: selfMAC, open: open, timeout: timeout, start: time.Now()}
	s := &peerSet{byAddr: map[netip.AddrPort]*peer{}, byMAC: map[[6]byte]*peer{}}
	for _, a := range static {
		if a == self || s.byAddr[a] != nil {
			continue
		}
		p := newPeer(a, scope)
		p.static = true
		if s.byMAC[p.mac] != nil {
			t.collisions.Add(1)
			continue
		}
		s.add(p)
	}
	t.set.Store(s)
	return t
}

func newPeer(a netip.AddrPort, scope uint32) *peer {
	a = netip.AddrPortFrom(a.Addr().WithZone(""), a.Port())
	if !a.Addr().Is6() || !a.Addr().IsLinkLocalUnicast() {
		scope = 0
	}
	p := &peer{addr: a, scope: scope, mac: [6]byte(MACOf(a))}
	p.sa = makeSockaddr(a, scope)
	return p
}

func (s *peerSet) add(p *peer) {
	s.list = append(s.list, p)
	s.byAddr[p.addr] = p
	s.byMAC[p.mac] = p
}

// clone copies s for a change.
func (s *peerSet) clone() *peerSet {
	c := &peerSet{list: append([]*peer(nil), s.list...), byAddr: make(map[netip.AddrPort]*peer, len(s.byAddr)+1), byMAC: make(map[[6]byte]*peer, len(s.byMAC)+1)}
	for k, v := range s.byAddr {
		c.byAddr[k] = v
	}
	for k, v := range s.byMAC {
		c.byMAC[k] = v
	}
	return c
}

// clockBase puts the table's clock far from 0 (never heard), farther than
// the oldest age a hello can carry (2³² ms, 50 days), so that times before
// the table's start stay positive.
const clockBase = int64(1 << 53)

// now is the table's clock: nanoseconds since its start, plus clockBase.
func (t *peers) now() int64 { return int64(time.Since(t.start)) + clockBase }

// lookup finds the sender of a datagram, learning it if the table is
// open. nil means the datagram is to be dropped: an unknown sender of a
// closed table, or one whose MAC another member has.
func (t *peers) lookup(a netip.AddrPort, scope uint32) *peer {
	if p := t.set.Load().byAddr[a]; p != nil {
		return p
	}
	if !t.open {
		return nil
	}
	p, _ := t.learn(a, scope, 0)
	return p
}

// learn adds a, heard ago (0: now); it reports whether a was new.
func (t *peers) learn(a netip.AddrPort, scope uint32, ago time.Duration) (*peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.set.Load()
	if p := s.byAddr[a]; p != nil {
		return p, false
	}
	if a == t.self || len(s.list) >= MaxPeers {
		return nil, false
	}
	p := newPeer(a, scope)
	if q := s.byMAC[p.mac]; q != nil || p.mac == t.selfMAC {
		t.collisions.Add(1)
		return nil, false
	}
	p.heard.Store(max(t.now()-int64(ago), 1))
	c := s.clone()
	c.add(p)
	t.set.Store(c)
	t.learned.Add(1)
	return p, true
}

// heard notes a datagram from p.
func (t *peers) heard(p *peer) {
	p.heard.Store(t.now())
}

// byMAC finds the member with Ethernet address mac.
func (t *peers) byMAC(mac [6]byte) *peer { return t.set.Load().byMAC[mac] }

// list is every member but this one.
func (t *peers) list() []*peer { return t.set.Load().list }

// gossip merges a hello's entries: a member heard from more recently
// than we knew is noted so, and one we did not know is learned if it was
// heard from within the timeout (a member dead for longer is not brought
// back by a hello of someone who has not forgotten it yet). It returns
// the members learned.
func (t *peers) gossip(entries []helloEntry, scope uint32) (learned int) {
	now := t.now()
	for _, e := range entries {
		if e.Addr == t.self || e.Age >= t.timeout {
			continue
		}
		at := now - int64(e.Age)
		if p := t.set.Load().byAddr[e.Addr]; p != nil {
			for {
				h := p.heard.Load()
				if h >= at || p.heard.CompareAndSwap(h, at) {
					break
				}
			}
			continue
		}
		if _, ok := t.learn(e.Addr, scope, e.Age); ok {
			learned++
		}
	}
	return learned
}

// expire forgets the learned members nobody has heard from for the
// timeout; it returns how many.
func (t *peers) expire() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.set.Load()
	now := t.now()
	var gone int
	for _, p := range s.list {
		if !p.static && now-p.heard.Load() > int64(t.timeout) {
			gone++
		}
	}
	if gone == 0 {
		return 0
	}
	c := &peerSet{byAddr: map[netip.AddrPort]*peer{}, byMAC: map[[6]byte]*peer{}}
	for _, p := range s.list {
		if p.static || now-p.heard.Load() <= int64(t.timeout) {
			c.add(p)
		}
	}
	t.set.Store(c)
	return gone
}

// entries lists for a hello every member heard from, and how long ago.
func (t *peers) entries() []helloEntry {
	now := t.now()
	var out []helloEntry
	for _, p := range t.list() {
		if h := p.heard.Load(); h != 0 {
			out = append(out, helloEntry{Addr: p.addr, Age: time.Duration(now - h)})
		}
	}
	return out
}
