//go:build dsmmutate

package core

// Mutate makes the cores built from cfg run without the wait condition
// (noWC: WC, def. 7.3) or without waiting for the markers at a barrier
// (noMarkers: BC, def. 7.2, on the global channel only). It exists only
// in builds with -tags dsmmutate, for the mutation tests
// (dsm/mutation_test.go): a protocol that breaks the axioms on purpose.
func Mutate(cfg *Config, noWC, noMarkers bool) {
	cfg.mutation = 0
	if noWC {
		cfg.mutation |= mutationNoWC
	}
	if noMarkers {
		cfg.mutation |= mutationNoMarkers
	}
}
