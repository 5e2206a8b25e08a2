package daemon

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbcast/rbcast/internal/localapi"
	"github.com/rbcast/rbcast/internal/syncbuf"
	"github.com/rbcast/rbcast/testnet/rtnet"
)

// A receiver logs each file it refuses at the offer once, with the
// file's name, its sender and the reason the sender is told, whether the
// file core refused it (here -files-max-size: before 2026-12-01 not
// logged at all) or the store (here no room: logged with a text that
// named no reason).
func TestRefusalLogged(t *testing.T) {
	r := rtnet.New(t, 12)
	in1, in2 := t.TempDir(), t.TempDir()
	logs := []*syncbuf.Buffer{{}, {}, {}}
	ds := startFileGroupWith(t, r, 3, nil, []string{"", in1, in2}, 50_000_000, func(i int, c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs[i], nil))
		switch i {
		case 1:
			c.Files.KeepFree = 1 << 62
		case 2:
			c.Files.MaxSize = 1000
		}
	})
	src := filepath.Join(t.TempDir(), "big.bin")
	writeRandom(t, src, 5000, 4)
	c, _ := dial(t, ds[0].socket, true)
	if err := c.Write(&localapi.SendFile{Name: "dir/big.bin", Path: src}); err != nil {
		t.Fatal(err)
	}
	if q, ok := readMsg(t, c).(*localapi.FileQueued); !ok {
		t.Fatalf("SendFile answered with %v, want FileQueued", q)
	}
	if v, ok := readMsg(t, c).(*localapi.FileVerdict); !ok || len(v.Missing) != 2 {
		t.Fatalf("then %+v, want a verdict naming both receivers", v)
	}
	// A receiver hands the core's report out after its turn's frames
	// are sent, so the sender's verdict may come before the log line:
	// wait for it, then for nothing more to come.
	refusals := func(i int) (lines []string) {
		for _, l := range strings.Split(logs[i].String(), "\n") {
			if strings.Contains(l, "refused") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	for deadline := time.Now().Add(10 * time.Second); len(refusals(1)) == 0 || len(refusals(2)) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	for i, reason := range map[int]string{1: "no room on the receiver's disk", 2: "larger than the receiver takes"} {
		lines := refusals(i)
		want := `msg="rbcastd: a file is refused here; the sender told" file=dir/big.bin from=0 id=1 size=5000 reason="` + reason + `" err=`
		if len(lines) != 1 || !strings.Contains(lines[0], want) {
			t.Errorf("daemon %d logged %d lines of a refusal:\n%s\nwant one with %s", i, len(lines), strings.Join(lines, "\n"), want)
		}
	}
}
