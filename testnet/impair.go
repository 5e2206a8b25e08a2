package testnet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Direction selects which side of an endpoint an Impairment acts on.
type Direction uint8

const (
	// In impairs frames arriving at the endpoint; each receiver decides
	// on its own, so a broadcast may reach some members and not others
	// (the thesis's "lost by only one process": a full receive buffer).
	In Direction = iota
	// Out impairs frames the endpoint sends, before they reach the wire;
	// every receiver sees the same outcome (the thesis's "lost by all":
	// sender buffer overflow or corruption in transit; Auld 2001, ch. 6,
	// fig. 6.10 counts about three times more of these than the former).
	Out
)

func (d Direction) String() string {
	switch d {
	case In:
		return "In"
	case Out:
		return "Out"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Impairment is what one direction of an endpoint does to frames. The zero
// value is a perfect link. All random choices are drawn from the endpoint's
// own seeded stream for that direction, in a fixed order, and only for the
// impairments that are enabled.
//
// Per frame, in this order: bursty loss (the Gilbert–Elliott chain moves one
// step), independent loss, corruption, duplication, then the extra delays
// (reordering, jitter). A receive queue that is full drops the frame on
// arrival whatever the Impairment says (see EndpointConfig.QueueLen).
type Impairment struct {
	// Loss is the probability that a frame is lost, independently of all
	// other frames.
	Loss float64
	// Burst is correlated loss; its zero value disables it.
	Burst GilbertElliott
	// Corrupt is the probability that one byte after the Ethernet header is
	// XORed with a random non-zero value. The frame is still delivered: the
	// point is to check that receivers reject it. Corruption on Out is seen
	// by every receiver, on In by one.
	Corrupt float64
	// Duplicate is the probability that a frame is delivered twice.
	Duplicate float64
	// Reorder is the probability that a frame is held back by ReorderDelay,
	// so that frames sent after it overtake it.
	Reorder      float64
	ReorderDelay time.Duration
	// Jitter adds a uniformly distributed extra delay in [0, Jitter] to
	// every frame; frames closer together than Jitter may reorder too.
	Jitter time.Duration
}

// GilbertElliott is the two-state Markov model of bursty loss (Gilbert 1960,
// Elliott 1963). Before each frame the chain moves: from good to bad with
// probability GoodToBad, from bad to good with BadToGood; the frame is then
// lost with LossGood or LossBad according to the state. The mean sojourn in
// the bad state is 1/BadToGood frames, so with LossBad = 1 and LossGood = 0
// the mean burst of consecutive losses is 1/BadToGood, and the long-run loss
// rate is GoodToBad/(GoodToBad+BadToGood). The chain starts in the good
// state and moves once per frame that reaches this direction (for In: per
// frame addressed to the endpoint). It is on when GoodToBad or LossGood is
// non-zero.
type GilbertElliott struct {
	GoodToBad, BadToGood float64
	LossGood, LossBad    float64
}

// Enabled reports whether the model is on.
func (g GilbertElliott) Enabled() bool { return g.GoodToBad > 0 || g.LossGood > 0 }

func checkProb(where, name string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return configErrorf("%s: %s is %v, want a probability in [0, 1]", where, name, p)
	}
	return nil
}

// validate reports the first field of im that is out of range; where names
// the impairment in the message.
func (im Impairment) validate(where string) error {
	probs := []struct {
		name string
		p    float64
	}{
		{"Loss", im.Loss},
		{"Corrupt", im.Corrupt},
		{"Duplicate", im.Duplicate},
		{"Reorder", im.Reorder},
		{"Burst.GoodToBad", im.Burst.GoodToBad},
		{"Burst.BadToGood", im.Burst.BadToGood},
		{"Burst.LossGood", im.Burst.LossGood},
		{"Burst.LossBad", im.Burst.LossBad},
	}
	for _, p := range probs {
		if err := checkProb(where, p.name, p.p); err != nil {
			return err
		}
	}
	switch {
	case im.Jitter < 0:
		return configErrorf("%s: Jitter is %v, want >= 0", where, im.Jitter)
	case im.ReorderDelay < 0:
		return configErrorf("%s: ReorderDelay is %v, want >= 0", where, im.ReorderDelay)
	case im.Reorder > 0 && im.ReorderDelay == 0:
		return configErrorf("%s: Reorder is %v but ReorderDelay is 0; give the delay that lets later frames overtake", where, im.Reorder)
	case im.Burst.GoodToBad > 0 && im.Burst.BadToGood == 0 && im.Burst.LossBad > 0:
		// Legal, but the link dies for good after the first burst; say so
		// rather than let a test hang on it silently.
		return configErrorf("%s: Burst.BadToGood is 0, so the first burst would never end", where)
	}
	return nil
}

// impairer is one direction of one endpoint: its settings, its random stream
// and its Gilbert–Elliott state.
type impairer struct {
	im  Impairment
	rng *rand.Rand
	bad bool // Gilbert–Elliott state
}

// fate is what an impairer decided for one frame.
type fate struct {
	drop    DropReason // DropNone: delivered
	corrupt bool
	copies  int   // 1, or 2 when duplicated
	delay   int64 // extra delay of the first copy, ns
	delay2  int64 // extra delay of the duplicate, ns
	reorder bool
}

func (p *impairer) decide() fate {
	im := &p.im
	f := fate{copies: 1}
	if im.Burst.Enabled() {
		if p.bad {
			if p.rng.Float64() < im.Burst.BadToGood {
				p.bad = false
			}
		} else if p.rng.Float64() < im.Burst.GoodToBad {
			p.bad = true
		}
		loss := im.Burst.LossGood
		if p.bad {
			loss = im.Burst.LossBad
		}
		if loss > 0 && p.rng.Float64() < loss {
			f.drop = DropBurst
			return f
		}
	}
	if im.Loss > 0 && p.rng.Float64() < im.Loss {
		f.drop = DropLoss
		return f
	}
	if im.Corrupt > 0 && p.rng.Float64() < im.Corrupt {
		f.corrupt = true
	}
	if im.Duplicate > 0 && p.rng.Float64() < im.Duplicate {
		f.copies = 2
	}
	f.delay = p.extraDelay(&f)
	if f.copies == 2 {
		f.delay2 = p.extraDelay(&f)
	}
	return f
}

func (p *impairer) extraDelay(f *fate) int64 {
	var d int64
	if p.im.Reorder > 0 && p.rng.Float64() < p.im.Reorder {
		d += int64(p.im.ReorderDelay)
		f.reorder = true
	}
	if p.im.Jitter > 0 {
		d += p.rng.Int64N(int64(p.im.Jitter) + 1)
	}
	return d
}

// corrupt flips one byte of b after the Ethernet header (any byte if b is no
// longer than a header).
func (p *impairer) corrupt(b []byte) {
	if len(b) == 0 {
		return
	}
	lo := 14
	if len(b) <= lo {
		lo = 0
	}
	i := lo + p.rng.IntN(len(b)-lo)
	b[i] ^= byte(1 + p.rng.IntN(255))
}

// splitmix64 is the SplitMix64 finalizer (Steele, Lea, Flood 2014), used to
// derive well-separated PCG seeds from (seed, stream id).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// stream returns the random source of one endpoint direction. It depends only
// on the seed, the endpoint's index and the direction, so adding endpoints
// leaves the others' draws unchanged.
func stream(seed uint64, index int, dir Direction) *rand.Rand {
	id := uint64(index)<<1 | uint64(dir)
	return rand.New(rand.NewPCG(splitmix64(seed^splitmix64(id)), splitmix64(^seed+id)))
}
