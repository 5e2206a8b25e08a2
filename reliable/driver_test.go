package reliable

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/testnet"
)

// simGroup is members driven by Drivers on a simulated segment in virtual
// time: the runtime's engine, deterministic.
type simGroup struct {
	net     *testnet.Network
	drivers []*Driver
	got     []map[frame.MemberID][][]byte
	events  [][]Event
}

func newSimGroup(t testing.TB, seed uint64, n int, imp testnet.Impairment, mode Mode) *simGroup {
	t.Helper()
	net, err := testnet.New(seed, testnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var eps []*testnet.Endpoint
	var members []frame.MemberInfo
	for i := range n {
		ep, err := net.Attach(testnet.EndpointConfig{In: imp})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
	}
	sg := &simGroup{net: net, got: make([]map[frame.MemberID][][]byte, n), events: make([][]Event, n)}
	for i, ep := range eps {
		sg.got[i] = map[frame.MemberID][][]byte{}
		d, err := NewDriver(ep, Config{Group: 1, Members: members, Self: frame.MemberID(i + 1), Mode: mode, Logger: quiet,
			Deliver: func(from frame.MemberID, data []byte) {
				sg.got[i][from] = append(sg.got[i][from], bytes.Clone(data))
			},
			OnEvent: func(ev Event) { sg.events[i] = append(sg.events[i], ev) },
		}, net.Now())
		if err != nil {
			t.Fatal(err)
		}
		sg.drivers = append(sg.drivers, d)
		ep.Bind(d)
	}
	return sg
}

// sendAll proposes k messages from every member, retrying on a full
// window as virtual time passes.
func (sg *simGroup) sendAll(t testing.TB, k int) {
	next := make([]int, len(sg.drivers))
	var b []byte
	for round := 0; ; round++ {
		busy := false
		for i, d := range sg.drivers {
			for next[i] < k {
				b = message(b[:0], frame.MemberID(i+1), next[i], d.MaxMessage())
				if err := d.Propose(sg.net.Now(), b); err != nil {
					if err != pbp.ErrWindowFull {
						t.Fatal(err)
					}
					break
				}
				next[i]++
			}
			busy = busy || next[i] < k
		}
		if !busy {
			return
		}
		if round > 1_000_000 {
			t.Fatal("senders stuck")
		}
		sg.net.RunFor(100 * time.Microsecond)
	}
}

func TestDriverOnSimulator(t *testing.T) {
	for _, mode := range []Mode{PBP2, PBP1} {
		for seed := range uint64(5) {
			sg := newSimGroup(t, seed, 4, testnet.Impairment{Loss: 0.05, Duplicate: 0.02, Reorder: 0.02, ReorderDelay: 300 * time.Microsecond}, mode)
			const k = 300
			sg.sendAll(t, k)
			sg.net.RunFor(time.Second)
			for i := range sg.drivers {
				for j := range sg.drivers {
					if i == j {
						continue
					}
					from := frame.MemberID(j + 1)
					msgs := sg.got[i][from]
					if len(msgs) != k {
						t.Fatalf("%v seed %d: member %d got %d messages from %d, want %d", mode, seed, i+1, len(msgs), from, k)
					}
					for idx, m := range msgs {
						if !bytes.Equal(m, message(nil, from, idx, sg.drivers[j].MaxMessage())) {
							t.Fatalf("%v seed %d: member %d: message %d from %d differs", mode, seed, i+1, idx, from)
						}
					}
				}
			}
		}
	}
}

// Same seed, same run: the runtime's glue adds no nondeterminism.
func TestDriverDeterministic(t *testing.T) {
	run := func() string {
		sg := newSimGroup(t, 42, 3, testnet.Impairment{Loss: 0.1}, PBP2)
		sg.sendAll(t, 200)
		sg.net.RunFor(time.Second)
		var s string
		for _, d := range sg.drivers {
			st := d.Stats()
			s += fmt.Sprintf("%+v %+v\n", st.Protocol, st.Members)
		}
		return s
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs with one seed differ:\n%s\n%s", a, b)
	}
}

// Steady state through the engine: proposing, sending, receiving,
// decoding, delivering and acknowledging allocate nothing per message.
func TestDriverZeroAllocs(t *testing.T) {
	allocs, delivered := driverAllocs(t, FIFO, 1)
	if allocs != 0 {
		t.Errorf("%.2f allocations per message through the runtime, want 0", allocs)
	}
	if delivered < 1000 {
		t.Errorf("only %d of 1001 messages delivered during the measurement", delivered)
	}
}

// driverAllocs runs two drivers on the simulator with the given Order;
// member from proposes a 100-byte message every 20 µs of virtual time.
// After 2000 messages of warm-up it returns the allocations per message
// (testing.AllocsPerRun over 1000) and the deliveries, at both members,
// during that measurement.
func driverAllocs(t *testing.T, order Order, from frame.MemberID) (allocs float64, delivered int) {
	t.Helper()
	net, _ := testnet.New(1, testnet.Config{})
	a, _ := net.Attach(testnet.EndpointConfig{})
	b, _ := net.Attach(testnet.EndpointConfig{})
	members := []frame.MemberInfo{{ID: 1, MAC: [6]byte(a.HardwareAddr())}, {ID: 2, MAC: [6]byte(b.HardwareAddr())}}
	count := func(frame.MemberID, []byte) { delivered++ }
	da, err := NewDriver(a, Config{Group: 1, Members: members, Self: 1, Order: order, Logger: quiet, Deliver: count}, net.Now())
	if err != nil {
		t.Fatal(err)
	}
	db, err := NewDriver(b, Config{Group: 1, Members: members, Self: 2, Order: order, Logger: quiet, Deliver: count}, net.Now())
	if err != nil {
		t.Fatal(err)
	}
	a.Bind(da)
	b.Bind(db)
	d := map[frame.MemberID]*Driver{1: da, 2: db}[from]
	msg := make([]byte, 100)
	step := func() {
		if err := d.Propose(net.Now(), msg); err != nil {
			t.Fatal(err)
		}
		net.RunFor(20 * time.Microsecond)
	}
	for range 2000 {
		step()
	}
	before := delivered
	allocs = testing.AllocsPerRun(1000, step)
	return allocs, delivered - before
}

// Recv's queue: pushing and RecvAppend into a reused buffer allocate
// nothing once the slots have their buffers.
func TestQueueZeroAllocs(t *testing.T) {
	q := newMsgQueue(64)
	msg := make([]byte, 1000)
	buf := make([]byte, 0, 2000)
	cycle := func() {
		q.mu.Lock()
		for range 10 {
			q.pushLocked(3, msg)
		}
		q.mu.Unlock()
		for range 10 {
			_, data, ok, _ := q.pop(buf[:0])
			if !ok || len(data) != len(msg) {
				t.Fatal("queue lost a message")
			}
		}
	}
	for range 10 { // every slot gets its buffer
		cycle()
	}
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Errorf("%.2f allocations per 10 messages through the receive queue, want 0", allocs)
	}
}

