package files

import (
	"crypto/sha256"
	"testing"

	"github.com/rbcast/rbcast/frame"
)

// BenchmarkPass moves one file of b.N blocks from a sender's core to a
// receiver's in memory (no link, no loss): the cores' cost per block,
// sender and receiver together, and their allocations. The receiver's
// sink discards.
func BenchmarkPass(b *testing.B) {
	data := make([]byte, 1464)
	sink := discardSink{}
	cfg := func(self frame.MemberID) Config {
		return Config{Group: 9, Self: self, Members: members()[:2], Sink: sink, Rate: 1 << 40, Burst: 64}
	}
	s, _ := New(cfg(1))
	r, _ := New(cfg(2))
	size := uint64(b.N) * 1464
	src := &zeroSource{}
	s.Send(1, Outgoing{Name: "bench", Size: size, Hash: sha256.Sum256(nil), Source: src})
	now := Time(1)
	b.SetBytes(1464)
	b.ReportAllocs()
	b.ResetTimer()
	for s.passing() != nil || len(s.queue) > 0 {
		now += Time(Microsecond)
		s.Tick(now)
		for _, f := range s.Ready().Frames {
			_, body, _ := frame.SplitEthernet(f, frame.EtherType)
			v, err := frame.ParseGroup(body, 9)
			if err != nil {
				b.Fatal(err)
			}
			r.Step(now, macA, macB, v)
		}
		s.Advance()
		for _, f := range r.Ready().Frames {
			_, body, _ := frame.SplitEthernet(f, frame.EtherType)
			v, _ := frame.ParseGroup(body, 9)
			s.Step(now, macB, macA, v)
		}
		r.Advance()
	}
	_ = data
}

type zeroSource struct{}

func (zeroSource) ReadAt(p []byte, _ int64) (int, error) { clear(p); return len(p), nil }
func (zeroSource) Close() error                          { return nil }

type discardSink struct{}

func (discardSink) Open(Meta) (SinkFile, []frame.Range, error) { return discardFile{}, nil, nil }

type discardFile struct{}

func (discardFile) WriteBlock(uint32, []byte) error       { return nil }
func (discardFile) Sum() ([frame.FileHashLen]byte, error) { return [32]byte{}, nil }
func (discardFile) Commit() error                         { return nil }
func (discardFile) Abort(bool)                            {}
