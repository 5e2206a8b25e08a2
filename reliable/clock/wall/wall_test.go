package wall

import (
	"testing"
	"time"

	"github.com/rbcast/rbcast/reliable/clock"
)

func TestClock(t *testing.T) {
	epoch := time.Now()
	c := Clock{Epoch: epoch}
	if got := c.Core(epoch); got != 1 {
		t.Errorf("Core(epoch) = %d, want 1 (0 is 'no deadline')", got)
	}
	later := epoch.Add(1500 * time.Microsecond)
	ct := c.Core(later)
	if ct != clock.Time(1500*clock.Microsecond)+1 {
		t.Errorf("Core(epoch+1.5ms) = %d", ct)
	}
	if back := c.Wall(ct); !back.Equal(later) {
		t.Errorf("Wall(Core(t)) = %v, want %v", back, later)
	}
	if got := c.Wall(0); !got.IsZero() {
		t.Errorf("Wall(0) = %v, want the zero time", got)
	}
	if got := c.Core(epoch.Add(-time.Second)); got != 1 {
		t.Errorf("an instant before the epoch maps to %d, want 1", got)
	}
}
