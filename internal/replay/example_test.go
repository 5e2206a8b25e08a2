package replay

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

var exampleOut = flag.String("example-out", "", "write the lossy example capture of docs/debugging.md to this path, and what member 2 delivered to PATH.delivered")

// TestExampleCapture writes the capture docs/debugging.md works on: four
// PBP2 members on the simulator, 5% receive loss at each, 300 messages
// each, every endpoint captured into one pcapng on the virtual clock.
//
//	go test ./internal/replay -run TestExampleCapture -example-out /tmp/lossy.pcapng
func TestExampleCapture(t *testing.T) {
	if *exampleOut == "" {
		t.Skip("writes the docs/debugging.md example only when -example-out is given")
	}
	run := runLossy(t, *exampleOut, 3, 4, 300, 0.05)
	f, err := os.Create(*exampleOut + ".delivered")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, d := range run.got[1] {
		fmt.Fprintf(f, "from %d %q\n", d.From, d.Data)
	}
	fmt.Printf("wrote %s (members %s) and %s.delivered (%d messages member 2 delivered)\n", *exampleOut, formatMembers(run.members), *exampleOut, len(run.got[1]))
}
