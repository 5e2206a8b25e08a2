package netns

import (
	"strings"
	"testing"
)

func TestSetLossRejectsBadInput(t *testing.T) {
	h := &Host{Namespace: "rbnnone", topo: &Topology{Prefix: "rbnnone"}}
	for _, tc := range []struct {
		dir  Direction
		loss Loss
		want string
	}{
		{Direction(7), Loss{Percent: 1}, "bad direction Direction(7)"},
		{In, Loss{Percent: -1}, "Percent = -1"},
		{In, Loss{Percent: 101}, "Percent = 101"},
		{In, Loss{Percent: 100, BurstLen: 3}, "Percent = 100"},
		{In, Loss{Percent: 5, BurstLen: -2}, "BurstLen = -2"},
	} {
		err := h.SetLoss(tc.dir, tc.loss)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetLoss(%v, %+v) = %v, want an error containing %q", tc.dir, tc.loss, err, tc.want)
		}
	}
}
