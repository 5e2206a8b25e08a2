package view_test

import (
	"testing"

	"github.com/rbcast/rbcast/reliable/internal/viewsim"
)

// TestSim is the churn simulation of the membership core at the FIFO
// level (reliable/internal/viewsim: founders, joiners, crashes, restarts,
// leaves, one-way cuts, loss, duplication, reordering, datagrams; view
// agreement, virtual synchrony, FIFO and exactly once across views).
// RBCAST_SEEDS sets the number of seeds (1000; 100 with -short).
func TestSim(t *testing.T) { viewsim.Seeds(t, viewsim.FIFO, "reliable/view", "TestSim") }
