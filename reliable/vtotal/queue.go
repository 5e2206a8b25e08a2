package vtotal

// queue is a FIFO queue that reuses its array: the layer's queues of
// held messages, order entries and this member's messages hold up to a
// window each while they wait (under Safe, for the acks), and a slice
// popped from the front and appended to at the back (s = s[1:]) lost its
// front's room and was reallocated every queue length, a copy of every
// entry and an allocation the garbage collector scans.
type queue[T any] struct {
	s    []T
	head int
}

// len is the number of elements queued.
func (q *queue[T]) len() int { return len(q.s) - q.head }

// items are the queued elements, the first first: valid, and writable in
// place, until the next push or pop.
func (q *queue[T]) items() []T { return q.s[q.head:] }

// push appends v. A full array whose front half or more is popped
// moves its elements to the front instead of growing: each element is
// moved at most once per time the queue passes its length.
func (q *queue[T]) push(v T) {
	if len(q.s) == cap(q.s) && q.head > 0 && q.head >= len(q.s)/2 {
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	q.s = append(q.s, v)
}

// pop removes the first element, dropping its references.
func (q *queue[T]) pop() {
	var zero T
	q.s[q.head] = zero
	q.head++
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	}
}

// reset empties the queue, dropping its references, and keeps the array.
func (q *queue[T]) reset() {
	clear(q.s)
	q.s, q.head = q.s[:0], 0
}
