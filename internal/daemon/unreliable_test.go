package daemon

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// SendUnreliable through the daemons: under views a subscriber at another
// daemon gets the message, bytes equal, and a Flush does not count it;
// so does one of a registered FIFO group from its registration server;
// a registered total-order group refuses it with code 6, naming what has
// the level, and the connection goes on.
func TestSendUnreliable(t *testing.T) {
	ds := startViews(t, newCuts(t, rtnet.New(t, 51), 2), nil, nil)
	for _, x := range ds {
		awaitStatus(t, x, "in a view of 2", func(st Status) bool { return len(viewOf(st)) == 2 })
	}
	sub := subscribe(t, ds[1].socket, localapi.AllMembers)
	c, _ := dial(t, ds[0].socket, true)
	msg := []byte("once, or not at all")
	if err := c.Write(&localapi.SendUnreliable{Data: msg}); err != nil {
		t.Fatal(err)
	}
	f, err := flushOn(c)
	if err != nil || f.Accepted != 0 {
		t.Fatalf("Flush after a SendUnreliable = %+v, %v; want 0 accepted", f, err)
	}
	got, err := collect(sub, len(msg))
	if err != nil || string(got) != string(msg) {
		t.Fatalf("the subscriber at daemon 1 got %q, %v; want %q", got, err, msg)
	}
	if st := ds[0].d.Status(); st.Unreliable != 1 || st.Accepted != 0 {
		t.Fatalf("status: %d unreliable sent, %d accepted; want 1 and 0", st.Unreliable, st.Accepted)
	}

	// A registered FIFO group has the level too, its registration
	// server (daemon 0, whose core registration wraps) included.
	fifo := startGroup(t, rtnet.New(t, 53), 2, nil, nil)
	fsub := subscribe(t, fifo[1].socket, localapi.AllMembers)
	c1, _ := dial(t, fifo[0].socket, true)
	if err := c1.Write(&localapi.SendUnreliable{Data: msg}); err != nil {
		t.Fatal(err)
	}
	if got, err := collect(fsub, len(msg)); err != nil || string(got) != string(msg) {
		t.Fatalf("registered FIFO: the subscriber at daemon 1 got %q, %v; want %q", got, err, msg)
	}

	// A registered total-order group has none (the sequencer).
	reg := startGroup(t, rtnet.New(t, 52), 1, nil, func(_ int, c *Config) { c.Group.Order = reliable.Total })
	c2, _ := dial(t, reg[0].socket, true)
	if err := c2.Write(&localapi.SendUnreliable{Data: msg}); err != nil {
		t.Fatal(err)
	}
	e, err := readError(c2)
	if err != nil || e.Code != localapi.CodeSendFailed || !strings.Contains(e.Text, "run the daemons with -membership views, or with -order fifo") {
		t.Fatalf("SendUnreliable in a registered total-order group: %+v, %v; want code 6 naming -membership views and -order fifo", e, err)
	}
	if _, err := flushOn(c2); err != nil {
		t.Fatalf("the connection did not go on after the refusal: %v", err)
	}
}
