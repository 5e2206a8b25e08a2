package kv

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/rbcast/rbcast/dsm"
)

// ServeThesis joins BDSM with dsm.Config.Timed (docs/dsm.md, "WC over one
// group"): thesis mode's correctness rests on bounds on how late a
// replica's writes arrive, so no WC hold may stop a replica's window.
// The configuration it passes to join is checked, with what it keeps of
// the caller's.
func TestServeThesisTimed(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var got dsm.Config
	refused := errors.New("no group here")
	err = ServeThesis(context.Background(), func(_ context.Context, c dsm.Config) (*dsm.Node, error) {
		got = c
		return nil, refused
	}, conn, ThesisServerConfig{DSM: dsm.Config{WCCopies: -1, OutboxLimit: 7}, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "kv: thesis mode: joining the group") {
		t.Fatalf("ServeThesis: %v, want the join's error", err)
	}
	if !got.Timed || !got.Unbuffered || got.Trace == nil {
		t.Errorf("ServeThesis joined with Timed %v, Unbuffered %v, Trace set %v: want all three", got.Timed, got.Unbuffered, got.Trace != nil)
	}
	if got.WCCopies != -1 || got.OutboxLimit != 7 {
		t.Errorf("ServeThesis joined with WCCopies %d, OutboxLimit %d: want the caller's -1 and 7", got.WCCopies, got.OutboxLimit)
	}
}
