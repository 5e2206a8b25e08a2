package reliable

import (
	"time"

	"github.com/rbcast/rbcast/reliable/core"
)

// Latencies are a member's latency histograms (core.Latencies): repairs
// of each member's stream, from detecting a gap to filling it, and under
// Order Total self-delivery, from Send accepting a message to its
// delivery back here in its place of the order. They never forget, so a
// monitor can take rates of them (rbcastd's Prometheus histograms).
type Latencies = core.Latencies

// Histogram counts latencies in the buckets of LatencyBounds (the last
// bucket: above every bound), with their sum in nanoseconds.
type Histogram = core.Histogram

// LatencyBounds returns the upper bounds of a Histogram's buckets.
func LatencyBounds() [core.LatencyBuckets]time.Duration {
	var out [core.LatencyBuckets]time.Duration
	for i, b := range core.LatencyBounds() {
		out[i] = time.Duration(b)
	}
	return out
}

// Latencies returns the latency histograms measured so far.
func (g *Group) Latencies() Latencies {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n.st.Latencies()
}
