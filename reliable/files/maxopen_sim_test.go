package files

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rbcast/rbcast/reliable/internal/simtest"
)

// TestSimMaxReceiving: TestSim's scenarios (loss, crashes and restarts,
// late members, ghosts, refusals, two senders) with every member taking
// at most one to three files at once and each sender sending 8 to 15
// more small files after its own, so that offers come while the bound
// is full: no member's sink ever holds more copies open than its bound,
// and every file still arrives wherever TestSim's checks want it (the
// offers beyond the bound wait and are taken later; none is named
// missing for it). The run must show offers waiting.
func TestSimMaxReceiving(t *testing.T) {
	var deferred, most atomic.Uint64
	var mu sync.Mutex
	t.Cleanup(func() {
		t.Logf("offers that waited: %d; most copies open at once at a member, over the seeds: %d", deferred.Load(), most.Load())
		if !t.Failed() && deferred.Load() == 0 {
			t.Errorf("no offer waited: the bound was never reached")
		}
	})
	simtest.RunSeeds(t, 200, func(t *testing.T, seed uint64) (fmt.Stringer, error) {
		sc := drawScenario(seed)
		sc.maxReceiving = 1 + int(seed%3)
		for i := range sc.files {
			for k := range 8 + int(seed%8) {
				f := &simFile{name: fmt.Sprintf("many/%d-%d", i, k), data: make([]byte, 1+(int(seed)*31+k*977)%3000)}
				for j := range f.data {
					f.data[j] = byte(j*7 + k + i)
				}
				f.alg = sc.files[i][0].alg
				f.hash = mustSum(f.alg, f.data)
				sc.files[i] = append(sc.files[i], f)
			}
		}
		s, err := runSim(t, sc, nil)
		if err != nil {
			return sc, err
		}
		for _, n := range s.nodes {
			if n.sink.mostOpen > sc.maxReceiving {
				return sc, fmt.Errorf("member %d held %d copies open at once, its MaxReceiving %d", n.id, n.sink.mostOpen, sc.maxReceiving)
			}
			mu.Lock()
			most.Store(max(most.Load(), uint64(n.sink.mostOpen)))
			mu.Unlock()
			if n.core != nil {
				deferred.Add(n.core.stats.FilesDeferred)
				if n.up && n.core.opened != n.sink.opened {
					return sc, fmt.Errorf("member %d counts %d copies open, its sink %d", n.id, n.core.opened, n.sink.opened)
				}
			}
		}
		return sc, nil
	})
}
