package dsm_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/rbcast/rbcast/dsm"
)

// In channel mode a node's groups — the global one and every segment
// channel it opened — run on one event loop (reliable.Loop): with the
// channels open, the four nodes of this process run four Loops and no
// Group loop of their own.
func TestJoinChannelsOneLoop(t *testing.T) {
	nodes := joinAll(t, 4, 3, dsm.Config{Channels: true})
	var ready, looked sync.WaitGroup
	ready.Add(len(nodes))
	looked.Add(1)
	var groupLoops, loops, channels int
	program := chanProgram(chanSegs, 4)
	runLive(t, nodes, func(n *dsm.Node) error {
		err := program(n)
		ready.Done()
		if n.Rank() == 0 {
			ready.Wait()
			buf := make([]byte, 1<<20)
			for {
				k := runtime.Stack(buf, true)
				if k < len(buf) {
					buf = buf[:k]
					break
				}
				buf = make([]byte, 2*len(buf))
			}
			stacks := string(buf)
			groupLoops = strings.Count(stacks, "reliable.(*Group).run(")
			loops = strings.Count(stacks, "reliable.(*Loop).run(")
			for _, m := range nodes {
				channels += len(m.Stats().Channels)
			}
			looked.Done()
		}
		looked.Wait()
		return err
	})
	if channels == 0 {
		t.Fatal("no channel was open")
	}
	if groupLoops != 0 || loops != len(nodes) {
		t.Fatalf("with %d channels open: %d Group loops and %d Loops running, want 0 and %d", channels, groupLoops, loops, len(nodes))
	}
}
