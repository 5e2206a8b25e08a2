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

// TestSimSplitBrain is seed 12295 of TestSim, beyond the default count:
// during a deaf period two coordinators proposed successors of one view
// (4 and 5, base 3), two members flushed to both and each commit went
// through, so two components each counted as present a member that had
// installed the other's view, and both went on under Safe (view 6
// twice). A member's Flush now binds it to the proposal it answered
// until that coordinator gives way or is suspected (reliable/view,
// onPrepare).
func TestSimSplitBrain(t *testing.T) { viewsim.Seed(t, viewsim.Ordered, 12295) }
