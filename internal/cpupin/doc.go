// Package cpupin binds a process to one CPU chosen by its rank, for the
// example programs run one process per host (dsm/examples, orca/examples)
// with more processes than cores.
package cpupin
