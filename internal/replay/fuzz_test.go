package replay

import (
	"bytes"
	"flag"
	"io"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/pcapgo"
)

// Why `go test -fuzz FuzzRead` used to sit at "0 execs/s": Go's fuzzer
// minimizes every new interesting input before going on, trying to remove
// every span of it (quadratic in its length) for up to -fuzzminimizetime,
// 60 s by default, and counts no execs meanwhile. With multi-kilobyte
// captures as seeds and each exec running the reader and every analysis
// (tens of µs with coverage), each find cost a minute of minimizing.
// Small seeds, maxFuzzInput, and minimizing for at most fuzzMinimizeTime
// (2000 execs, well under a second) unless -fuzzminimizetime is given keep
// the fuzzer fuzzing; a few frames reach every branch of the reader and
// the analyses. Simulate's idle ticks are bounded too (below).
const (
	maxFuzzInput     = 2048
	fuzzMinimizeTime = "2000x"
)

// shortMinimize sets -test.fuzzminimizetime to fuzzMinimizeTime when the
// command line did not set it; the coordinator reads it in f.Fuzz.
func shortMinimize(f *testing.F) {
	set := false
	flag.Visit(func(fl *flag.Flag) { set = set || fl.Name == "test.fuzzminimizetime" })
	if fl := flag.Lookup("test.fuzzminimizetime"); fl != nil && !set {
		if err := fl.Value.Set(fuzzMinimizeTime); err != nil {
			f.Fatal(err)
		}
	}
}

// FuzzRead feeds arbitrary bytes to the reader and every analysis: they
// must return errors, never panic; and what the reader read, written back
// as pcapng, reads as the same interfaces and records.
func FuzzRead(f *testing.F) {
	run := runLossy(f, filepath.Join(f.TempDir(), "seed.pcapng"), 1, 2, 2, 0)
	c, err := ReadFile(run.path, ReadOptions{})
	if err != nil {
		f.Fatal(err)
	}
	// A few frames of each direction and interface: pcapng with our
	// interface descriptions, tcpdump-style pcap, 802.1Q-tagged pcap.
	var few []Record
	for i := range c.Records {
		if len(few) < 5 {
			few = append(few, c.Records[i])
		}
	}
	ptrs := make([]*Record, len(few))
	for i := range few {
		ptrs[i] = &few[i]
	}
	// And a few frames of a total-order group (SeqRequest, SeqData,
	// SeqAccept).
	srun := runSeq(f, filepath.Join(f.TempDir(), "seq.pcapng"), 1, 2, 3, 0)
	sc, err := ReadFile(srun.path, ReadOptions{})
	if err != nil {
		f.Fatal(err)
	}
	var seqFew []Record
	for i := range sc.Records {
		if len(seqFew) < 6 && sc.Records[i].Iface == 1 {
			seqFew = append(seqFew, sc.Records[i])
		}
	}
	for _, seed := range [][]byte{
		ngBytes(f, c, few),
		ngBytes(f, sc, seqFew),
		writePcap(f, ptrs, false),
		writePcap(f, ptrs[:2], true),
		{0x0a, 0x0d, 0x0d, 0x0a},
	} {
		if len(seed) > maxFuzzInput {
			f.Fatalf("seed of %d bytes exceeds maxFuzzInput %d", len(seed), maxFuzzInput)
		}
		f.Add(seed)
	}
	shortMinimize(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Gzip inputs decompress into megabytes of frames, which is slow
		// rather than wrong; the decompressed bytes take the same path.
		if len(data) > maxFuzzInput || (len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
			return
		}
		c, err := Parse("fuzz", data, ReadOptions{Partial: true})
		if c == nil {
			if err == nil {
				t.Fatal("no capture and no error")
			}
			return
		}
		assertRewrites(t, c)
		WriteTimeline(io.Discard, c)
		WriteSummary(io.Discard, c)
		Check(c, CheckOptions{})
		if len(c.Interfaces) > 0 {
			// Mutated timestamps span hours: a few idle ticks per pause
			// reach the same code as 2000, which cost a second an exec
			// under the fuzzer's instrumentation.
			if res, err := Simulate(c, SimOptions{Node: 1, Iface: 0, MaxIdleTicks: 8}); err == nil {
				res.Write(io.Discard, c, false)
			}
		}
	})
}

