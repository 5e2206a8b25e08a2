package testnet_test

import (
	"fmt"
	"time"

	"github.com/rbcast/rbcast/link"
	"github.com/rbcast/rbcast/testnet"
)

// A node that broadcasts one frame per millisecond and counts what it
// receives, driven by the simulator through Bind.
type pinger struct {
	e     *testnet.Endpoint
	frame []byte
	got   int
	buf   []link.Frame
	next  time.Time // when to send again
}

func (p *pinger) Step(now time.Time) time.Time {
	for {
		k, _ := p.e.Recv(time.Time{}, p.buf) // never blocks on a simulated link
		if k == 0 {
			break
		}
		p.got += k
	}
	// Step also runs on every arrival; send only when the timer is due.
	if !now.Before(p.next) {
		if _, err := p.e.Send([][]byte{p.frame}); err != nil {
			return time.Time{}
		}
		p.next = now.Add(time.Millisecond)
	}
	return p.next
}

func Example() {
	n, err := testnet.New(1, testnet.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	lossy := testnet.Impairment{Loss: 0.2}
	var nodes []*pinger
	for range 3 {
		e, err := n.Attach(testnet.EndpointConfig{In: lossy})
		if err != nil {
			fmt.Println(err)
			return
		}
		frame := make([]byte, 64)
		copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		copy(frame[6:], e.HardwareAddr())
		frame[12], frame[13] = 0x88, 0xb5
		p := &pinger{e: e, frame: frame, buf: make([]link.Frame, 8)}
		e.Bind(p)
		nodes = append(nodes, p)
	}
	n.RunFor(100 * time.Millisecond)
	for _, p := range nodes {
		fmt.Printf("node %d received %d, In: %v\n", p.e.Index(), p.got, p.e.Counters(testnet.In))
	}
	// Output:
	// node 0 received 168, In: lost=33 burst=0 overflow=0 partition=0 crashed=0 dup=0 corrupt=0 reorder=0
	// node 1 received 154, In: lost=47 burst=0 overflow=0 partition=0 crashed=0 dup=0 corrupt=0 reorder=0
	// node 2 received 163, In: lost=37 burst=0 overflow=0 partition=0 crashed=0 dup=0 corrupt=0 reorder=0
}
