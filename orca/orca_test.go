package orca_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/orca"
)

var bg = context.Background()

// Writes are applied by every replica in the one order and return their
// result to the caller; reads are local and see the caller's own writes.
func TestWritesAndReads(t *testing.T) {
	_, nodes := newLoop(t, 3, 1400, orca.Config{})
	cs := must(t, nodes, "c", counter, func() int64 { return 0 })
	rs := must(t, nodes, "r", register, func() int64 { return 7 })
	for i, n := range nodes {
		r, err := add.Call(bg, cs[i], int64(i+1))
		if err != nil {
			t.Fatalf("node %d: %v", n.Rank(), err)
		}
		want := []int64{1, 3, 6}[i]
		if r != want {
			t.Errorf("node %d: add returned %d, want %d", i, r, want)
		}
	}
	old, err := set.Call(bg, rs[2], 42)
	if err != nil || old != 7 {
		t.Fatalf("set returned %d, %v; want 7", old, err)
	}
	for i := range nodes {
		if v, _ := value.Call(bg, cs[i], struct{}{}); v != 6 {
			t.Errorf("node %d: counter %d, want 6", i, v)
		}
		if v, _ := get.Call(bg, rs[i], struct{}{}); v != 42 {
			t.Errorf("node %d: register %d, want 42", i, v)
		}
	}
	if st := nodes[0].Stats(); st.Applied != 4 || st.Writes != 1 || st.Messages != 1 {
		t.Errorf("node 0 stats: applied %d writes %d messages %d, want 4 1 1", st.Applied, st.Writes, st.Messages)
	}
	// An operation of another class is refused.
	if _, err := value.Call(bg, (*orca.Object[int64])(rs[0]), struct{}{}); err == nil || !strings.Contains(err.Error(), "another class") {
		t.Errorf("counter.value on a register: %v, want an error naming another class", err)
	}
}

// A guarded write blocks until a write makes its guard true, then runs
// once, at every replica alike; queued guarded writes are retried in the
// order they arrived.
func TestGuardedWritesWakeOnceInOrder(t *testing.T) {
	_, nodes := newLoop(t, 3, 1400, orca.Config{})
	qs := must(t, nodes, "q", queue, func() Queue { return Queue{} })
	type got struct {
		who int
		job int32
		err error
	}
	results := make(chan got, 3)
	for i := range 3 {
		go func() {
			j, err := getJob.Call(bg, qs[i], struct{}{})
			results <- got{i, j, err}
		}()
		// Wait until its get is queued, so that the order is known.
		waitFor(t, func() bool { return nodes[0].Stats().Pending == i+1 })
	}
	if _, err := put.Call(bg, qs[0], []int32{10, 11}); err != nil {
		t.Fatal(err)
	}
	a, b := <-results, <-results
	if a.who > b.who {
		a, b = b, a
	}
	if a != (got{0, 10, nil}) || b != (got{1, 11, nil}) {
		t.Errorf("first two gets: %+v %+v; want node 0 job 10, node 1 job 11", a, b)
	}
	select {
	case r := <-results:
		t.Fatalf("the third get returned %+v with the queue empty", r)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := closeQ.Call(bg, qs[1], struct{}{}); err != nil {
		t.Fatal(err)
	}
	if r := <-results; r != (got{2, -1, nil}) {
		t.Errorf("third get after close: %+v, want -1", r)
	}
	for i, n := range nodes {
		if st := n.Stats(); st.Pending != 0 || st.Applied != 5 {
			t.Errorf("node %d: %d pending, %d applied; want 0, 5 (put, close, three gets, each once)", i, st.Pending, st.Applied)
		}
		if v, _ := queued.Call(bg, qs[i], struct{}{}); v != 0 {
			t.Errorf("node %d: %d jobs left", i, v)
		}
	}
}

// waitFor polls cond (for tests with real goroutines: loop delivers at
// once, but a goroutine must first get to its call).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("condition not reached in 10 s")
		}
	}
}

