package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/reliable"
	"github.com/rbcast/rbcast/testnet"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// program runs one goroutine per member over a real-time simulated
// segment with the given loss and returns each member's error.
func program(t *testing.T, n int, loss float64, cfg reliable.Config, body func(c *Comm, links []*rtnet.Link) error) []error {
	t.Helper()
	r := rtnet.New(t, 11)
	links := make([]*rtnet.Link, n)
	var members []frame.MemberInfo
	for i := range links {
		links[i] = r.Attach(t, testnet.EndpointConfig{In: testnet.Impairment{Loss: loss}})
		members = append(members, frame.MemberInfo{ID: frame.MemberID(i), MAC: [6]byte(links[i].HardwareAddr()), Incarnation: 1})
	}
	comms := make([]*Comm, n)
	for i := range comms {
		c := cfg
		c.Group, c.Members, c.Self, c.Logger = 9, members, frame.MemberID(i), quiet
		cm, err := Join(context.Background(), links[i], c)
		if err != nil {
			t.Fatal(err)
		}
		comms[i] = cm
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = body(c, links)
			if errs[i] == nil {
				errs[i] = c.Close()
			} else {
				c.Group().Leave(canceled())
			}
		}()
	}
	wg.Wait()
	return errs
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func msg(from frame.MemberID, round, to int) []byte {
	return []byte(fmt.Sprintf("round %d from %d to %d %s", round, from, to, strings.Repeat("x", (round*7+int(from))%300)))
}

// everyCollective runs rounds of every collective and of the bare calls
// on c's members, checking each result byte for byte.
func everyCollective(c *Comm, rounds int) error {
	ids := c.Members()
	n := len(ids)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	me := c.Self()
	for r := range rounds {
		root := ids[r%n]
		got, err := c.Bcast(ctx, root, msg(root, r, -1))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, msg(root, r, -1)) {
			return fmt.Errorf("round %d: Bcast from %d: got %q", r, root, got)
		}
		all, err := c.Allgather(ctx, msg(me, r, -2))
		if err != nil {
			return err
		}
		for i, q := range c.Members() {
			if !bytes.Equal(all[i], msg(q, r, -2)) {
				return fmt.Errorf("round %d: Allgather from %d: got %q", r, q, all[i])
			}
		}
		out := make([][]byte, n)
		for i, q := range ids {
			out[i] = msg(me, r, int(q))
		}
		in, err := c.Alltoall(ctx, out)
		if err != nil {
			return err
		}
		for i, q := range c.Members() {
			if !bytes.Equal(in[i], msg(q, r, int(me))) {
				return fmt.Errorf("round %d: Alltoall from %d: got %q", r, q, in[i])
			}
		}
		// A multicast to a subset: member r%n sends to the next two;
		// the rest skip.
		s := ids[r%n]
		ts := []frame.MemberID{ids[(r+1)%n], ids[(r+2)%n]}
		switch {
		case me == s:
			err = c.Multicast(ctx, ts, msg(s, r, -3))
		case me == ts[0] || me == ts[1]:
			var m []byte
			m, err = c.Request(ctx, s, ts)
			if err == nil && !bytes.Equal(m, msg(s, r, -3)) {
				err = fmt.Errorf("round %d: Request from %d: got %q", r, s, m)
			}
		default:
			err = c.Skip()
		}
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	if c.Step() != uint64(5*rounds) {
		return fmt.Errorf("took %d steps, want %d", c.Step(), 5*rounds)
	}
	return nil
}

