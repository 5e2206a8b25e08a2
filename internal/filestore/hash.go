package filestore

import (
	"crypto/sha256"
	"hash"
)

// asyncSHA is a SHA-256 hash.Hash that hashes on goroutines of its own:
// Write copies the bytes into a chunk of hashChunk bytes, and each full
// chunk is hashed by a goroutine that waits for the previous chunk's, so
// that the chunks enter the hash in order; Sum waits for the last. The
// caller's goroutine (the file core's loop, a sender's pass) only copies.
// At most hashInFlight chunks are being hashed; Write waits for the
// oldest when the hashing is behind. No goroutine outlives its chunk, so a hash dropped
// unfinished (an aborted file) leaves none behind. It is not safe for
// concurrent use, as no hash.Hash is.
type asyncSHA struct {
	h   hash.Hash // the hash of the chunks done (read after their wait)
	cur []byte
	// flights are the chunks handed to goroutines, oldest first (a
	// chunk's buffer goes back to the pool once hashed).
	flights []flight
	n       int64 // bytes written
}

type flight struct {
	buf  []byte
	done chan struct{}
}

const (
	hashChunkBytes = 1 << 20
	hashInFlight   = 2
)

func newAsyncSHA() *asyncSHA { return &asyncSHA{h: sha256.New()} }

func (a *asyncSHA) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if a.cur == nil {
			a.cur = a.buffer()
		}
		k := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur, p = a.cur[:len(a.cur)+k], p[k:]
		if len(a.cur) == cap(a.cur) {
			a.launch()
		}
	}
	a.n += int64(n)
	return n, nil
}

// buffer returns an empty chunk, once fewer than hashInFlight are being
// hashed.
func (a *asyncSHA) buffer() []byte {
	if len(a.flights) >= hashInFlight {
		<-a.flights[0].done
		a.flights = a.flights[1:]
	}
	return getBuf(hashChunkBytes)
}

// launch hands the current chunk to a goroutine that hashes it after the
// previous chunk.
func (a *asyncSHA) launch() {
	var prev chan struct{}
	if k := len(a.flights); k > 0 {
		prev = a.flights[k-1].done
	}
	f := flight{buf: a.cur, done: make(chan struct{})}
	a.flights = append(a.flights, f)
	a.cur = nil
	go func(h hash.Hash) {
		if prev != nil {
			<-prev
		}
		h.Write(f.buf)
		putBuf(f.buf)
		close(f.done)
	}(a.h)
}

// wait hashes the current chunk and waits for every chunk.
func (a *asyncSHA) wait() {
	if len(a.cur) > 0 {
		a.launch()
	}
	for _, f := range a.flights {
		<-f.done
	}
	a.flights = a.flights[:0]
}

func (a *asyncSHA) Sum(b []byte) []byte {
	a.wait()
	return a.h.Sum(b)
}

func (a *asyncSHA) Reset() {
	a.wait()
	a.h.Reset()
	a.n = 0
}

func (a *asyncSHA) Size() int      { return sha256.Size }
func (a *asyncSHA) BlockSize() int { return sha256.BlockSize }
