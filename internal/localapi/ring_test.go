package localapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// ringMem returns a zeroed mapping for a ring of size bytes, aligned as
// an mmap'ed one is.
func ringMem(t testing.TB, size int) []byte {
	t.Helper()
	n, err := RingSize(size)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n+4096)
	a := int(uintptr(unsafe.Pointer(&b[0])) % 4096)
	return b[4096-a : 4096-a+n : 4096-a+n]
}

// ringPair is the two ends of a ring of size bytes (ringMem), a send
// or a deliver ring (which), for records of at most maxLen bytes: the
// producer's and the consumer's.
func ringPair(t testing.TB, which uint8, size, maxLen int) (p, c *Ring) {
	t.Helper()
	mem := ringMem(t, size)
	p, err := NewRing(which, mem, maxLen)
	if err != nil {
		t.Fatal(err)
	}
	c, err = NewRing(which, mem, maxLen)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// Records of every size from 0 to the largest go through a small ring
// many times over, wrapping with padding records, and come out whole and
// in order; a full ring says so and has room again once released.
func TestRingRoundTrip(t *testing.T) {
	const size, maxLen = MinRing, 9000
	p, c := ringPair(t, RingSend, size, maxLen)
	rnd := rand.New(rand.NewPCG(1, 2))
	var sent, got [][]byte
	var slots [][]byte
	full := 0
	for round := 0; round < 3000; round++ {
		n := rnd.IntN(maxLen + 1)
		if round%7 == 0 {
			n = rnd.IntN(64)
		}
		k := 1 + rnd.IntN(4)
		var err error
		slots, err = p.Reserve(slots, n, k)
		if errors.Is(err, ErrRingFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
		for i, s := range slots {
			m := make([]byte, len(s))
			if i == len(slots)-1 { // only the last may be short
				m = m[:len(s)-rnd.IntN(len(s)+1)/2]
			}
			for i := range m {
				m[i] = byte(rnd.Uint32())
			}
			copy(s, m)
			p.Commit(uint16(len(sent)), len(m))
			sent = append(sent, m)
		}
		p.Publish()
		// Take some of what waits, or all of it when the ring was full.
		take := rnd.IntN(5)
		if err != nil {
			take = 1 << 30
		}
		for range take {
			from, d, ok, err := c.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if int(from) != len(got) {
				t.Fatalf("record %d says it is from %d", len(got), from)
			}
			got = append(got, bytes.Clone(d))
		}
		c.Release()
	}
	for {
		_, d, ok, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, bytes.Clone(d))
	}
	if len(got) != len(sent) {
		t.Fatalf("%d records out, %d in", len(got), len(sent))
	}
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("record %d differs (%d bytes, sent %d)", i, len(got[i]), len(sent[i]))
		}
	}
	if full == 0 || p.Published() < 10*size {
		t.Fatalf("the ring was full %d times and carried %d bytes: the test did not wrap or fill it", full, p.Published())
	}
}

// The doorbell handshake: Publish says to ring only when the consumer
// sleeps (WaitData said so), once; Release likewise for a producer
// waiting for room.
func TestRingDoorbells(t *testing.T) {
	p, c := ringPair(t, RingSend, MinRing, 1000)
	if sleep, err := c.WaitData(); err != nil || !sleep {
		t.Fatalf("WaitData on an empty ring: %v, %v; want to sleep", sleep, err)
	}
	p.Add(1, []byte("x"))
	if !p.Publish() {
		t.Fatal("Publish after the consumer went to sleep did not say to ring")
	}
	if p.Publish() {
		t.Fatal("Publish said to ring twice")
	}
	p.Add(1, []byte("y"))
	p.Publish()
	if sleep, _ := c.WaitData(); sleep {
		t.Fatal("WaitData with records waiting says to sleep")
	}
	if p.Publish() {
		t.Fatal("Publish says to ring a consumer that found records")
	}
	// Fill the ring, wait for room, release.
	c.Next()
	c.Next()
	c.Release()
	for p.Add(1, make([]byte, 1000)) == nil {
	}
	p.Publish()
	if sleep, err := p.WaitSpace(1000); err != nil || !sleep {
		t.Fatalf("WaitSpace on a full ring: %v, %v; want to sleep", sleep, err)
	}
	c.Next()
	if c.Release() == false {
		t.Fatal("Release with the producer asleep did not say to ring")
	}
	if sleep, _ := p.WaitSpace(1000); sleep {
		t.Fatal("WaitSpace with room says to sleep")
	}
}

