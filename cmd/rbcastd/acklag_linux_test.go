package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/daemon"
	"github.com/rbcast/rbcast/testnet/netns"
)

// behind is how many frames member is behind sender in st's
// acknowledgement matrix, and whether st has that entry.
func behind(st daemon.Status, member, sender int) (uint32, bool) {
	for _, l := range st.AckLag {
		if l.Sender != sender {
			continue
		}
		for _, m := range l.Members {
			if m.Member == member {
				return m.Behind, true
			}
		}
	}
	return 0, false
}

// TestNetnsStatusAckLag: status shows who lags behind whom. Three
// daemons; host 2's is stopped (SIGSTOP) while host 0 sends, and status
// at host 1 shows member 2 behind member 0 by the frames it did not take
// (-json and the text table); once it runs again (SIGCONT) it catches up
// and status shows every member in step.
func TestNetnsStatusAckLag(t *testing.T) {
	over(t, []carriage{ringCarriage}, 3, "rbmat", func(t *testing.T, topo *netns.Topology, cr carriage) {
		// A failure timeout the stop stays well within: the stopped
		// member must stay a member, behind.
		c := startCluster(t, topo, cr, 19, func(i int) []string { return []string{"-failure-timeout", "10s"} })
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		sender, slow := c.ids[0], c.ids[2]
		stopped := c.daemons[2].cmd.Process
		if err := stopped.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				stopped.Signal(syscall.SIGCONT)
			}
		}()
		const messages = 40
		send := c.cli(ctx, 0, "send", "-lines")
		send.Stdin = strings.NewReader(strings.Repeat("a line of the stream\n", messages))
		var sendOut bytes.Buffer
		send.Stdout, send.Stderr = &sendOut, &sendOut
		if err := send.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		var st daemon.Status
		for {
			st = c.status(1)
			n, _ := behind(st, slow, sender)
			if n > 0 {
				if other, _ := behind(st, c.ids[1], sender); other != 0 {
					t.Logf("host 1 itself %d behind member %d while member %d is %d behind", other, sender, slow, n)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status at host 1 never showed stopped member %d behind member %d: %+v", slow, sender, st.AckLag)
			}
			time.Sleep(20 * time.Millisecond)
		}
		text, err := c.cli(ctx, 1, "status").CombinedOutput()
		if err != nil {
			t.Fatalf("status at host 1: %v\n%s", err, text)
		}
		if !bytes.Contains(text, []byte("acks: frames each member is behind each sender's last")) ||
			!bytes.Contains(text, []byte(fmt.Sprintf("from %d", sender))) || !bytes.Contains(text, []byte(fmt.Sprintf("\n  %d  ", slow))) {
			t.Errorf("status at host 1 with member %d stopped shows no lag row for it:\n%s", slow, text)
		}
		n, _ := behind(st, slow, sender)
		t.Logf("member %d stopped: status at host 1 shows it %d frames behind member %d:\n%s", slow, n, sender, text)

		if err := stopped.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed = true
		if err := send.Wait(); err != nil {
			t.Fatalf("send at host 0: %v\n%s", err, sendOut.String())
		}
		for {
			st = c.status(1)
			inStep := len(st.AckLag) == 3
			for _, l := range st.AckLag {
				for _, m := range l.Members {
					inStep = inStep && m.Behind == 0
				}
			}
			if inStep {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status at host 1 not in step after member %d resumed: %+v", slow, st.AckLag)
			}
			time.Sleep(20 * time.Millisecond)
		}
		text, err = c.cli(ctx, 1, "status").CombinedOutput()
		if err != nil || !bytes.Contains(text, []byte("(all in step)")) {
			t.Errorf("status at host 1 after the catch-up: %v\n%s", err, text)
		}
	})
}