// A guarded write whose context ends is cancelled through the order: it
// never runs after, at any replica. If the write it waits for comes
// first in the order, the cancellation comes too late and the call
// returns the result.
func TestCancelGuardedWrite(t *testing.T) {
	l, nodes := newLoop(t, 2, 1400, orca.Config{})
	qs := must(t, nodes, "q", queue, func() Queue { return Queue{} })
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := getJob.Call(ctx, qs[1], struct{}{})
		done <- err
	}()
	waitFor(t, func() bool { return nodes[0].Stats().Pending == 1 })
	cancel()
	err := <-done
	if !errors.Is(err, orca.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled get: %v, want ErrCancelled and context.Canceled", err)
	}
	if _, err := put.Call(bg, qs[0], []int32{5}); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		st := n.Stats()
		if v, _ := queued.Call(bg, qs[i], struct{}{}); v != 1 || st.Pending != 0 || st.Cancelled != 1 {
			t.Errorf("node %d: %d jobs, %d pending, %d cancelled; want 1, 0, 1", i, v, st.Pending, st.Cancelled)
		}
	}

	// Too late: the put is ordered before the cancellation.
	ctx, cancel = context.WithCancel(bg)
	type res struct {
		j   int32
		err error
	}
	got := make(chan res, 1)
	go func() {
		if _, err := getJob.Call(bg, qs[0], struct{}{}); err != nil { // takes job 5
			got <- res{-2, err}
			return
		}
		j, err := getJob.Call(ctx, qs[1], struct{}{})
		got <- res{j, err}
	}()
	waitFor(t, func() bool { return nodes[0].Stats().Pending == 1 })
	l.mu.Lock()
	l.hold = true
	l.mu.Unlock()
	putDone := make(chan error, 1)
	go func() { _, err := put.Call(bg, qs[0], []int32{6}); putDone <- err }()
	waitFor(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.pending) == 1 })
	cancel()
	waitFor(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.pending) == 2 })
	l.release()
	if r := <-got; r.j != 6 || r.err != nil {
		t.Errorf("get whose cancellation came after the put: %d, %v; want job 6, nil", r.j, r.err)
	}
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if st := n.Stats(); st.Pending != 0 || st.Cancelled != 1 {
			t.Errorf("node %d: %d pending, %d cancelled; want 0, 1", i, st.Pending, st.Cancelled)
		}
	}
}

