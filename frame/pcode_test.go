package frame

import (
	"errors"
	"strings"
	"testing"
)

func TestPcodeBodyErrors(t *testing.T) {
	h := baseHeader()
	cases := []struct {
		name  string
		body  Body
		field string
		text  string
	}{
		{"no targets", &PcodeDataBody{Targets: Targets{0}}, "pcode.data.targets", "0 targets on the broadcast stream (want at least 1)"},
		{"empty bitmap", &PcodeDataBody{}, "pcode.data.targets", "target bitmap of 0 bytes"},
		{"two on point stream", &PcodeDataBody{Stream: StreamPoint, Targets: AppendTargets(nil, 1, 2)}, "pcode.data.targets", "2 targets on the point-to-point stream (want exactly 1)"},
		{"bad stream", &PcodeDataBody{Stream: 2, Targets: AppendTargets(nil, 1)}, "pcode.data.stream", "stream 2"},
		{"nack kind", &PcodeNackBody{Kind: 4, Target: 1}, "pcode.nack.kind", "kind 4 (want 1 request, 2 personal, 3 global)"},
		{"global nack with target", &PcodeNackBody{Kind: NackGlobal, Target: 1}, "pcode.nack.target", "a global nack names target 1"},
		{"request nack without target", &PcodeNackBody{Kind: NackRequest, Target: NoMember}, "pcode.nack.target", "a request nack names no target"},
		{"status past 0xffff", &PcodeStatusBody{PointBase: 0xffff, Point: []uint32{1, 2}}, "pcode.status.point", "run past member id 0xffff"},
		{"abort reason", &PcodeAbortBody{Reason: 9}, "pcode.abort.reason", "reason 9 (want 1..3)"},
	}
	for _, c := range cases {
		b, err := Append(nil, &h, c.body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(b)
		var de *DecodeError
		if !errors.Is(err, ErrBody) || !errors.As(err, &de) || de.Field != c.field || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: err = %v, want ErrBody in %s saying %q", c.name, err, c.field, c.text)
		}
	}
}

func TestTargets(t *testing.T) {
	ts := AppendTargets(nil, 0, 9, 17)
	if len(ts) != 3 || ts.Count() != 3 || !ts.Has(9) || ts.Has(8) || ts.Has(100) {
		t.Fatalf("targets %08b: count %d", ts, ts.Count())
	}
	if !ts.Equal(append(ts, 0, 0)) || ts.Equal(AppendTargets(nil, 0, 9)) {
		t.Fatal("Equal ignores trailing zero bytes only")
	}
}
