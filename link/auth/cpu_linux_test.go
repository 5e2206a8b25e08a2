package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/link"
)

// threadCPU is this thread's CPU time in ns (the caller is locked to its
// thread): what the other work on a shared machine does not inflate.
func threadCPU(tb testing.TB) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return ts.Nano()
}

// batchSink keeps every frame a Link sends, in preallocated room.
type batchSink struct {
	fake
	frames [][]byte
}

func (s *batchSink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		i := len(s.frames)
		s.frames = s.frames[:i+1]
		s.frames[i] = append(s.frames[i][:0], f...)
	}
	return len(frames), nil
}

// BenchmarkRecvCPU: a receiver's CPU per frame for a frame of the group,
// from the wire to a View the core is stepped with: the verify
// (Link.Recv's check, decrypting in place) and the stepper's parse.
// "off" is a member without a key: the stepper's parse of the core's
// frame, its CRC checked (what the key's cost is counted from). Three
// keyed paths: "crc", the one before link.Frame.Authenticated (the CRC
// rewritten over a decrypted body, then frame.ParseGroup checking it);
// "copy", a frame without room behind it (its ciphertext copied to
// scratch for Open), parsed without the CRC; "room", the same frame with
// room behind it (link/ring's V2 slots), opened from the frame with its
// tag behind the body; "link", "room" through a receiving Link's Recv
// (what Recv adds: its lock, the loop that keeps and marks the frames),
// recvBatch frames per call. Each round another locked thread seals 500 fresh
// frames into the receive buffers (as the kernel writes a ring from the
// other core: the receiver's first read of them is not from its own
// cache), then this one verifies and parses them on one path; the paths
// alternate round by round on one locked thread, an A/B that a shared
// machine's load and clock changes hit alike. Metrics are the thread's
// CPU time per frame, the mean and the least round's.
//
//	go test -run '^$' -bench RecvCPU -benchtime 45x ./link/auth
func BenchmarkRecvCPU(b *testing.B) {
	for _, encrypt := range []bool{false, true} {
		for _, size := range []int{64, 1400, 8900} {
			b.Run(fmt.Sprintf("encrypt=%v/%d", encrypt, size), func(b *testing.B) {
				recvCPU(b, encrypt, size)
			})
		}
	}
}