// A guarded read waits for the local replica; an unguarded read never
// blocks.
func TestGuardedRead(t *testing.T) {
	_, nodes := newLoop(t, 2, 1400, orca.Config{})
	cs := must(t, nodes, "c", counter, func() int64 { return 0 })
	done := make(chan int64, 1)
	go func() {
		v, err := atLeast.Call(bg, cs[1], 3)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	for range 3 {
		select {
		case v := <-done:
			t.Fatalf("atLeast(3) returned %d early", v)
		default:
		}
		if _, err := add.Call(bg, cs[0], 1); err != nil {
			t.Fatal(err)
		}
	}
	if v := <-done; v != 3 {
		t.Errorf("atLeast(3) = %d", v)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Millisecond)
	defer cancel()
	if _, err := atLeast.Call(ctx, cs[1], 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("atLeast(100) with a deadline: %v", err)
	}
}

// A write longer than a message goes in parts and arrives whole.
func TestWriteInParts(t *testing.T) {
	_, nodes := newLoop(t, 2, 64, orca.Config{})
	ls := must(t, nodes, "log", logClass, func() []int32 { return nil })
	var long []int32
	for i := range 1000 {
		long = append(long, int32(i))
	}
	if n, err := push.Call(bg, ls[0], long); err != nil || n != 1000 {
		t.Fatalf("push of 1000: %d, %v", n, err)
	}
	if n, err := push.Call(bg, ls[1], []int32{-5}); err != nil || n != 1001 {
		t.Fatalf("push: %d, %v", n, err)
	}
	for i := range nodes {
		if v, _ := at.Call(bg, ls[i], 999); v != 999 {
			t.Errorf("node %d: log[999] = %d", i, v)
		}
		if v, _ := at.Call(bg, ls[i], 1000); v != -5 {
			t.Errorf("node %d: log[1000] = %d", i, v)
		}
	}
	st := nodes[0].Stats()
	if want := uint64((4000 + 10 + 62) / 63); st.Parts != want {
		t.Errorf("%d parts sent, want %d", st.Parts, want)
	}
	// MaxWrite bounds a write.
	_, small := newLoop(t, 1, 64, orca.Config{MaxWrite: 100})
	lsmall := must(t, small, "log", logClass, func() []int32 { return nil })
	if _, err := push.Call(bg, lsmall[0], long); err == nil || !strings.Contains(err.Error(), "more than MaxWrite (100)") {
		t.Errorf("push of 4000 bytes with MaxWrite 100: %v", err)
	}
}

// Writes to an object a member has not made yet wait for it.
func TestEarlyWrites(t *testing.T) {
	_, nodes := newLoop(t, 2, 1400, orca.Config{})
	c0, err := orca.New(nodes[0], "c", counter, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := add.Call(bg, c0, 2); err != nil {
			t.Fatal(err)
		}
	}
	if st := nodes[1].Stats(); st.Early != 5 {
		t.Fatalf("node 1 holds %d early messages, want 5", st.Early)
	}
	c1, err := orca.New(nodes[1], "c", counter, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := value.Call(bg, c1, struct{}{}); v != 10 {
		t.Errorf("node 1's counter after New: %d, want 10", v)
	}
	if st := nodes[1].Stats(); st.Early != 0 || st.Applied != 5 {
		t.Errorf("node 1: %d early, %d applied", st.Early, st.Applied)
	}
	if _, err := orca.New(nodes[1], "c", counter, 0); err == nil || !strings.Contains(err.Error(), "made twice") {
		t.Errorf("second New of c: %v", err)
	}
}

// The determinism check (Config.Check) stops a replica whose state
// differs from the writer's after the same writes.
func TestCheckCatchesNondeterminism(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	bad := orca.NewClass[int64]("bad")
	// Every replica adds how many times the function ran so far in this
	// process: 1 at the first replica, 2 at the second...
	incr := orca.Write(bad, "incr", orca.NoArgs, func(s *int64, _ struct{}) int64 {
		mu.Lock()
		calls++
		*s += int64(calls)
		mu.Unlock()
		return *s
	})
	_, nodes := newLoop(t, 2, 1400, orca.Config{Check: true})
	objs := must(t, nodes, "b", bad, func() int64 { return 0 })
	if _, err := incr.Call(bg, objs[0], struct{}{}); err != nil {
		t.Fatal(err)
	}
	var de *orca.DivergedError
	if err := nodes[1].Err(); !errors.As(err, &de) || de.Object != "b" || de.Writes != 1 || de.Member != nodes[0].Self() {
		t.Fatalf("node 1: %v, want a *DivergedError for b after write 1 from member %d", err, nodes[0].Self())
	}
	if _, err := incr.Call(bg, objs[1], struct{}{}); !errors.As(err, &de) {
		t.Errorf("a call on the diverged node: %v", err)
	}
	// A deterministic class passes the check, and it is counted.
	_, good := newLoop(t, 2, 1400, orca.Config{Check: true})
	cs := must(t, good, "c", counter, func() int64 { return 0 })
	for i := range 10 {
		if _, err := add.Call(bg, cs[i%2], int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range good {
		if st := n.Stats(); n.Err() != nil || st.DigestsChecked != 5 {
			t.Errorf("node %d: %v, %d digests checked; want nil, 5", i, n.Err(), st.DigestsChecked)
		}
	}
}

// An operation that panics stops every replica (each panics alike) with
// an error naming it, instead of the process.
func TestPanickingOperation(t *testing.T) {
	c := orca.NewClass[[]int32]("arr")
	setAt := orca.Write(c, "setAt", orca.Int64, func(s *[]int32, i int64) bool { (*s)[i] = 1; return true })
	_, nodes := newLoop(t, 2, 1400, orca.Config{})
	objs := must(t, nodes, "a", c, func() []int32 { return make([]int32, 4) })
	if _, err := setAt.Call(bg, objs[0], 2); err != nil {
		t.Fatal(err)
	}
	_, err := setAt.Call(bg, objs[0], 9)
	if err == nil || !strings.Contains(err.Error(), `arr.setAt on "a" (from member 1) panicked`) {
		t.Fatalf("setAt(9): %v", err)
	}
	for i, n := range nodes {
		if n.Err() == nil {
			t.Errorf("node %d still works", i)
		}
	}
	// So does a guard that panics, when its write arrives and when it is
	// retried from the queue.
	g := orca.NewClass[int64]("g")
	bump := orca.Write(g, "bump", orca.Int64, func(s *int64, d int64) int64 { *s += d; return *s })
	pick := orca.Write(g, "pick", orca.Int64, func(s *int64, i int64) int64 { return i }).
		When(func(s *int64, i int64) bool { return []bool{false, true}[*s+i] })
	for _, tc := range []struct {
		name    string
		arg     int64
		bumpBy  int64
		wantErr string
	}{
		{"on arrival", 5, 0, `the guard of g.pick on "g" (from member 2) panicked`},
		{"when retried", 0, 7, `the guard of g.pick on "g" (from member 2) panicked`},
	} {
		_, nodes := newLoop(t, 2, 1400, orca.Config{})
		objs := must(t, nodes, "g", g, func() int64 { return 0 })
		done := make(chan error, 1)
		go func() { _, err := pick.Call(bg, objs[1], tc.arg); done <- err }()
		if tc.bumpBy != 0 {
			waitFor(t, func() bool { return nodes[0].Stats().Pending == 1 })
			bump.Call(bg, objs[0], tc.bumpBy)
		}
		if err := <-done; err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: pick: %v, want an error saying %q", tc.name, err, tc.wantErr)
		}
		for i, n := range nodes {
			if err := n.Err(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: node %d: %v, want %q", tc.name, i, err, tc.wantErr)
			}
		}
	}
}

// Mistakes in a class's declaration are reported by New, not panics.
func TestClassDeclarationErrors(t *testing.T) {
	_, nodes := newLoop(t, 1, 1400, orca.Config{})
	for _, tc := range []struct {
		declare func() *orca.Class[int64]
		want    string
	}{
		{func() *orca.Class[int64] {
			c := orca.NewClass[int64]("twice")
			orca.Read(c, "x", func(*int64, struct{}) int64 { return 0 })
			orca.Read(c, "x", func(*int64, struct{}) int64 { return 0 })
			return c
		}, "operation x declared twice"},
		{func() *orca.Class[int64] {
			c := orca.NewClass[int64]("nofn")
			orca.Write[int64, int64, int64](c, "w", orca.Int64, nil)
			return c
		}, "operation w has no function"},
		{func() *orca.Class[int64] {
			c := orca.NewClass[int64]("nocodec")
			orca.Write(c, "w", nil, func(*int64, int64) int64 { return 0 })
			return c
		}, "write operation w has no argument codec"},
		{func() *orca.Class[int64] { return orca.NewClass[int64]("") }, "a class needs a name"},
	} {
		c := tc.declare()
		if _, err := orca.New(nodes[0], "o"+c.Name(), c, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
	c := orca.NewClass[int64]("late")
	orca.Read(c, "x", func(*int64, struct{}) int64 { return 0 })
	if _, err := orca.New(nodes[0], "late", c, 0); err != nil {
		t.Fatal(err)
	}
	op := orca.Read(c, "y", func(*int64, struct{}) int64 { return 0 })
	if _, err := op.Call(bg, nil, struct{}{}); err == nil {
		t.Error("a call on a nil object succeeded")
	}
	if _, err := orca.New(nodes[0], "late2", c, 0); err == nil || !strings.Contains(err.Error(), "cannot declare operation y after an object of it was made") {
		t.Errorf("New after a late declaration: %v", err)
	}
	// Two names with one id.
	if _, err := orca.New(nodes[0], "costarring", counter, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := orca.New(nodes[0], "liquid", counter, 0); err == nil || !strings.Contains(err.Error(), "have the same id") {
		t.Errorf("New of a colliding name: %v", err)
	}
}

// Every codec gives back what it encoded, and says what is wrong with
// bytes it cannot decode.
func TestCodecs(t *testing.T) {
	roundTrip(t, orca.Int64, -5)
	roundTrip(t, orca.Int32s, []int32{1, -2, 3})
	roundTrip(t, orca.Varint32s, []int32{0, 1, -1, 63, -64, 64, 8191, -8192, 8192, math.MaxInt32, math.MinInt32})
	roundTrip(t, orca.Varint32s, []int32{})
	roundTrip(t, orca.Float64s, []float64{1.5, -0.25})
	roundTrip(t, orca.Bytes, []byte("abc"))
	roundTrip(t, orca.BytesView, []byte("abc"))
	roundTrip(t, orca.String, "héllo")
	roundTrip(t, orca.NoArgs, struct{}{})
	type pair struct {
		A int32
		B [2]uint16
	}
	roundTrip(t, orca.Fixed[pair](), pair{-1, [2]uint16{3, 4}})
	roundTrip(t, orca.Gob[Queue](), Queue{Jobs: []int32{4, 5}, Closed: true})
	if _, err := orca.Fixed[[]int]().Append(nil, []int{1}); err == nil || !strings.Contains(err.Error(), "no fixed size") {
		t.Errorf("Fixed of a slice: %v", err)
	}
	for _, tc := range []struct {
		decode func() error
		want   string
	}{
		{func() error { _, err := orca.Int64.Decode([]byte{1, 2}); return err }, "an int64 is 8 bytes, got 2"},
		{func() error { _, err := orca.Int32s.Decode([]byte{1, 2, 3}); return err }, "3 bytes is not a whole number of int32s"},
		{func() error { _, err := orca.NoArgs.Decode([]byte{1}); return err }, "1 bytes of arguments for an operation that takes none"},
		{func() error { _, err := orca.Varint32s.Decode([]byte{2, 0x80, 0x80}); return err }, "a Varint32s of 3 bytes ends in 2 bytes of an unfinished varint"},
		{func() error { _, err := orca.Varint32s.Decode([]byte{2, 0x80, 0x80, 0x80, 0x80, 0x80, 1}); return err }, "element 1 of a Varint32s, at byte 1 of 7, is not an int32's varint"},
		{func() error { _, err := orca.Fixed[pair]().Decode([]byte{1}); return err }, "is 8 bytes, got 1"},
		{func() error { _, err := orca.Gob[Queue]().Decode([]byte{1, 2, 3}); return err }, "(gob)"},
	} {
		if err := tc.decode(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode: %v, want %q", err, tc.want)
		}
	}
}

// BytesView hands a write's function a view into the message; a write
// that waits in its guard's queue, and a traced one, get copies of their
// own, which later messages (in the same buffers) do not change.
func TestBytesView(t *testing.T) {
	type blob struct {
		Data []byte
		Open bool
	}
	c := orca.NewClass[blob]("blob")
	store := orca.Write(c, "store", orca.BytesView, func(s *blob, b []byte) int {
		s.Data = append(s.Data[:0], b...)
		return len(b)
	})
	storeOpen := orca.Write(c, "storeOpen", orca.BytesView, func(s *blob, b []byte) int {
		s.Data = append(s.Data[:0], b...)
		return len(b)
	}).When(func(s *blob, b []byte) bool { return s.Open })
	open := orca.Write(c, "open", orca.NoArgs, func(s *blob, _ struct{}) bool { s.Open = true; return true })
	data := orca.Read(c, "data", func(s *blob, _ struct{}) string { return string(s.Data) })

	h := orca.NewHistory()
	_, nodes := newLoop(t, 2, 1400, orca.Config{Trace: h.Record})
	objs := must(t, nodes, "b", c, func() blob { return blob{} })
	queued := storeOpen.Go(bg, objs[0], []byte("the queued write's"))
	waitFor(t, func() bool { return nodes[1].Stats().Pending == 1 })
	for _, s := range []string{"other bytes, in the same buffer", "and more"} {
		if _, err := store.Call(bg, objs[1], []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := open.Call(bg, objs[1], struct{}{}); err != nil {
		t.Fatal(err)
	}
	if n, err := queued.Wait(bg); err != nil || n != 18 {
		t.Fatalf("the queued write: %d, %v", n, err)
	}
	for i, o := range objs {
		if got, _ := data.Call(bg, o, struct{}{}); got != "the queued write's" {
			t.Errorf("node %d holds %q", i, got)
		}
	}
	members := []frame.MemberID{1, 2}
	witness, err := h.Agree(members)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(witness, members); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		var args []string
		for _, a := range h.Applied(m) {
			if b, ok := a.Args.([]byte); ok {
				args = append(args, string(b))
			}
		}
		if want := []string{"other bytes, in the same buffer", "and more", "the queued write's"}; !slices.Equal(args, want) {
			t.Errorf("member %d traced the arguments %q, want %q", m, args, want)
		}
	}
}

func roundTrip[T any](t *testing.T, c orca.Codec[T], v T) {
	t.Helper()
	b, err := c.Append([]byte{0xee}, v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(b[1:])
	if err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	b2, _ := c.Append(nil, got)
	if !slices.Equal(b[1:], b2) {
		t.Errorf("%T: %v came back as %v", v, v, got)
	}
}

// Go starts writes without waiting: one goroutine has many in flight,
// they are applied in the order started, and Wait returns each result.
func TestGo(t *testing.T) {
	l, nodes := newLoop(t, 2, 1400, orca.Config{})
	ls := must(t, nodes, "log", logClass, func() []int32 { return nil })
	l.mu.Lock()
	l.hold = true // nothing is delivered until release
	l.mu.Unlock()
	var ps []*orca.Pending[int64]
	for i := range 5 {
		ps = append(ps, push.Go(bg, ls[0], []int32{int32(i)}))
	}
	if ps[0].Applied() {
		t.Fatal("applied before the order delivered it")
	}
	l.release()
	for i, p := range ps {
		if n, err := p.Wait(bg); err != nil || n != int64(i+1) {
			t.Errorf("write %d: %d, %v", i, n, err)
		}
		if !p.Applied() {
			t.Errorf("write %d: not applied after Wait", i)
		}
	}
	if v, _ := all.Call(bg, ls[1], struct{}{}); !slices.Equal(v, []int32{0, 1, 2, 3, 4}) {
		t.Errorf("log %v", v)
	}
	if _, err := length.Go(bg, ls[0], struct{}{}).Wait(bg); err == nil || !strings.Contains(err.Error(), "call reads with Call") {
		t.Errorf("Go of a read: %v", err)
	}
}
