package dsm

import "github.com/rbcast/rbcast/dsm/core"

// WithCoreMutation returns cfg whose nodes pass their core's
// configuration through f before building the core: the mutation tests'
// way to core.Mutate (mutation_test.go), kept out of the package's API.
func WithCoreMutation(cfg Config, f func(*core.Config)) Config {
	cfg.mutate = f
	return cfg
}
