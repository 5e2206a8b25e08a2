package replay

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sentAsCaptured compares what a re-run would have sent with the frames
// the capture holds as sent from its interface, byte for byte; it returns
// "" when they are equal, else what differs.
func sentAsCaptured(c *Capture, res *SimResult) string {
	var out [][]byte
	for _, r := range c.Records {
		if r.Iface == res.Iface && r.Dir == DirOut {
			out = append(out, r.Data)
		}
	}
	if len(out) != len(res.Sent) {
		return fmt.Sprintf("re-run sent %d frames, the capture has %d outbound", len(res.Sent), len(out))
	}
	for k := range out {
		if !bytes.Equal(out[k], res.Sent[k].Data) {
			return fmt.Sprintf("sent frame %d differs from the captured one", k)
		}
	}
	return ""
}
