// Package files holds the tests of bench/files' scripts: run (one file
// to every member, rbcastd sendfile against UFTP, udpcast and TCP
// fan-out; docs/benchmarks.md, "Files to every member") and cpusplit (an
// rbcastd CPU profile's time per MB by part, which run -P prints). It
// has no code of its own; tcpfan is the TCP fan-out's command.
package files