// FuzzParseMembers: a -members list either fails or parses to members
// that print (as Simulate's notes do) to a list parsing to them again.
func FuzzParseMembers(f *testing.F) {
	f.Add("1=02:00:00:00:00:01@3,2=02:00:00:00:00:02")
	f.Add("65534=ff:ff:ff:ff:ff:ff@4294967295")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseMembers(s)
		if err != nil {
			return
		}
		again, err := ParseMembers(formatMembers(ms))
		if err != nil || !slices.Equal(again, ms) {
			t.Fatalf("%q parses to %v, printed %q, which parses to %v (%v)", s, ms, formatMembers(ms), again, err)
		}
	})
}

// assertRewrites writes c back as pcapng (its interfaces' names,
// descriptions and link types; its records' times, interfaces,
// directions, drop counts and bytes) and checks that it reads back the
// same. A capture pcapgo's writer cannot hold (a time before 1970 or
// past 2262, in nanoseconds since 1970) is not checked.
func assertRewrites(t *testing.T, c *Capture) {
	t.Helper()
	for _, r := range c.Records {
		if r.Time.Before(time.Unix(0, 0)) || r.Time.After(time.Unix(0, math.MaxInt64)) {
			return
		}
	}
	if len(c.Interfaces) == 0 {
		return
	}
	var buf bytes.Buffer
	mk := func(i Interface) pcapgo.NgInterface {
		return pcapgo.NgInterface{Name: i.Name, Description: i.Description, LinkType: i.LinkType, TimestampResolution: 9}
	}
	w, err := pcapgo.NewNgWriterInterface(&buf, mk(c.Interfaces[0]), pcapgo.NgWriterOptions{})
	if err != nil {
		t.Fatalf("writing back: %v", err)
	}
	for _, i := range c.Interfaces[1:] {
		if _, err := w.AddInterface(mk(i)); err != nil {
			t.Fatalf("writing back interface %d: %v", i.Index, err)
		}
	}
	for _, r := range c.Records {
		var opts pcapgo.NgPacketOptions
		switch r.Dir {
		case DirIn:
			opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}
		case DirOut:
			opts.Flags = &pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionOutbound}
		}
		if r.Lost != 0 {
			opts.DropCount = &r.Lost
		}
		ci := gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Data), Length: len(r.Data), InterfaceIndex: r.Iface}
		if err := w.WritePacketWithOptions(ci, r.Data, opts); err != nil {
			t.Fatalf("writing back frame %d: %v", r.N, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	again, err := Parse("again", buf.Bytes(), ReadOptions{})
	if err != nil {
		t.Fatalf("the capture written back does not read: %v", err)
	}
	if len(again.Interfaces) != len(c.Interfaces) || len(again.Records) != len(c.Records) {
		t.Fatalf("written back: %d interfaces and %d records, read %d and %d", len(c.Interfaces), len(c.Records), len(again.Interfaces), len(again.Records))
	}
	for k, i := range c.Interfaces {
		a := again.Interfaces[k]
		if a.Name != i.Name || a.Description != i.Description || a.LinkType != i.LinkType {
			t.Fatalf("interface %d %q %q %v reads back as %q %q %v", k, i.Name, i.Description, i.LinkType, a.Name, a.Description, a.LinkType)
		}
	}
	for k, r := range c.Records {
		a := again.Records[k]
		if !a.Time.Equal(r.Time) || a.Iface != r.Iface || a.Dir != r.Dir || a.Lost != r.Lost || !bytes.Equal(a.Data, r.Data) {
			t.Fatalf("frame %d (%v, if %d, dir %v, lost %d, %x) reads back as (%v, if %d, dir %v, lost %d, %x)",
				r.N, r.Time, r.Iface, r.Dir, r.Lost, r.Data, a.Time, a.Iface, a.Dir, a.Lost, a.Data)
		}
	}
}