// A queue that grew past its limit (a batch delivered more than the room
// left) allocates nothing once its messages flow again, whatever slot of
// the grown ring they land in: a popped message's buffer serves the next
// push. (Each slot kept its own buffer: the grown ring's slots that no
// message had had allocated one each as the ring came round to them, 64
// here, 4096 at DefaultRecvQueue: rbcastd's TestSteadyStateAllocs counted
// 4098 in a stream after a subscriber's lag.)
func TestQueueGrownZeroAllocs(t *testing.T) {
	q := newMsgQueue(64)
	msg := make([]byte, 1000)
	buf := make([]byte, 0, 2000)
	push := func(n int) {
		q.mu.Lock()
		for range n {
			q.pushLocked(3, msg)
		}
		q.mu.Unlock()
	}
	pop := func(n int) {
		for range n {
			if _, data, ok, _ := q.pop(buf[:0]); !ok || !bytes.Equal(data, msg) {
				t.Fatal("queue lost a message")
			}
		}
	}
	push(70) // past the limit: the ring grows to 128 slots
	if len(q.slots) != 128 {
		t.Fatalf("%d slots after 70 messages in a queue of 64, want 128", len(q.slots))
	}
	pop(70)
	// Slots 70 to 98 (AllocsPerRun's warm-up), then 99 to 127: slots no
	// message had before.
	if allocs := testing.AllocsPerRun(1, func() { push(29); pop(29) }); allocs != 0 {
		t.Errorf("%v allocations for 29 messages through the grown receive queue's last slots, want 0", allocs)
	}
}

