package vtotal_test

import (
	"testing"

	"github.com/rbcast/rbcast/reliable/internal/viewsim"
)

// TestSim is the churn simulation of the Agreed and Safe levels (each
// seed draws one) over the membership core (reliable/internal/viewsim):
// members that move from a view to the next together delivered the same
// sequence in it, every live process the same in the last view, and
// under Safe what a failed process delivered, every process that
// completed the view delivered at the same place. RBCAST_SEEDS sets the
// number of seeds (1000; 100 with -short).
func TestSim(t *testing.T) { viewsim.Seeds(t, viewsim.Ordered, "reliable/vtotal", "TestSim") }