// ReleaseFree rings a producer asleep on a full ring only once the room
// it frees reaches the amount asked for, and then once; Release rings
// whatever the room.
func TestRingReleaseFree(t *testing.T) {
	p, c := ringPair(t, RingSend, MinRing, 1000)
	for p.Add(1, make([]byte, 1000)) == nil {
	}
	p.Publish()
	if sleep, err := p.WaitSpace(1000); err != nil || !sleep {
		t.Fatalf("WaitSpace on a full ring: %v, %v; want to sleep", sleep, err)
	}
	quarter := MinRing / 4
	freed := 0
	for freed < quarter-1008 {
		if _, d, ok, err := c.Next(); err != nil || !ok {
			t.Fatalf("after %d bytes: %v, %v", freed, ok, err)
		} else {
			freed += int(align8(RecordHeader + uint64(len(d))))
		}
		if freed < quarter && c.ReleaseFree(quarter) {
			t.Fatalf("ReleaseFree(%d) rang with %d bytes freed", quarter, freed)
		}
	}
	for freed < quarter {
		_, d, _, _ := c.Next()
		freed += int(align8(RecordHeader + uint64(len(d))))
	}
	if !c.ReleaseFree(quarter) {
		t.Fatalf("ReleaseFree(%d) with %d bytes freed did not ring the sleeping producer", quarter, freed)
	}
	if c.ReleaseFree(quarter) || c.Release() {
		t.Fatal("the producer was rung twice for one sleep")
	}
	if sleep, _ := p.WaitSpace(1000); sleep {
		t.Fatal("WaitSpace with room says to sleep")
	}
	for p.Add(1, make([]byte, 1000)) == nil {
	}
	p.Publish()
	p.WaitSpace(1000)
	c.Next()
	if c.ReleaseFree(quarter) {
		t.Fatal("ReleaseFree rang after one record")
	}
	if !c.Release() {
		t.Fatal("Release with the producer asleep did not say to ring")
	}
}

// A hostile other end changes the shared state: every fault is an error
// that names it, never a panic nor data outside the ring.
func TestRingFaults(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(mem []byte)
		want  string
	}{
		{"head past the ring", func(m []byte) { *(*uint64)(unsafe.Pointer(&m[offHead])) = MinRing + 8 }, "producer's index 65544 is outside"},
		{"bad kind", func(m []byte) { m[RingHeader+6] = 9 }, "record kind 9"},
		{"message too long", func(m []byte) { binary.LittleEndian.PutUint32(m[RingHeader:], 5000) }, "message of 5000 bytes, at most 1000"},
		{"message past what is published", func(m []byte) { binary.LittleEndian.PutUint32(m[RingHeader:], 900) }, "message of 900 bytes, only 24 published"},
		{"padding not to the end", func(m []byte) { m[RingHeader+6] = kindPad }, "padding of 5 bytes does not end at the end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, cons := ringPair(t, RingSend, MinRing, 1000)
			p.Add(2, []byte("hello"))
			p.Add(2, []byte("group"))
			p.Publish()
			c.spoil(p.mem)
			_, _, _, err := cons.Next()
			var re *RingError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Next: %v, want a RingError saying %q", err, c.want)
			}
		})
	}
	t.Run("tail moved back", func(t *testing.T) {
		p, cons := ringPair(t, RingSend, MinRing, 1000)
		// Fill the ring (the producer reads the tail when it runs out of
		// room), free two records, and move the tail back behind them.
		for p.Add(2, make([]byte, 1000)) == nil {
		}
		p.Publish()
		cons.Next()
		cons.Next()
		cons.Release()
		p.Add(2, make([]byte, 1000)) // reads the tail: 2016
		*(*uint64)(unsafe.Pointer(&p.mem[offTail])) = 8
		var err error
		for err == nil {
			err = p.Add(2, make([]byte, 1000))
		}
		var re *RingError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "consumer's index 8 is outside 2016..") {
			t.Fatalf("Add after the tail moved back: %v", err)
		}
	})
}