// Messages queued as views: Recv copies them straight from the view; the
// ones left when the loop settles are copied into the queue first, so a
// view's source may be reused after settle. Neither allocates.
func TestQueueViews(t *testing.T) {
	q := newMsgQueue(64)
	src := make([]byte, 4*viewMin)
	buf := make([]byte, 0, 2*viewMin)
	fill := func(b byte) {
		for i := range src {
			src[i] = b
		}
	}
	cycle := func() {
		fill(1)
		q.mu.Lock()
		for i := range 4 {
			q.pushViewLocked(frame.MemberID(i), src[i*viewMin:(i+1)*viewMin])
		}
		q.mu.Unlock()
		for i := range 2 { // taken as views
			from, data, ok, _ := q.pop(buf[:0])
			if !ok || from != frame.MemberID(i) || len(data) != viewMin || data[0] != 1 {
				t.Fatalf("pop %d of the views = %d, %d bytes (%v), %v", i, from, len(data), data[:1], ok)
			}
		}
		q.settle() // a reader popped: it waits for the rest, then copies them
		fill(2)    // the views' source is reused
		for i := 2; i < 4; i++ {
			from, data, ok, _ := q.pop(buf[:0])
			if !ok || from != frame.MemberID(i) || len(data) != viewMin || data[0] != 1 || data[viewMin-1] != 1 {
				t.Fatalf("pop %d after settle = %d, %d bytes, %v: want the bytes of before settle", i, from, len(data), ok)
			}
		}
		if q.views != 0 || q.n != 0 {
			t.Fatalf("%d views of %d messages left", q.views, q.n)
		}
		q.settle()
	}
	for range 10 {
		cycle()
	}
	if allocs := testing.AllocsPerRun(20, cycle); allocs != 0 {
		t.Errorf("%.2f allocations per cycle of 4 views, want 0", allocs)
	}
}

// The same through the engine with Order Total: proposing, requesting,
// numbering, broadcasting, delivering (its own too) allocate nothing per
// message.
func TestDriverTotalZeroAllocs(t *testing.T) {
	allocs, delivered := driverAllocs(t, Total, 2) // member 2: not the sequencer
	if allocs != 0 {
		t.Errorf("%.2f allocations per message through the runtime under Order Total, want 0", allocs)
	}
	if delivered < 2*1000-20 { // a few are still on their way
		t.Errorf("only %d deliveries (at both members) of 1001 messages during the measurement", delivered)
	}
}

