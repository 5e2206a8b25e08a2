package udp

import (
	"time"
	"unsafe"

	"github.com/rbcast/rbcast/link"
	"golang.org/x/sys/unix"
)

// maintain is the link's one goroutine: every HelloInterval it forgets
// the learned members nobody has heard from for PeerTimeout and, with
// Learn, says hello to every member it knows (the seeds included, heard
// from or not). It ends at Close.
func (l *Link) maintain() {
	defer close(l.done)
	every := l.cfg.HelloInterval
	if !l.cfg.Learn {
		every = l.cfg.PeerTimeout / 2
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if l.cfg.Learn {
			for _, p := range l.peers.list() {
				l.sendHello(p, helloAsk)
			}
		}
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if n := l.peers.expire(); n > 0 {
			l.c.forgotten.Add(uint64(n))
		}
	}
}

// hello handles a hello from p (already admitted: Recv learned it if it
// was new). Members it names that we did not know are learned and asked
// at once, and a sender that asks and did not know us is answered, so a
// newcomer learns the group within round trips.
func (l *Link) hello(p *peer, f []byte) {
	if !l.cfg.Learn {
		return
	}
	var entries []helloEntry
	kind, err := parseHello(f, func(e helloEntry) { entries = append(entries, e) })
	if err != nil {
		return
	}
	l.c.hellosReceived.Add(1)
	knewUs := false
	for _, e := range entries {
		knewUs = knewUs || e.Addr == l.local
	}
	before := l.peers.list()
	if l.peers.gossip(entries, p.scope) > 0 {
		old := make(map[*peer]bool, len(before))
		for _, q := range before {
			old[q] = true
		}
		for _, q := range l.peers.list() {
			if !old[q] {
				l.sendHello(q, helloAsk)
			}
		}
	}
	if kind == helloAsk && !knewUs {
		l.sendHello(p, helloAnswer)
	}
}

// sendHello sends a hello of kind to p, in as many datagrams as its
// entries need. It is best effort: a full socket buffer or an unreachable
// member drops it (the next round repeats it).
func (l *Link) sendHello(p *peer, kind byte) {
	entries := l.peers.entries()
	per := (link.EthernetHeaderLen + l.mtu - link.EthernetHeaderLen - helloHeader) / entryLen(l.fam)
	l.ctlMu.Lock()
	defer l.ctlMu.Unlock()
	for first := true; first || len(entries) > 0; first = false {
		chunk := entries[:min(per, len(entries))]
		entries = entries[len(chunk):]
		l.ctlBuf = appendHello(l.ctlBuf[:0], l.mac, kind, chunk)
		var errno unix.Errno
		err := l.usock.rc.Control(func(fd uintptr) {
			_, _, errno = unix.Syscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&l.ctlBuf[0])), uintptr(len(l.ctlBuf)),
				unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(p.sa.ptr())), uintptr(p.sa.len))
		})
		if err != nil || errno != 0 {
			return
		}
		l.c.hellosSent.Add(1)
		l.c.datagramsSent.Add(1)
	}
}