// FuzzRingConsumer: whatever the shared memory holds, Next returns
// records inside the data area, no longer than the limit, or an error;
// and a record it returns, added by a producer to a ring of its own,
// comes out of that ring's consumer the same.
func FuzzRingConsumer(f *testing.F) {
	f.Add(uint64(16), []byte{5, 0, 0, 0, 1, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'})
	f.Add(uint64(MinRing), []byte{0xf8, 0xff, 0, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, head uint64, data []byte) {
		mem := ringMem(t, MinRing)
		copy(mem[RingHeader:], data)
		*(*uint64)(unsafe.Pointer(&mem[offHead])) = head
		c, err := NewRing(RingDeliver, mem, 1000)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := uintptr(unsafe.Pointer(&mem[RingHeader])), uintptr(unsafe.Pointer(&mem[len(mem)-1]))
		rp, rc := ringPair(t, RingDeliver, MinRing, 1000)
		for range 100 {
			from, d, ok, err := c.Next()
			if err != nil || !ok {
				return
			}
			if err := rp.Add(from, d); err != nil {
				t.Fatalf("a record of %d bytes from %d does not go into an empty ring: %v", len(d), from, err)
			}
			rp.Publish()
			if f2, d2, ok, err := rc.Next(); err != nil || !ok || f2 != from || !bytes.Equal(d2, d) {
				t.Fatalf("record from %d, %x, comes back from %d, %x (%v, %v)", from, d, f2, d2, ok, err)
			}
			rc.Release()
			if len(d) > 1000 {
				t.Fatalf("a record of %d bytes, over the limit", len(d))
			}
			if len(d) > 0 {
				a, z := uintptr(unsafe.Pointer(&d[0])), uintptr(unsafe.Pointer(&d[len(d)-1]))
				if a < lo || z > hi {
					t.Fatal("a record outside the data area")
				}
			}
		}
	})
}

// The records' layout, pinned: two messages and the padding record that
// ends a data area, as docs/local-api.md ("Rings") draws them.
func TestRingGolden(t *testing.T) {
	p, _ := ringPair(t, RingSend, MinRing, 1000)
	p.Add(1, []byte("hello"))
	p.Add(3, []byte("group!!!"))
	got := append([]byte(nil), p.data[:p.Published()]...)
	// 16 bytes before the end of the area, a record of 24 (9 bytes of
	// data) does not fit: a padding record fills the 16, the message
	// starts at offset 0.
	p.pos = uint64(MinRing) - 16
	*(*uint64)(unsafe.Pointer(&p.mem[offTail])) = p.pos - 32
	p.other = p.pos - 32
	if err := p.Add(2, []byte("wrapped!!")); err != nil {
		t.Fatal(err)
	}
	got = append(got, p.data[MinRing-16:]...)
	got = append(got, p.data[:24]...)
	path := filepath.Join("testdata", "golden", "ring_records.hex")
	if *update {
		if err := os.WriteFile(path, []byte(hexDump(got)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := readHex(t, path); !bytes.Equal(got, want) {
		t.Fatalf("ring records differ from %s:\n got %x\nwant %x", path, got, want)
	}
}

// RingFor is the smallest ring whose half holds a record of the
// message, at least MinRing, and none beyond MaxRing; a ring of that size
// takes the message, one half as large does not.
func TestRingFor(t *testing.T) {
	for _, tc := range []struct{ msg, want int }{
		{0, MinRing}, {1400, MinRing}, {MinRing/2 - RecordHeader, MinRing}, {MinRing/2 - RecordHeader + 1, 2 * MinRing},
		{65397, 128 << 10}, {MaxRing/2 - RecordHeader, MaxRing}, {MaxRing / 2, 0},
	} {
		if got := RingFor(tc.msg); got != tc.want {
			t.Errorf("RingFor(%d) = %d, want %d", tc.msg, got, tc.want)
		}
	}
	for _, msg := range []int{1400, 40000, 65397} {
		size := RingFor(msg)
		r, err := NewRing(RingDeliver, make([]byte, RingHeader+size), size)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Add(1, make([]byte, msg)); err != nil {
			t.Errorf("a message of %d bytes into a ring of RingFor's %d: %v", msg, size, err)
		}
		if size > MinRing {
			half, _ := NewRing(RingDeliver, make([]byte, RingHeader+size/2), size/2)
			if err := half.Add(1, make([]byte, msg)); !errors.Is(err, ErrRecordTooLarge) {
				t.Errorf("a message of %d bytes into a ring of %d: %v, want ErrRecordTooLarge", msg, size/2, err)
			}
		}
	}
}
