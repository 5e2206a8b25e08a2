package testnet

import (
	"container/heap"
	"time"
)

// Node is anything the simulator can drive: a protocol core with its
// runtime's glue, or a test's traffic generator. Step is called with the
// current virtual time whenever the node has something to do; it reads its
// endpoint with Recv (which never blocks here), sends with Send, and returns
// when it next wants to be stepped without input (zero: only on input).
//
// This is the shape of the live runtime's event loop (DESIGN.md, decision 2)
// with the waiting taken out: "wait on the link until the next deadline"
// becomes "the simulator calls Step on arrival or at the deadline".
type Node interface {
	Step(now time.Time) (next time.Time)
}

// NodeFunc adapts a function to Node.
type NodeFunc func(now time.Time) (next time.Time)

// Step calls f(now).
func (f NodeFunc) Step(now time.Time) time.Time { return f(now) }

// Bind makes the network drive node through e: Step is called once soon
// after binding (at the current instant, after events already due then),
// after frames land in e's receive queue (once per burst of arrivals at one
// instant), and at the deadline the last Step returned. A deadline not after
// now steps the node again at the same instant, so a node must return a
// later time or zero once it is idle. A crashed endpoint's node is not
// stepped; Restart steps it. Bind(nil) unbinds; binding again replaces the
// node and forgets its deadline. Step is not told why it runs: a node
// compares now with its own timers rather than acting on every call.
func (e *Endpoint) Bind(node Node) {
	e.cancelSteps()
	if e.closed {
		return
	}
	e.node = node
	e.binding++
	e.wake()
}

// wake schedules a step of the bound node at the current instant, unless one
// is already pending.
func (e *Endpoint) wake() {
	if e.node == nil || e.crashed || e.closed || e.wakeEv != nil {
		return
	}
	ev := e.n.newEvent(evWake, e.n.now)
	ev.to = e
	e.wakeEv = ev
	e.n.schedule(ev)
}

func (e *Endpoint) wakeEvent() {
	e.wakeEv = nil
	e.step()
}

func (e *Endpoint) deadlineEvent() {
	e.deadlineEv = nil
	e.step()
}

func (e *Endpoint) step() {
	if e.node == nil || e.crashed || e.closed {
		return
	}
	n := e.n
	binding := e.binding
	next := e.node.Step(n.Now())
	if e.binding != binding || e.node == nil || e.crashed || e.closed {
		return // the node crashed, closed, unbound or replaced itself
	}
	if next.IsZero() {
		e.cancelDeadline()
		return
	}
	at := max(int64(next.Sub(n.start)), n.now)
	if e.deadlineEv != nil {
		if e.deadlineEv.at == at {
			return
		}
		e.cancelDeadline()
	}
	ev := n.newEvent(evDeadline, at)
	ev.to = e
	e.deadlineEv = ev
	n.schedule(ev)
}

func (e *Endpoint) cancelDeadline() {
	if ev := e.deadlineEv; ev != nil {
		heap.Remove(&e.n.events, ev.index)
		e.n.recycle(ev)
		e.deadlineEv = nil
	}
}

// cancelSteps forgets pending steps of the bound node.
func (e *Endpoint) cancelSteps() {
	e.cancelDeadline()
	if ev := e.wakeEv; ev != nil {
		heap.Remove(&e.n.events, ev.index)
		e.n.recycle(ev)
		e.wakeEv = nil
	}
}

// Partition splits the segment: from now on frames cross only between
// endpoints of the same group, also frames already in flight. Endpoints not
// named in any group, including ones attached later, form one more group
// together. A new Partition replaces the previous one.
func (n *Network) Partition(groups ...[]*Endpoint) error {
	assign := make([]int, len(n.endpoints)) // 0: the group of the unnamed
	for g, members := range groups {
		for _, e := range members {
			if e == nil || e.n != n {
				return configErrorf("partition group %d holds an endpoint that is not attached to this network", g)
			}
			if assign[e.index] != 0 {
				return configErrorf("partition: endpoint %d is in group %d and group %d", e.index, assign[e.index]-1, g)
			}
			assign[e.index] = g + 1
		}
	}
	for i, e := range n.endpoints {
		e.group = assign[i]
	}
	n.partitioned = true
	return nil
}

// Deafen makes e drop every frame from src (also frames already in
// flight), or hear it again when deaf is false: a one-way cut between two
// endpoints that both still hear every other, as a broken cable pair or a
// receiver starved of CPU for one peer's traffic shows. Heal does not end
// it. Frames dropped this way count as DropPartition.
func (e *Endpoint) Deafen(src *Endpoint, deaf bool) {
	if e.deafTo == nil {
		e.deafTo = map[int]bool{}
	}
	if deaf {
		e.deafTo[src.index] = true
	} else {
		delete(e.deafTo, src.index)
	}
}

// Heal ends a partition.
func (n *Network) Heal() {
	n.partitioned = false
	for _, e := range n.endpoints {
		e.group = 0
	}
}