func recvCPU(b *testing.B, encrypt bool, size int) {
	const round = 500
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := &batchSink{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}, frames: make([][]byte, 0, round)}
	for range round {
		s.frames = append(s.frames, make([]byte, 0, size+200))
	}
	k := testKey(b, 1)
	a := wrap(b, s, k, encrypt)
	v, _ := NewVerifier(Config{Group: 7, Key: k, Encrypt: encrypt})
	out := [][]byte{dataFrame(b, s.mac, 0, 5, 1, strings.Repeat("x", size))}
	hl := frame.EthernetHeaderLen
	// The sender: another locked thread, sealing into the receive buffers.
	seal, sealed := make(chan string), make(chan error)
	go func() {
		runtime.LockOSThread()
		for mode := range seal {
			s.frames = s.frames[:0]
			var err error
			for range round {
				if mode == "off" {
					_, err = s.Send(out) // the core's frame, as a keyless group sends it
				} else {
					_, err = a.Send(out)
				}
				if err != nil {
					break
				}
			}
			sealed <- err
		}
	}()
	defer close(seal)
	// "link": the "room" path through a receiving Link's Recv, in
	// batches of recvBatch frames from a link that hands out the round's
	// buffers as they are (what Recv adds to the verify: its lock, the
	// loop that keeps and marks the frames).
	src := &bufSource{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 2}}}
	rx := wrap(b, src, k, encrypt)
	batch := make([]link.Frame, recvBatch)
	modes := []string{"off", "crc", "copy", "room", "link"}
	run := func(mode string) int64 {
		b.StopTimer()
		seal <- mode
		if err := <-sealed; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := threadCPU(b)
		if mode == "link" {
			src.frames = s.frames
			for {
				n, err := rx.Recv(time.Time{}, batch)
				if n == 0 {
					if len(src.frames) > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
						b.Fatalf("Recv: %d frames, %v, %d frames left", n, err, len(src.frames))
					}
					break
				}
				for _, f := range batch[:n] {
					if !f.Authenticated {
						b.Fatal("Recv passed a frame that did not verify")
					}
					if _, err := frame.ParseGroupNoCRC(f.Data[hl:], 7); err != nil {
						b.Fatal(err)
					}
				}
			}
			return threadCPU(b) - t0
		}
		for _, f := range s.frames {
			if mode == "off" {
				if _, err := frame.ParseGroup(f[hl:], 7); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if mode != "room" {
				f = f[:len(f):len(f)] // nothing behind the frame
			}
			g, err := v.check(f, false)
			if err != nil || g == nil {
				b.Fatalf("check: %v (judged %v)", err, g != nil)
			}
			if mode == "crc" {
				if encrypt {
					frame.SetCRC(g)
				}
				_, err = frame.ParseGroup(f[hl:], 7)
			} else {
				_, err = frame.ParseGroupNoCRC(f[hl:], 7)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		return threadCPU(b) - t0
	}
	total, least := make([]int64, len(modes)), make([]int64, len(modes))
	for i := range least {
		least[i] = -1
	}
	rounds := 0
	for b.Loop() {
		for j := range modes {
			p := (rounds + j) % len(modes) // the order rotates
			d := run(modes[p])
			total[p] += d
			if least[p] < 0 || d < least[p] {
				least[p] = d
			}
		}
		rounds++
	}
	for p, name := range modes {
		b.ReportMetric(float64(total[p])/float64(rounds*round), name+"-cpu-ns/frame")
		b.ReportMetric(float64(least[p])/round, name+"-least-cpu-ns/frame")
	}
}

// recvBatch: frames per Recv in BenchmarkRecvCPU's "link" path.
const recvBatch = 8

// bufSource is a link.Link whose Recv hands out frames, in place (their
// capacity, a receive buffer's room, with them), until none are left.
type bufSource struct {
	fake
	frames [][]byte
}

func (s *bufSource) Recv(deadline time.Time, frames []link.Frame) (int, error) {
	n := 0
	for n < len(frames) && len(s.frames) > 0 {
		frames[n] = link.Frame{Data: s.frames[0]}
		s.frames = s.frames[1:]
		n++
	}
	if n == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	return n, nil
}

// BenchmarkSendCPU: a sender's CPU per frame: the core's encoding
// (frame.Append) and the Link's seal (the copy with the auth section
// inserted, the MAC or encryption, the CRC over the sealed frame), as
// BenchmarkRecvCPU measures it. Encrypted, two encodings alternate round
// by round on one locked thread: "crc", the core's frame with its CRC,
// and "skip", without one (frame.Header.SkipCRC, as the runtime encodes
// for a link that reports link.SealsCRC); with the MAC only "crc" (the
// seal derives its CRC from the core's). Metrics are the thread's CPU
// time per frame, the mean and the least round's.
//
//	go test -run '^$' -bench SendCPU -benchtime 45x ./link/auth
func BenchmarkSendCPU(b *testing.B) {
	for _, encrypt := range []bool{false, true} {
		for _, size := range []int{64, 1400, 8900} {
			b.Run(fmt.Sprintf("encrypt=%v/%d", encrypt, size), func(b *testing.B) {
				const round = 500
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				s := &sink{fake: fake{mac: [6]byte{2, 0, 0, 0, 0, 1}}, last: make([]byte, 0, size+200)}
				a := wrap(b, s, testKey(b, 1), encrypt)
				payload := []byte(strings.Repeat("x", size))
				bufs := make([][]byte, round)
				for i := range bufs {
					bufs[i] = make([]byte, 0, size+200)
				}
				modes := []string{"crc"}
				if a.SealsCRC() {
					modes = append(modes, "skip")
				}
				type sums struct{ enc, seal, encLeast, sealLeast, totLeast int64 }
				res := make([]sums, len(modes))
				for i := range res {
					res[i] = sums{encLeast: -1, sealLeast: -1, totLeast: -1}
				}
				least := func(p *int64, v int64) {
					if *p < 0 || v < *p {
						*p = v
					}
				}
				rounds := 0
				one := make([][]byte, 1)
				for b.Loop() {
					for j := range modes {
						m := (rounds + j) % len(modes) // the order alternates
						h := frame.Header{Group: 7, Incarnation: 5, Acks: []uint32{1, 2}, SkipCRC: modes[m] == "skip"}
						t0 := threadCPU(b)
						for i := range bufs {
							h.Seq = uint32(i)
							f := frame.AppendEthernet(bufs[i][:0], frame.Broadcast, s.mac, frame.EtherType)
							f, err := frame.Append(f, &h, &frame.Payload{T: frame.Data, Data: payload})
							if err != nil {
								b.Fatal(err)
							}
							bufs[i] = f
						}
						t1 := threadCPU(b)
						for _, f := range bufs {
							one[0] = f
							if _, err := a.Send(one); err != nil {
								b.Fatal(err)
							}
						}
						t2 := threadCPU(b)
						r := &res[m]
						r.enc, r.seal = r.enc+t1-t0, r.seal+t2-t1
						least(&r.encLeast, t1-t0)
						least(&r.sealLeast, t2-t1)
						least(&r.totLeast, t2-t0)
					}
					rounds++
				}
				n := float64(rounds * round)
				for m, name := range modes {
					r := res[m]
					b.ReportMetric(float64(r.enc)/n, name+"-encode-cpu-ns/frame")
					b.ReportMetric(float64(r.seal)/n, name+"-seal-cpu-ns/frame")
					b.ReportMetric(float64(r.encLeast)/round, name+"-least-encode-cpu-ns/frame")
					b.ReportMetric(float64(r.sealLeast)/round, name+"-least-seal-cpu-ns/frame")
					b.ReportMetric(float64(r.totLeast)/round, name+"-least-total-cpu-ns/frame")
				}
			})
		}
	}
}

// BenchmarkSealCRC: the sealed frame's CRC computed whole (frame.SetCRC)
// and from the core's (sealedCRC, the length's shift cached), per body
// size, on one locked thread, rounds of 1000 of each alternating: where
// combineMin lies; "alternating", sealedCRC of frames whose body lengths
// alternate (size and size+1: no length twice in a row). Metrics are the
// least round's thread CPU time per CRC.
//
//	go test -run '^$' -bench SealCRC -benchtime 45x ./link/auth
func BenchmarkSealCRC(b *testing.B) {
	for _, size := range []int{64, 128, 256, 512, 1400, 8900} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			const round = 1000
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			orig := dataFrame(b, [6]byte{2}, 0, 5, 1, strings.Repeat("x", size))[frame.EthernetHeaderLen:]
			v, err := frame.Parse(orig)
			if err != nil {
				b.Fatal(err)
			}
			g, err := frame.InsertAuth(nil, v, AlgGMAC, 1, 42, TagLen)
			if err != nil {
				b.Fatal(err)
			}
			orig2 := dataFrame(b, [6]byte{2}, 0, 5, 1, strings.Repeat("x", size+1))[frame.EthernetHeaderLen:]
			v2, err := frame.Parse(orig2)
			if err != nil {
				b.Fatal(err)
			}
			g2, err := frame.InsertAuth(nil, v2, AlgGMAC, 1, 42, TagLen)
			if err != nil {
				b.Fatal(err)
			}
			frame.SetCRC(g)
			frame.SetCRC(g2)
			var s, s2 shift
			var sum uint32
			whole, combined, alternating := int64(-1), int64(-1), int64(-1)
			for b.Loop() {
				ta := threadCPU(b)
				for range round / 2 {
					if s2.sealedCRC(v, g) != frame.View(g).CRC() || s2.sealedCRC(v2, g2) != frame.View(g2).CRC() {
						b.Fatal("alternating lengths: sealedCRC differs from the CRC")
					}
				}
				if d := threadCPU(b) - ta; alternating < 0 || d < alternating {
					alternating = d
				}
				t0 := threadCPU(b)
				for range round {
					frame.SetCRC(g)
				}
				t1 := threadCPU(b)
				for range round {
					sum ^= s.sealedCRC(v, g)
				}
				t2 := threadCPU(b)
				if whole < 0 || t1-t0 < whole {
					whole = t1 - t0
				}
				if combined < 0 || t2-t1 < combined {
					combined = t2 - t1
				}
			}
			if sum != 0 && sum != frame.View(g).CRC() {
				b.Fatalf("combined CRC %08x, whole %08x", sum, frame.View(g).CRC())
			}
			b.ReportMetric(float64(whole)/round, "least-whole-cpu-ns")
			b.ReportMetric(float64(combined)/round, "least-combined-cpu-ns")
			b.ReportMetric(float64(alternating)/round, "least-alternating-cpu-ns")
		})
	}
}

