// Command benchplot draws the plots of docs/benchmarks.md from the
// reports BenchmarkReport writes (make bench-net: bench-net.md; the
// committed ones are docs/data/run-N.md):
//
//	go run ./cmd/benchplot -o docs/img docs/data/run-*.md   # make plots
//
// Reports are read in the order given, oldest first; each figure is drawn
// from the last report that has its table, so a report of one part (say
// RBCAST_REPORT_PARTS=all) replaces only that part's figures.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/rbcast/rbcast/internal/benchplot"
	"github.com/rbcast/rbcast/internal/cliflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("o", ".", "directory the images are written to")
	format := fs.String("format", "svg", "image format: "+strings.Join(benchplot.Formats, " or "))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: benchplot [-o DIR] [-format svg|png] REPORT.md...\n\nDraws the figures of docs/benchmarks.md from BenchmarkReport's markdown reports, oldest first.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args, stdout); !ok {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "benchplot: -o is empty; want the directory the images go to")
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "benchplot: no report given; want one or more files written by BenchmarkReport (RBCAST_REPORT_OUT), e.g. docs/data/run-32.md")
		return 2
	}
	if !slices.Contains(benchplot.Formats, *format) {
		fmt.Fprintf(stderr, "benchplot: -format %q: want one of %s\n", *format, strings.Join(benchplot.Formats, ", "))
		return 2
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		why := "not a directory"
		if err != nil {
			why = errors.Unwrap(err).Error()
		}
		fmt.Fprintf(stderr, "benchplot: -o %s: %s; want an existing directory for the images\n", *dir, why)
		return 2
	}
	var reports []*benchplot.Report
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "benchplot: %v\n", err)
			return 1
		}
		r, err := benchplot.Parse(f, name)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "benchplot: %v\n", err)
			return 1
		}
		if len(r.Tables) == 0 {
			fmt.Fprintf(stderr, "benchplot: %s: no table in it; is it a BenchmarkReport report?\n", name)
			return 1
		}
		reports = append(reports, r)
	}
	files, missing, err := benchplot.WriteAll(reports, *dir, *format)
	if err != nil {
		fmt.Fprintf(stderr, "benchplot: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	for _, k := range missing {
		fmt.Fprintf(stderr, "benchplot: no report has the %s table; its figure is not drawn\n", k)
	}
	return 0
}