// A Deliver callback may propose: here members 2 and 3 echo every message
// of member 1 from inside Deliver. Propose then ran the engine's output
// again while the outer output was still handing over the deliveries of
// the same Ready, and the inner Advance cleared them under it. Every
// message and every echo must arrive whole, once, in order.
func TestDriverProposeFromDeliver(t *testing.T) {
	for _, order := range []Order{FIFO, Total} {
		net, err := testnet.New(7, testnet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		const n, k = 3, 40
		var eps []*testnet.Endpoint
		var members []frame.MemberInfo
		for i := range n {
			ep, err := net.Attach(testnet.EndpointConfig{In: testnet.Impairment{Loss: 0.02}})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, ep)
			members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		}
		drivers := make([]*Driver, n)
		got := make([][][]byte, n)
		depth := make([]int, n)
		for i, ep := range eps {
			d, err := NewDriver(ep, Config{Group: 1, Members: members, Self: frame.MemberID(i + 1), Order: order, Logger: quiet,
				Deliver: func(from frame.MemberID, data []byte) {
					if depth[i] > 0 {
						// The old code: Propose handed the same deliveries
						// over again from inside this call, without end.
						t.Fatalf("%v: member %d: Deliver called from inside Deliver", order, i+1)
					}
					depth[i]++
					defer func() { depth[i]-- }()
					got[i] = append(got[i], append([]byte(fmt.Sprintf("%d:", from)), data...))
					if i > 0 && from == 1 {
						echo := append([]byte(fmt.Sprintf("echo%d ", i+1)), data...)
						if err := drivers[i].Propose(net.Now(), echo); err != nil {
							t.Errorf("%v: member %d: Propose from Deliver: %v", order, i+1, err)
						}
					}
				},
			}, net.Now())
			if err != nil {
				t.Fatal(err)
			}
			drivers[i] = d
			ep.Bind(d)
		}
		for m := range k {
			if err := drivers[0].Propose(net.Now(), []byte(fmt.Sprintf("msg %02d", m))); err != nil {
				t.Fatal(err)
			}
			net.RunFor(50 * time.Microsecond)
		}
		net.RunFor(time.Second)
		for i := range n {
			var want []string
			for m := range k {
				if order == Total || i > 0 {
					want = append(want, fmt.Sprintf("1:msg %02d", m))
				}
			}
			var gotMsgs, echoes []string
			for _, b := range got[i] {
				if strings.Contains(string(b), "echo") {
					echoes = append(echoes, string(b))
				} else {
					gotMsgs = append(gotMsgs, string(b))
				}
			}
			if !slices.Equal(gotMsgs, want) {
				t.Errorf("%v: member %d got %q, want %q", order, i+1, gotMsgs, want)
			}
			// Each member gets every other echoer's k echoes (under
			// Total its own too), in order per echoer.
			for e := 2; e <= n; e++ {
				if order == FIFO && e == i+1 {
					continue
				}
				var mine []string
				for _, s := range echoes {
					if strings.HasPrefix(s, fmt.Sprintf("%d:echo%d ", e, e)) {
						mine = append(mine, s)
					}
				}
				if len(mine) != k {
					t.Errorf("%v: member %d got %d echoes from member %d, want %d", order, i+1, len(mine), e, k)
					continue
				}
				for m, s := range mine {
					if w := fmt.Sprintf("%d:echo%d msg %02d", e, e, m); s != w {
						t.Errorf("%v: member %d: echo %d from member %d is %q, want %q", order, i+1, m, e, s, w)
						break
					}
				}
			}
		}
	}
}

// A Deliver callback may leave: member 2 calls the Driver's Leave while
// the first message of member 1 is handed over. The core's Leave then
// put its frames and SelfLeft into the Ready being carried out, whose
// Advance dropped them: member 2 never reported SelfLeft. It must
// report it once, and member 1 must see member 2 leave.
func TestDriverLeaveFromDeliver(t *testing.T) {
	for _, order := range []Order{FIFO, Total} {
		net, err := testnet.New(7, testnet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var eps []*testnet.Endpoint
		var members []frame.MemberInfo
		for i := range 2 {
			ep, err := net.Attach(testnet.EndpointConfig{})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, ep)
			members = append(members, frame.MemberInfo{ID: frame.MemberID(i + 1), MAC: [6]byte(ep.HardwareAddr()), Incarnation: 1})
		}
		drivers := make([]*Driver, 2)
		var events [2][]EventKind
		for i, ep := range eps {
			d, err := NewDriver(ep, Config{Group: 1, Members: members, Self: frame.MemberID(i + 1), Order: order, Logger: quiet,
				OnEvent: func(ev Event) { events[i] = append(events[i], ev.Kind) },
				Deliver: func(from frame.MemberID, data []byte) {
					if i == 1 && from == 1 {
						if err := drivers[1].Leave(net.Now()); err != nil {
							t.Errorf("%v: Leave from Deliver: %v", order, err)
						}
					}
				},
			}, net.Now())
			if err != nil {
				t.Fatal(err)
			}
			drivers[i] = d
			ep.Bind(d)
		}
		if err := drivers[0].Propose(net.Now(), []byte("bye")); err != nil {
			t.Fatal(err)
		}
		net.RunFor(time.Second)
		selfLeft := 0
		for _, k := range events[1] {
			if k == SelfLeft {
				selfLeft++
			}
		}
		if !drivers[1].Left() || selfLeft != 1 {
			t.Errorf("%v: member 2 left %v, events %v; want SelfLeft once", order, drivers[1].Left(), events[1])
		}
		if slices.Index(events[0], MemberLeft) < 0 {
			t.Errorf("%v: member 1's events %v, want MemberLeft", order, events[0])
		}
	}
}
