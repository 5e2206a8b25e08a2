// Package ring is the fast rbcast link: AF_PACKET sockets whose frames move
// through rings of memory shared with the kernel (PACKET_RX_RING,
// PACKET_TX_RING; kernel Documentation/networking/packet_mmap.rst), so
// receiving a batch costs no copy and no system call, and sending a batch
// costs one copy per frame and one system call.
//
// # Receiving
//
// The receive socket is bound to the interface and the EtherType, with a
// classic BPF filter for the EtherType attached before bind; with
// Config.Groups (or SetGroups) the filter also passes only those rbcast
// groups' frames (docs/groups.md). Its ring is
// TPACKET_V2 (a status word per fixed-size frame slot) or TPACKET_V3 (a
// status word per block of packed frames), chosen by Config.Version.
//
// Recv returns frames as views into the ring: link.Frame.Data points into
// the mapping, and Frame.Time is the kernel's receive timestamp
// (tp_sec/tp_nsec). Under V2 Data's capacity is the rest of its slot,
// which keeps 16 bytes behind a frame of the full MTU (link.Frame: room
// lent with the frame; link/auth decrypts with its tag there). This is the ring-reuse rule of link.Link: a slot (V2)
// or block (V3) handed out by Recv stays ours, untouched by the kernel
// however many frames arrive meanwhile, until the start of the next Recv
// (or Close), which gives it back by storing TP_STATUS_KERNEL in its status
// word. A V3 block is given back only once all its frames were returned; if
// frames fills up halfway through a block, the rest of it comes with the
// next Recv. While we hold slots the kernel has less room: when the ring is
// full it drops (Stats.KernelDrops) and, with V3, freezes the queue
// (Stats.KernelFreezes). A caller may keep frames longer by borrowing
// them (link.Lender: Loan, Lend, Return): Recv then gives slots or blocks
// back only up to the first one on loan, since the kernel fills them in
// ring order, and Due asks back the loans older than the last quarter of
// the ring, so that holding never takes the kernel more than a quarter of
// it (Stats.Lent, LoansCalled, LoanHeld). Status words are read with atomic loads (acquire)
// and written with atomic stores (release), pairing with the kernel's
// barriers in __packet_set_status.
//
// Recv waits in Go's netpoller, but not on the receive socket: the socket is
// a bare file descriptor in an epoll instance of its own, and that instance
// (non-blocking, wrapped in an *os.File) is what the netpoller watches. The
// socket is in that instance (EPOLLIN) only while Recv sleeps, and removed
// after, so a frame that lands while Recv spins or works wakes no thread;
// when the socket itself was in the netpoller, every frame woke the
// runtime's epoll_wait thread, and the sender paid for that wake-up inside
// its sendto (docs/local-api-history.md, "Latency"). Removed, not disarmed: a
// disarmed socket still had the instance on its wait queue, and every
// frame's delivery (in the sender's sendto) took that queue's lock and ran
// epoll's callback with interrupts off. Recv checks the ring inside
// RawConn.Read, which sleeps until the instance reports the socket's EPOLLIN
// (a frame in V2, a retired block in V3). Deadlines are the instance file's
// read deadline; Wake sets one in the past, and only when Recv is about to
// sleep or sleeps (a spinning Recv sees Wake's flag); Close wakes a sleeping
// Recv, which returns net.ErrClosed. That deadline is the costly part of
// a Wake: the poller's lock and timer and the runtime readying the
// goroutine, 1.5 to 2 times a channel send that wakes a parked goroutine.
// An eventfd in the epoll instance beside the socket, written by Wake,
// was measured as the alternative and is slower still (a system call,
// and the wake-ups of two nested epoll instances); at GOMAXPROCS 1 its
// sleeper also runs only once the netpoller is next polled, where the
// deadline readies it at once (BenchmarkWake). So a caller that can wake
// a goroutine of its own instead should: reliable's SendUnreliable wakes
// the group's kicker, not its loop (docs/protocols.md).
//
// Before sleeping Recv first looks at the ring's next status word, calling
// runtime.Gosched (with GOMAXPROCS=1 also a look at the network poller,
// link/netyield, at most once per 20 µs: that look costs two system calls
// and a park, and made each look several µs) and sched_yield(2) between
// looks, for up to Config.RxSpin
// of yielding (DefaultRxSpin, 200 µs, unless set; negative: never; with
// Config.AdaptiveSpin up to that long, below), and
// sleeps only if nothing came: a stream's receiver is then not put to sleep
// and woken per batch, which in a VM whose idle vCPUs halt costs tens of µs
// each time, and a process waiting for one frame at a time is then not put
// to sleep and woken per frame (docs/benchmarks-history.md, "Polling the
// ring before sleeping"). A short sleep in place of the sched_yield, to
// give the CPU away for certain, keeps the poller away 26 µs or more in
// such a VM whatever it asks for, and was slower in every row measured
// (docs/local-api-history.md, "A poll that sleeps to give way"). A yield that keeps Recv off the CPU for more than
// a millisecond (or RxSpin, if longer) means other work holds the CPU, where
// a sleeper is woken sooner than a yielder gets its turn back: spinning then
// stops for 10 ms, doubling up to a second while that lasts. A Recv whose
// deadline was at least twice RxSpin away when it found the ring empty, and
// that ended at it with nothing read, has the next one sleep without
// spinning, so an idle link spins once per frame that arrives rather than
// per wait (an idle event loop of package reliable waits until its next
// timer), while a short wait that ends at a caller's near timer keeps the
// spin, however late the timer fired. The spin only reads the status word
// fill reads next, so frames come in ring order either way.
//
// With Config.AdaptiveSpin the spin adapts to the machine. Each wait is
// judged by what a spin of RxSpin would have done: a frame within
// it is a hit (found spinning, or after a sleep a longer spin would have
// saved), a wait that lasted longer without one a miss, and one that ended
// sooner without a frame (a Wake, a near deadline) neither. A running
// share of hits (each wait moves it 1/8 of the way) sets the next spin:
// the full 200 µs at a half or more, none at a quarter or less, in
// proportion between; from a full spin eleven misses in a row stop it,
// and from none three hits in a row start it again, six the full spin.
// So a stream's receiver and a ping-pong whose round trip is mostly
// shorter than the spin keep spinning, while a process whose frames
// mostly come later than that (more polling
// processes than cores, where a spinner's yields keep the CPU from the
// process that would send its frame: rbcastd's daemons on two vCPUs)
// sleeps at once and is woken, as with RxSpin negative, yet spins again as
// soon as its frames come sooner. Stats counts the spins that found a
// frame (SpinHits), those that ended empty (SpinMisses) and the waits that
// slept at once (SpinSkips). Linux KVM's halt polling adapts its poll on
// the same judgement; docs/local-api-history.md ("An adaptive ring spin") has the
// measurements, and why it is not the default: on a 2-vCPU guest, idle,
// it cost the library's goodput a fifth to two fifths (a sender whose
// waits mostly end by a Wake, which counts as neither, stops spinning).
//
// # Sending
//
// Send writes each frame into the next free slot of a TPACKET_V2 TX ring
// (TP_STATUS_AVAILABLE → data and tp_len → TP_STATUS_SEND_REQUEST) and then
// makes one sendto(fd, NULL, 0) for the batch. The TX ring lives on a
// second socket, bound with protocol 0 so that it receives nothing: a V3
// socket's TX ring would be V3 too, and one TX path serves both receive
// layouts. Send returns when the kernel has taken every frame. A full ring
// waits for POLLOUT; ENOBUFS (the queueing discipline or driver refused the
// frame, which the kernel puts back as SEND_REQUEST) is retried after a
// short backoff, 10 µs doubling to 1 ms; both are counted in
// Stats.SendRetries and nothing is dropped. A frame the kernel refuses
// (TP_STATUS_WRONG_FORMAT, for instance because the MTU shrank after Open)
// is reported as an error, and that slot and the ones after it are taken
// back so the link keeps working.
//
// Stage and Kick (link.Stager) are Send in two halves for a caller that
// wants to fill the ring on one goroutine while another spends the kernel's
// transmit time (reliable's Group: its kicker goroutine). Stage copies
// frames into slots and marks them SEND_REQUEST; Kick makes the sendto and
// waits until the kernel has taken everything staged. The kernel's
// tpacket_snd walks every SEND_REQUEST slot it reaches, so frames staged
// during a Kick go out in the same sendto. A Kick that finds another one
// running leaves its frames to it; each Kick looks for frames published
// meanwhile after it has finished, so none are left behind.
//
// SendNow (link.NowSender) skips that queue: it hands frames to sendmmsg(2)
// on a third socket (protocol 0, no ring), so they reach the wire while
// frames staged before them still wait for a Kick or for the kernel to walk
// to them (with TxSendmmsg there is no queue, and SendNow sends on the TX
// socket). reliable sends retransmissions with it: behind a window of
// queued new frames a repair waited as long as the kernel took to send them
// all (docs/protocols.md, "Retransmissions skip the sender's transmit
// queue").
//
// With Config.TxMode = TxSendmmsg no TX ring is mapped: Send hands the
// caller's frames to one sendmmsg(2) per 64 frames on the same protocol-0
// socket, with the same back-pressure rules (link/internal/mmsg). It is the
// faster path with V3 receivers at jumbo MTU; with V2 receivers the TX ring
// is faster. TxRing is the default (docs/benchmarks.md).
//
// # V2 or V3
//
// V3 wakes the reader once per block, when it is full or when its retire
// timer (Config.BlockTimeout, at least 1 ms: the kernel counts in
// milliseconds) fires; V2 wakes it per frame. So a lone frame waits a
// millisecond with V3 and microseconds with V2, and a busy V2 receiver pays
// a wake-up per frame, which costs it throughput once several receivers
// share the cores; V3 with TxSendmmsg is the faster bulk path. The
// package's Latency and RecvRate benchmarks and cmd/linkbench measure it
// (docs/benchmarks.md, "Link layer").
//
// Broadcast has no flow control from receivers to the sender; that is the
// protocol's job. A ring that fills up drops frames, and every one of them
// is counted in Stats.KernelDrops.
//
// The protocol above waits on single frames (acks, repairs), so
// DefaultVersion is V2. V3 costs the receiver fewer wake-ups and is the
// better choice for a bulk receiver that can tolerate a millisecond.
package ring
