package orca_test

import (
	"slices"

	"github.com/rbcast/rbcast/orca"
)

// The objects the tests share.

// A counter: add, value, and atLeast, a read that waits for the count.
var (
	counter = orca.NewClass[int64]("counter")
	add     = orca.Write(counter, "add", orca.Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	value   = orca.Read(counter, "value", func(s *int64, _ struct{}) int64 { return *s })
	atLeast = orca.Read(counter, "atLeast", func(s *int64, v int64) int64 { return *s }).
		When(func(s *int64, v int64) bool { return *s >= v })
)

// A register: set returns the value it replaced.
var (
	register = orca.NewClass[int64]("register")
	set      = orca.Write(register, "set", orca.Int64, func(s *int64, v int64) int64 { old := *s; *s = v; return old })
	get      = orca.Read(register, "get", func(s *int64, _ struct{}) int64 { return *s })
)

// An append-only log: push returns the new length; at reads an entry.
var (
	logClass = orca.NewClass[[]int32]("log")
	push     = orca.Write(logClass, "push", orca.Int32s, func(s *[]int32, v []int32) int64 { *s = append(*s, v...); return int64(len(*s)) })
	length   = orca.Read(logClass, "len", func(s *[]int32, _ struct{}) int64 { return int64(len(*s)) })
	all      = orca.Read(logClass, "all", func(s *[]int32, _ struct{}) []int32 { return slices.Clone(*s) })
	at       = orca.Read(logClass, "at", func(s *[]int32, i int64) int32 {
		if i < 0 || int(i) >= len(*s) {
			return -1
		}
		return (*s)[i]
	})
)

// Orca's job queue: put adds jobs, close says no more will come, and get
// waits until there is a job (which it takes) or the queue is closed and
// empty (-1).
type Queue struct {
	Jobs   []int32
	Closed bool
}

var (
	queue = orca.NewClass[Queue]("queue")
	put   = orca.Write(queue, "put", orca.Int32s, func(q *Queue, jobs []int32) int64 {
		q.Jobs = append(q.Jobs, jobs...)
		return int64(len(q.Jobs))
	})
	closeQ = orca.Write(queue, "close", orca.NoArgs, func(q *Queue, _ struct{}) bool { q.Closed = true; return true })
	getJob = orca.Write(queue, "get", orca.NoArgs, func(q *Queue, _ struct{}) int32 {
		if len(q.Jobs) == 0 {
			return -1
		}
		j := q.Jobs[0]
		q.Jobs = q.Jobs[1:]
		return j
	}).When(func(q *Queue, _ struct{}) bool { return len(q.Jobs) > 0 || q.Closed })
	queued = orca.Read(queue, "queued", func(q *Queue, _ struct{}) int64 { return int64(len(q.Jobs)) })
	// tryGet takes a job if there is one, -1 if not: get without waiting.
	tryGet = orca.Write(queue, "tryGet", orca.NoArgs, func(q *Queue, _ struct{}) int32 {
		if len(q.Jobs) == 0 {
			return -1
		}
		j := q.Jobs[0]
		q.Jobs = q.Jobs[1:]
		return j
	})
)

// A sink for the benchmarks: write "put" takes bytes and counts them,
// as the raw order's Deliver in BenchmarkOrcaThroughput does: its
// function gets a view of the message (BytesView). "putCopy" is the same
// with Bytes, which copies the bytes at every replica.
var (
	sink        = orca.NewClass[int64]("bench.sink")
	sinkPut     = orca.Write(sink, "put", orca.BytesView, func(s *int64, b []byte) int64 { *s += int64(len(b)); return *s })
	sinkPutCopy = orca.Write(sink, "putCopy", orca.Bytes, func(s *int64, b []byte) int64 { *s += int64(len(b)); return *s })
)
