package pbp

import (
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// TestExpectNacksALostLastFrame: member 0's only frame is lost. Without
// a hint member 1 learns of it from member 0's Ack after ResendTimeout;
// with Expect it asks one nack timeout after the hint.
func TestExpectNacksALostLastFrame(t *testing.T) {
	nackAt := func(expect bool) (Time, []frame.Range) {
		c := newCore(t, testConfig(PBP2, 1, 2))
		if expect {
			c.Expect(t0, 0, 1)
			if got := c.Counters().Expected; got != 1 {
				t.Fatalf("Expected = %d, want 1", got)
			}
		}
		if rd := c.Ready(); len(rd.Frames) != 0 {
			t.Fatalf("Expect sent %d frames at once; it must only arm the timer", len(rd.Frames))
		}
		c.Advance()
		for now := t0; now < t0+Time(50*Millisecond); now += Time(100 * Microsecond) {
			c.Tick(now)
			rd := c.Ready()
			for _, b := range rd.Frames {
				_, body, _ := frame.SplitEthernet(b, frame.EtherType)
				v, err := frame.Parse(body)
				if err != nil {
					t.Fatal(err)
				}
				if v.Type() == frame.Nack {
					rl := v.NackRanges()
					c.Advance()
					return now, []frame.Range{rl.At(0)}
				}
			}
			c.Advance()
		}
		return 0, nil
	}
	at, rs := nackAt(true)
	if at == 0 || at-t0 > Time(DefaultNackTimeout) || len(rs) != 1 || rs[0] != (frame.Range{First: 100, Last: 100}) {
		t.Fatalf("with Expect: Nack at +%v for %v, want within %v for [100 100]", Duration(at-t0), rs, Duration(DefaultNackTimeout))
	}
	if at, _ := nackAt(false); at != 0 {
		t.Fatalf("without Expect a Nack went out at +%v with nothing known missing", Duration(at-t0))
	}
}

// TestExpectIgnored: PBP1, an unknown member, and a known gap take no
// hint.
func TestExpectIgnored(t *testing.T) {
	c := newCore(t, testConfig(PBP1, 1, 2))
	c.Expect(t0, 0, 1)
	c2 := newCore(t, testConfig(PBP2, 1, 2))
	c2.Expect(t0, 9, 1)
	c2.Expect(t0, 1, 1)
	if c.Counters().Expected+c2.Counters().Expected != 0 {
		t.Fatal("a hint was taken under PBP1, from a stranger or from self")
	}
}
