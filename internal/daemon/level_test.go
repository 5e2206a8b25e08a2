package daemon

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// SendLevel at the daemon: a total order over views takes Safe for a
// connection's sends whatever its group's level (Agreed here), and its
// Sends then go through; a level the group cannot give is refused with
// code 6 naming the group's level, and the connection is closed, so that
// nothing after it goes out at another level.
func TestSendLevelAtDaemon(t *testing.T) {
	ds := startViews(t, newCuts(t, rtnet.New(t, 61), 2), func(_ int, c *Config) { c.Group.Order = reliable.Total }, nil)
	for _, x := range ds {
		awaitStatus(t, x, "in a view of 2", func(st Status) bool { return len(viewOf(st)) == 2 })
	}
	sub := subscribe(t, ds[1].socket, localapi.AllMembers)
	c, _ := dial(t, ds[0].socket, true)
	msg := []byte("delivered once both daemons hold it")
	if err := c.Write(&localapi.SendLevel{Level: localapi.OrderSafe}); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(&localapi.Send{Data: msg}); err != nil {
		t.Fatal(err)
	}
	if f, err := flushOn(c); err != nil || f.Accepted != 1 {
		t.Fatalf("Flush after SendLevel safe and a Send = %+v, %v; want 1 accepted", f, err)
	}
	if got, err := collect(sub, len(msg)); err != nil || string(got) != string(msg) {
		t.Fatalf("the subscriber at daemon 1 got %q, %v; want %q", got, err, msg)
	}

	refused := func(name string, c *localapi.Conn, level uint8, want string) {
		t.Helper()
		if err := c.Write(&localapi.SendLevel{Level: level}); err != nil {
			t.Fatal(err)
		}
		e, err := readError(c)
		if err != nil || e.Code != localapi.CodeSendFailed || !strings.Contains(e.Text, want) {
			t.Fatalf("%s: SendLevel %d answered %+v, %v; want code 6 saying %q", name, level, e, err, want)
		}
		if _, err := flushOn(c); err == nil {
			t.Fatalf("%s: the connection went on after the refusal", name)
		}
	}
	c2, _ := dial(t, ds[0].socket, true)
	refused("FIFO in a total order", c2, localapi.OrderFIFO, "-level fifo: the daemon's group runs at agreed")

	fifo := startGroup(t, rtnet.New(t, 62), 1, nil, nil)
	c3, _ := dial(t, fifo[0].socket, true)
	refused("Safe in a FIFO group", c3, localapi.OrderSafe, "-level safe: the daemon's group runs at fifo")

	reg := startGroup(t, rtnet.New(t, 63), 1, nil, func(_ int, c *Config) { c.Group.Order = reliable.Total })
	c4, _ := dial(t, reg[0].socket, true)
	refused("Safe in the registered total order", c4, localapi.OrderSafe, "only in a group run with -order total -membership views")
}
