package invariant

// bounded is a map that keeps its last n insertions, or all of them when
// n is 0.
type bounded[K comparable, V any] struct {
	m    map[K]V
	keys []K // ring of insertion order; nil when unbounded
	next int
	full bool
}

func newBounded[K comparable, V any](n int) bounded[K, V] {
	b := bounded[K, V]{m: make(map[K]V)}
	if n > 0 {
		b.keys = make([]K, n)
	}
	return b
}

func (b *bounded[K, V]) get(k K) (V, bool) {
	v, ok := b.m[k]
	return v, ok
}

func (b *bounded[K, V]) put(k K, v V) {
	if _, ok := b.m[k]; ok || b.keys == nil {
		b.m[k] = v
		return
	}
	if b.full {
		delete(b.m, b.keys[b.next])
	}
	b.keys[b.next] = k
	b.m[k] = v
	b.next++
	if b.next == len(b.keys) {
		b.next, b.full = 0, true
	}
}

func (b *bounded[K, V]) len() int { return len(b.m) }
