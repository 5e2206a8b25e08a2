// Package hops records when a message passes the hand-offs of the data
// path, for docs/local-api.md's latency breakdown: with RBCAST_STAMPS=DIR
// in the environment, At appends (CLOCK_MONOTONIC, stage) to a fixed
// buffer and Dump writes it to DIR/<pid>; without it At is one load of a
// bool. The monotonic clock is the machine's, shared by every process (and
// network namespace), so the files of several processes merge into one
// timeline.
package hops

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	_ "unsafe" // go:linkname
)

//go:linkname nanotime runtime.nanotime
func nanotime() int64

type rec struct {
	t     int64
	stage uint32
	arg   uint32
}

var (
	on  bool
	dir string
	buf []rec
	n   atomic.Int64
)

func init() {
	dir = os.Getenv("RBCAST_STAMPS")
	if dir != "" {
		on = true
		buf = make([]rec, 1<<20)
	}
}

// On reports whether stamps are recorded.
func On() bool { return on }

// At records that stage s happened now, with arg.
func At(s, arg uint32) {
	if !on {
		return
	}
	i := n.Add(1) - 1
	if i < int64(len(buf)) {
		buf[i] = rec{nanotime(), s, arg}
	}
}

// Dump writes the stamps to DIR/<pid>, one "ns stage arg" a line, after a
// first line naming the process.
func Dump() {
	if !on {
		return
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprint(os.Getpid())))
	if err != nil {
		fmt.Fprintf(os.Stderr, "hops: %v\n", err)
		return
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	fmt.Fprintf(w, "# %s\n", strings.Join(os.Args, " "))
	m := min(n.Load(), int64(len(buf)))
	for _, r := range buf[:m] {
		fmt.Fprintf(w, "%d %d %d\n", r.t, r.stage, r.arg)
	}
}

// The stages recorded (the arg in brackets). A one-way trip of a ping
// passes PingSend, ConnRead/ConnHandled at the sender's daemon, the
// runtime's turn and the link (stages 30-41, recorded by a patch of
// reliable and link/ring that is not kept: docs/local-api-history.md,
// "Latency"; 30 the loop's Recv returned [frames], 31 wakeLoop, 32
// frames staged [how many], 33 delivered, 34/35 a Kick began/ended [1:
// by Send itself], 36 a Send sends its frame itself, 40/41 the ring's
// spin found a frame / its poll returned), FanoutRecv/FanoutWrote at the receiver's daemon and
// SocketRead in the receiving client.
const (
	PingSend    = 1  // bench -ping writes ping [seq]
	PingBack    = 2  // bench -ping has the answer to ping [seq]
	EchoSend    = 10 // bench -echo writes an echo
	EchoSent    = 11 // bench -echo wrote it
	ConnRead    = 20 // a daemon read a client's packet [its length]
	ConnHandled = 21 // a daemon handled it (a Send: accepted by the Group)
	FanoutRecv  = 50 // the fan-out took a delivery [1: it had waited for it]
	FanoutWrote = 51 // the fan-out wrote its packet to the subscribers [messages]
	SocketRead  = 60 // a PacketReader read a packet [0: at once, 1: while polling, 2: after sleeping], or a ring's record was taken [RingPolled, RingWoken]
)

// The args of SocketRead for a record taken from a ring: found without
// sleeping (polling, or waiting already), or after a doorbell woke the
// consumer.
const (
	RingPolled = 3
	RingWoken  = 4
)
