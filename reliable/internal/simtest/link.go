package simtest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rbcast/rbcast/testnet"
)

// Link is a scenario's segment as every member sees it: its MTU, the
// cores' payload cap, the receive queue, and the impairments.
type Link struct {
	MTU        int
	MaxPayload int // 0: what the MTU allows
	QueueLen   int // 0: testnet's default
	In, Out    testnet.Impairment
}

// DrawLink draws a link from r: mostly 1500-byte frames, sometimes jumbo
// or a small payload cap, sometimes a short queue that overflows under
// bursts; loss up to 30 % (random, and sometimes bursty), duplication,
// reordering, jitter and corruption each in some scenarios.
func DrawLink(r *rand.Rand) Link {
	l := Link{MTU: 1500}
	if r.IntN(8) == 0 {
		l.MTU = 9000
	}
	if r.IntN(4) == 0 {
		l.MaxPayload = 100 + r.IntN(400)
	}
	if r.IntN(5) == 0 {
		l.QueueLen = 4 + r.IntN(16)
	}
	maxLoss := []float64{0, 0.01, 0.05, 0.1, 0.2, 0.3}[r.IntN(6)]
	l.In.Loss = r.Float64() * maxLoss
	if r.IntN(4) == 0 {
		l.In.Burst = testnet.GilbertElliott{GoodToBad: 0.01 + 0.04*r.Float64(), BadToGood: 0.2 + 0.5*r.Float64(), LossBad: 0.5 + 0.5*r.Float64()}
	}
	if r.IntN(3) == 0 {
		l.Out.Loss = r.Float64() * maxLoss / 2
	}
	if r.IntN(3) == 0 {
		l.In.Duplicate = 0.05 * r.Float64()
	}
	if r.IntN(3) == 0 {
		l.In.Reorder, l.In.ReorderDelay = 0.05*r.Float64(), time.Duration(50+r.IntN(500))*time.Microsecond
	}
	if r.IntN(3) == 0 {
		l.In.Jitter = time.Duration(r.IntN(100)) * time.Microsecond
	}
	if r.IntN(4) == 0 {
		l.In.Corrupt = 0.02 * r.Float64()
	}
	return l
}

// Endpoint is a member's endpoint on the link.
func (l Link) Endpoint() testnet.EndpointConfig {
	return testnet.EndpointConfig{MTU: l.MTU, QueueLen: l.QueueLen, In: l.In, Out: l.Out}
}

func (l Link) String() string {
	return fmt.Sprintf("mtu=%d maxPayload=%d queue=%d in={loss %.2f burst %+v dup %.2f reorder %.2f jitter %v corrupt %.3f} out={loss %.2f}",
		l.MTU, l.MaxPayload, l.QueueLen, l.In.Loss, l.In.Burst, l.In.Duplicate, l.In.Reorder, l.In.Jitter, l.In.Corrupt, l.Out.Loss)
}