// BenchmarkPrimitiveCPU: the maintained primitives a keyed frame of
// 1 400 bytes could pay for, each alone, on one locked thread in rounds
// of 1000 calls, the primitives alternating round by round: AES-256-GMAC
// as the link uses it (Seal with nothing to encrypt, the frame as
// additional data; "gmac-open" verifies), AES-256-GCM encrypting the body
// ("gcm-seal"), HMAC-SHA-256, and what a GCM call pays besides the GHASH
// of its bytes ("gmac-empty": Seal of nothing; "aes-block": one AES-256
// block, the tag's mask), beside what a frame costs without a key
// ("crc32c", the receiver's check) and a copy of it. Metric: the least
// round's thread CPU time per call.
//
//	go test -run '^$' -bench PrimitiveCPU -benchtime 45x ./link/auth
func BenchmarkPrimitiveCPU(b *testing.B) {
	const round, size = 1000, 1400
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	blk, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size+frame.Overhead+Overhead)
	for i := range data {
		data[i] = byte(i)
	}
	body := data[:size]
	var nonce [12]byte
	tag := g.Seal(nil, nonce[:], nil, data)
	out := make([]byte, 0, size+TagLen)
	scratch := make([]byte, len(data))
	mac := hmac.New(sha256.New, make([]byte, 32))
	sum := make([]byte, 0, sha256.Size)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var block [16]byte
	var crc uint32
	prims := []struct {
		name string
		run  func()
	}{
		{"gmac-seal", func() { g.Seal(out[:0], nonce[:], nil, data) }},
		{"gmac-open", func() {
			if _, err := g.Open(out[:0], nonce[:], tag, data); err != nil {
				b.Fatal(err)
			}
		}},
		{"gmac-empty", func() { g.Seal(out[:0], nonce[:], nil, nil) }},
		{"aes-block", func() { blk.Encrypt(block[:], block[:]) }},
		{"gcm-seal", func() { g.Seal(out[:0], nonce[:], body, data[size:]) }},
		{"hmac-sha256", func() { mac.Reset(); mac.Write(data); sum = mac.Sum(sum[:0]) }},
		{"crc32c", func() { crc ^= crc32.Checksum(data, castagnoli) }},
		{"copy", func() { copy(scratch, data) }},
	}
	least := make([]int64, len(prims))
	rounds := 0
	for b.Loop() {
		for j := range prims {
			p := (rounds + j) % len(prims)
			t0 := threadCPU(b)
			for range round {
				prims[p].run()
			}
			if d := threadCPU(b) - t0; least[p] == 0 || d < least[p] {
				least[p] = d
			}
		}
		rounds++
	}
	for p, pr := range prims {
		b.ReportMetric(float64(least[p])/round, pr.name+"-least-cpu-ns")
	}
	_ = crc
}
