package simdemo

import (
	"strings"
	"testing"

	"github.com/rbcast/rbcast/reliable"
)

func smallGroup() GroupConfig {
	c := DefaultGroup()
	c.Messages = 300
	c.Progress = 0
	return c
}

func TestGroupScenarioVerifies(t *testing.T) {
	for _, mode := range []reliable.Mode{reliable.PBP2, reliable.PBP1} {
		c := smallGroup()
		c.Mode = mode
		res, err := RunGroup(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyGroup(res); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		var dropped, overflow, corrupt uint64
		for _, m := range res.Members {
			dropped += m.Segment.Dropped()
			overflow += m.Segment.Overflow
			corrupt += m.Stats.BadFrames.Checksum
		}
		// The scenario must really lose, overflow and corrupt frames, or
		// "every message arrived" proves nothing.
		if dropped == 0 || overflow == 0 || corrupt == 0 {
			t.Fatalf("%v: scenario too tame: dropped=%d overflow=%d corrupt=%d", mode, dropped, overflow, corrupt)
		}
	}
}

func TestGroupSameSeedSameRun(t *testing.T) {
	a, err := RunGroup(smallGroup(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunGroup(smallGroup(), nil)
	if a.TraceHash != b.TraceHash || a.Events != b.Events {
		t.Fatalf("same seed, different runs: %x/%d vs %x/%d", a.TraceHash, a.Events, b.TraceHash, b.Events)
	}
}

func TestVerifyGroupCatchesFailures(t *testing.T) {
	res, err := RunGroup(smallGroup(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Members[2].Wrong = 1
	res.Members[5].Delivered--
	_, err = VerifyGroup(res)
	if err == nil || !strings.Contains(err.Error(), "member 3 delivered 1 messages out of order") || !strings.Contains(err.Error(), "member 6 delivered 2099 of 2100 messages") {
		t.Fatalf("err = %v", err)
	}
}

func TestGroupConfigErrors(t *testing.T) {
	c := smallGroup()
	c.Members = 1
	if _, err := RunGroup(c, nil); err == nil || !strings.Contains(err.Error(), "members = 1, want 2..64") {
		t.Fatalf("err = %v", err)
	}
}