// TestCollectives runs every collective and the bare calls on 5 members
// at 5 % loss and checks each result byte for byte.
func TestCollectives(t *testing.T) {
	const n, rounds = 5, 30
	errs := program(t, n, 0.05, reliable.Config{FailureTimeout: 5 * time.Second}, func(c *Comm, _ []*rtnet.Link) error {
		return everyCollective(c, rounds)
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
}

// TestMismatchFailsLoudly: member 1 forgets a Skip, so its request of
// step 2 meets the multicast of step 1. Both members stop with errors
// naming the steps, instead of hanging or delivering the wrong message.
func TestMismatchFailsLoudly(t *testing.T) {
	errs := program(t, 2, 0, reliable.Config{FailureTimeout: 2 * time.Second}, func(c *Comm, _ []*rtnet.Link) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c.Self() == 0 {
			if err := c.Skip(); err != nil {
				return err
			}
			if err := c.Multicast(ctx, []frame.MemberID{1}, []byte("step 2")); err != nil {
				return err
			}
			_, err := c.Request(ctx, 1, []frame.MemberID{0})
			return err
		}
		_, err := c.Request(ctx, 0, []frame.MemberID{1})
		return err
	})
	want := "A1 violated: the request at step 1 from member 0 to [1] matched its message 1 of step 2 to [1]"
	if errs[1] == nil || !strings.Contains(errs[1].Error(), want) || !errors.Is(errs[1], reliable.ErrRemoved) {
		t.Errorf("member 1: %v, want ErrRemoved saying %q", errs[1], want)
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "member 1 stopped the program") || !strings.Contains(errs[0].Error(), want) {
		t.Errorf("member 0: %v, want the abort of member 1 saying %q", errs[0], want)
	}
}

// TestRequestForNothingFailsLoudly: member 1 requests from member 0 at
// step 1, but member 0's step 1 multicasts to member 2 alone, and member
// 0 sends member 1 nothing more. Member 0 answers member 1's NACKs, so
// it never looks failed: it sees that the request is for a message it
// will never send, and stops the program.
func TestRequestForNothingFailsLoudly(t *testing.T) {
	errs := program(t, 3, 0, reliable.Config{FailureTimeout: 5 * time.Second}, func(c *Comm, _ []*rtnet.Link) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		switch c.Self() {
		case 0:
			if err := c.Multicast(ctx, []frame.MemberID{2}, []byte("to 2")); err != nil {
				return err
			}
			if _, err := c.Request(ctx, 2, []frame.MemberID{0}); err != nil {
				return err
			}
			_, err := c.Request(ctx, 1, []frame.MemberID{0})
			return err
		case 1:
			_, err := c.Request(ctx, 0, []frame.MemberID{1, 2})
			return err
		}
		if _, err := c.Request(ctx, 0, []frame.MemberID{2}); err != nil {
			return err
		}
		return c.Multicast(ctx, []frame.MemberID{0}, []byte("to 0"))
	})
	want := "A1 violated: member 1 requests from member 0 at step 1 on the broadcast stream, but this member's program is at step"
	for i, err := range errs[:2] {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("member %d: %v, want an error saying %q", i, err, want)
		}
	}
}

// TestFailureStopsTheProgram: a member crashes; the others' calls end
// with an error naming it within the failure timeout, not a hang.
func TestFailureStopsTheProgram(t *testing.T) {
	start := time.Now()
	errs := program(t, 3, 0, reliable.Config{FailureTimeout: 500 * time.Millisecond}, func(c *Comm, links []*rtnet.Link) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Self() == 2 {
			links[2].Crash()
			return errors.New("crashed")
		}
		_, err := c.Allgather(ctx, []byte("after the crash"))
		return err
	})
	for i := range 2 {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), "member 2 silent for") || !strings.Contains(errs[i].Error(), "one failure stops the program") {
			t.Errorf("member %d: %v, want the failure of member 2", i, errs[i])
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to stop", d)
	}
}

func TestBadCalls(t *testing.T) {
	errs := program(t, 2, 0, reliable.Config{}, func(c *Comm, _ []*rtnet.Link) error {
		ctx := context.Background()
		for _, tc := range []struct {
			err  error
			want string
		}{
			{c.Multicast(ctx, []frame.MemberID{c.Self()}, nil), "step 1: member " + fmt.Sprint(c.Self()) + " multicasts to itself"},
			{c.Multicast(ctx, []frame.MemberID{7}, nil), "step 2: target 7 is not a member (members [0 1])"},
			{c.Multicast(ctx, nil, nil), "step 3: empty target set"},
			{c.Multicast(ctx, []frame.MemberID{1 - c.Self()}, make([]byte, c.MaxMessage()+1)), fmt.Sprintf("step 4: message of %d bytes exceeds the %d bytes", c.MaxMessage()+1, c.MaxMessage())},
			{func() error { _, err := c.Request(ctx, c.Self(), []frame.MemberID{c.Self()}); return err }(), "step 5: member"},
			{func() error { _, err := c.Alltoall(ctx, nil); return err }(), "step 6: Alltoall of 0 messages for 2 members"},
		} {
			if !errors.Is(tc.err, ErrProgram) || !strings.Contains(tc.err.Error(), tc.want) {
				return fmt.Errorf("got %v, want ErrProgram saying %q", tc.err, tc.want)
			}
		}
		return c.Barrier(ctx)
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
}
