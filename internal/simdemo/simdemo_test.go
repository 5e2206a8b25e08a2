package simdemo

import (
	"strings"
	"testing"
)

func small() Config {
	c := Default()
	c.Frames = 300
	c.Progress = 0
	return c
}

func TestDefaultScenarioVerifies(t *testing.T) {
	res, err := Run(small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(res); err != nil {
		t.Fatal(err)
	}
	var corrupted, overflow, burst, missing int
	for _, m := range res.Members {
		corrupted += m.Corrupted
		overflow += int(m.Dropped.Overflow)
		burst += int(m.Dropped.BurstLost)
		missing += m.Missing()
	}
	// The scenario must actually exercise what it claims to check.
	if corrupted == 0 || overflow == 0 || burst == 0 || missing == 0 {
		t.Fatalf("scenario too tame: corrupted=%d overflow=%d burst=%d missing=%d", corrupted, overflow, burst, missing)
	}
	if res.Members[7].Dropped.Overflow == 0 {
		t.Fatal("the slow member never overflowed its queue")
	}
}

func TestPerfectSegmentDeliversEverything(t *testing.T) {
	c := small()
	c.Loss, c.BurstMember, c.SlowMember, c.Duplicate, c.Reorder, c.Corrupt = 0, -1, -1, 0, 0, 0
	res, err := Run(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Members {
		if m.Missing() != 0 || m.Dups != 0 || m.Rejected != 0 || m.Sent != c.Frames {
			t.Fatalf("member %d: %+v", m.ID, m)
		}
	}
}

func TestSameSeedSameRun(t *testing.T) {
	a, err := Run(small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(small(), nil)
	if a.TraceHash != b.TraceHash || a.Events != b.Events {
		t.Fatalf("same seed, different runs: %x/%d vs %x/%d", a.TraceHash, a.Events, b.TraceHash, b.Events)
	}
	c := small()
	c.Seed = 2
	d, _ := Run(c, nil)
	if d.TraceHash == a.TraceHash {
		t.Fatal("different seeds gave the same run")
	}
}

func TestConfigErrors(t *testing.T) {
	c := small()
	c.Payload = 9000
	_, err := Run(c, nil)
	if err == nil || !strings.Contains(err.Error(), "payload of 9000 bytes does not fit one frame: MTU 1500 with 8 members carries at most 1436") {
		t.Fatalf("err = %v", err)
	}
	c = small()
	c.Members = 1
	if _, err := Run(c, nil); err == nil || !strings.Contains(err.Error(), "members = 1") {
		t.Fatalf("err = %v", err)
	}
}
