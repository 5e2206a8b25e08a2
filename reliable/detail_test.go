package reliable

import (
	"github.com/rbcast/rbcast/reliable/pbp"
	"github.com/rbcast/rbcast/reliable/seq"
)

// fifo and total are the core's own counters of a FIFO or a Total group's
// Stats (Stats.Protocol.Detail).
func fifo(s Stats) pbp.Stats {
	d, _ := s.Protocol.Detail.(pbp.Stats)
	return d
}

func totalStats(s Stats) seq.Stats {
	d, _ := s.Protocol.Detail.(seq.Stats)
	return d
}

// fifoCore and totalCore are a Driver's core.
func (d *Driver) fifoCore() *pbp.Core { return d.n.st.Core().(*pbp.Core) }

func (d *Driver) totalCore() *seq.Core { return d.n.st.Core().(*seq.Core) }
