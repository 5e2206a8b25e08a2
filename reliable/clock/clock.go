// Package clock is the time of the protocol cores. A core never reads a
// clock (DESIGN.md, decision 1): every input carries the current Time,
// which the live runtime takes from its monotonic clock and the simulator
// and pcap-replay from their virtual or captured ones. It is shared by the
// cores (reliable/pbp, reliable/seq) so there is one definition of it.
package clock

// Time is a monotonic instant in nanoseconds on the runtime's clock. It
// must be positive; zero means "no deadline".
type Time int64

// Duration is a span of Time in nanoseconds.
type Duration int64

// Units of Duration.
const (
	Nanosecond  Duration = 1
	Microsecond          = 1000 * Nanosecond
	Millisecond          = 1000 * Microsecond
	Second               = 1000 * Millisecond
)

// Add returns t+d.
func (t Time) Add(d Duration) Time { return t + Time(d) }

// Sub returns t-u.
func (t Time) Sub(u Time) Duration { return Duration(t - u) }
