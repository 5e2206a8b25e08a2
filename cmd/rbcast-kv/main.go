// Command rbcast-kv is the replicated key-value service of package kv
// (docs/kv.md): replicas on one Ethernet segment kept identical by
// rbcast's total order (or, with -mode thesis, by request lists in BDSM
// and synchronised clocks), and clients anywhere that reach them over UDP.
//
//	rbcast-kv serve -i IFACE -group G -members N -listen ADDR:PORT [-node ID] [-mode ordered|thesis]
//	rbcast-kv -servers ADDR:PORT,... get KEY | put KEY VALUE | del KEY | cas KEY OLD NEW
//	rbcast-kv -servers ADDR:PORT,... load -n N [-c CLIENTS] [-size BYTES] [-prefix P]
//	rbcast-kv -servers ADDR:PORT,... verify -n N [-c CLIENTS] [-prefix P]
//	rbcast-kv -servers ADDR:PORT,... history -n N [-c CLIENTS] [-keys K] [-prefix P]
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rbcast/rbcast/dsm"
	"github.com/rbcast/rbcast/frame"
	"github.com/rbcast/rbcast/internal/cliflag"
	"github.com/rbcast/rbcast/kv"
	"github.com/rbcast/rbcast/link/ring"
	"github.com/rbcast/rbcast/reliable"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes: 0 done; 1 the op's answer was not ok (not found, mismatch);
// 2 a usage error or no answer.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		err := serve(args[1:], stdout, stderr)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errFlags):
			return 2 // the flag package said why
		case err != nil:
			fmt.Fprintln(stderr, "rbcast-kv serve:", err)
			return 2
		}
		return 0
	}
	return client(args, stdout, stderr)
}

// errFlags is a command line the flag package refused and explained.
var errFlags = errors.New("bad flags")

// parseExit is the exit status after fs.Parse's err: 0 for -h, which
// printed the usage, else 2 (the flag package printed the error).
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// maxValue is load's largest -size: a request travels in one UDP
// datagram (at most 65507 bytes over IPv4), key and header included.
const maxValue = 65000

const serveUsage = `usage: rbcast-kv serve -i IFACE -group G -members N -listen ADDR:PORT [-node ID]
                 [-mode ordered|thesis [-tr D] [-eps D] [-tc D] [-slots N]]

Runs one replica on interface IFACE (CAP_NET_RAW) and answers clients on
the UDP address -listen (docs/kv.md).

flags:
`

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rbcast-kv serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serveUsage); fs.PrintDefaults() }
	if cliflag.HelpAsked(args) {
		fs.SetOutput(stdout)
	}
	iface := fs.String("i", "", "the interface of the replicas' segment (required)")
	group := fs.Uint("group", 0, "the group id (required, 1..2^32-1)")
	members := fs.Int("members", 0, "replicas to wait for before founding the group when none runs (required)")
	listen := fs.String("listen", "", "the UDP address clients reach this replica at, ADDR:PORT (required)")
	node := fs.Int("node", -1, "the member id to ask for (default: no wish)")
	mode := fs.String("mode", "ordered", "ordered (the total order, the default) or thesis (Q and D lists in BDSM, stability by Δ; docs/kv.md)")
	tr := fs.Duration("tr", 20*time.Millisecond, "thesis mode: t_r, the bound on a write's delay from one replica to every other (repairs included)")
	eps := fs.Duration("eps", 5*time.Millisecond, "thesis mode: ε, the bound on the difference between any two replicas' clocks")
	tcl := fs.Duration("tc", 0, "thesis mode: t_c, the bound from a request's timestamp to its arrival (0: replicas stamp requests on arrival)")
	slots := fs.Int("slots", 256, "thesis mode: the entries of each replica's Q (D has twice as many)")
	failure := fs.Duration("failure-timeout", 0, "remove a silent replica after this long (0: the default)")
	sessions := fs.Int("sessions", kv.DefaultMaxSessions, "the session table's size: opening one more expires the least recently used (the same at every replica)")
	applied := fs.String("applied", "", "append a line 'client seq fresh|retry' for every request applied (client 0: a session opened), and 'snapshot APPLIED ORDERED' when the replica takes another's state, to this file (tests)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errFlags
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *iface == "":
		return errors.New("-i IFACE is required")
	case *group == 0 || *group > 1<<32-1:
		return fmt.Errorf("-group is %d, want 1..%d", *group, uint32(1<<32-1))
	case *members < 1:
		return fmt.Errorf("-members is %d, want at least 1", *members)
	case *listen == "":
		return errors.New("-listen ADDR:PORT is required")
	case *sessions < 1:
		return fmt.Errorf("-sessions is %d, want at least 1", *sessions)
	case *node < -1 || *node >= int(frame.NoMember):
		return fmt.Errorf("-node is %d, want a member id 0..%d (or -1: no wish)", *node, int(frame.NoMember)-1)
	case *failure < 0:
		return fmt.Errorf("-failure-timeout is %v, want 0 (the default) or more", *failure)
	case *mode != "ordered" && *mode != "thesis":
		return fmt.Errorf("-mode %q: want ordered or thesis", *mode)
	case *mode == "thesis" && (*tr <= 0 || *eps < 0 || *tcl < 0):
		return fmt.Errorf("-tr %v, -eps %v, -tc %v: want -tr > 0, -eps ≥ 0, -tc ≥ 0", *tr, *eps, *tcl)
	case *mode == "thesis" && *slots < 1:
		return fmt.Errorf("-slots is %d, want at least 1", *slots)
	case *mode == "thesis" && *node < 0:
		return errors.New("-mode thesis needs -node: -node 0 on one replica (the registration server), another id on each other")
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", *listen, err)
	}
	l, err := ring.Open(*iface, ring.Config{})
	if err != nil {
		conn.Close()
		return fmt.Errorf("-i %s: %w", *iface, err)
	}
	defer l.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := kv.ServerConfig{Logger: logger, MaxSessions: *sessions, Group: reliable.Config{Group: uint32(*group), Size: *members,
		RequestID: frame.NoMember, FailureTimeout: *failure, Logger: logger}}
	if *node >= 0 {
		cfg.Group.RequestID = frame.MemberID(*node)
	}
	if *applied != "" {
		f, err := os.OpenFile(*applied, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("-applied: %w", err)
		}
		defer f.Close()
		var mu sync.Mutex
		cfg.OnApply = func(q kv.Request, _ []byte, fresh bool) {
			what := "retry"
			if fresh {
				what = "fresh"
			}
			mu.Lock()
			fmt.Fprintf(f, "%d %d %s\n", q.Client, q.Seq, what)
			mu.Unlock()
		}
		// The requests a snapshot brings were applied elsewhere: the log
		// says so, and a test reads the replica's state with gets instead.
		cfg.OnRestore = func(applied, ordered uint64) {
			mu.Lock()
			fmt.Fprintf(f, "snapshot %d %d\n", applied, ordered)
			mu.Unlock()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Info("rbcast-kv: joining the group, then serving", "iface", *iface, "group", *group, "listen", conn.LocalAddr(), "mode", *mode)
	if *mode == "thesis" {
		// The replicas form a BDSM group by registration: the one asking
		// for member id 0 (-node 0) is its server. A replica started
		// again after a kill cannot rejoin (docs/kv.md, "Thesis mode").
		tcfg := kv.ThesisServerConfig{Logger: logger,
			DSM:    dsm.Config{Group: reliable.Config{Group: uint32(*group), Size: *members, Server: *node == 0, FailureTimeout: *failure, Logger: logger}},
			Thesis: kv.ThesisConfig{Tr: *tr, Eps: *eps, Tc: *tcl, MaxSessions: *sessions, Slots: *slots, OnApply: cfg.OnApply}}
		tcfg.DSM.Group.RequestID = frame.MemberID(*node)
		join := func(ctx context.Context, c dsm.Config) (*dsm.Node, error) { return dsm.Join(ctx, l, c) }
		return kv.ServeThesis(ctx, join, conn, tcfg)
	}
	join := func(ctx context.Context, c reliable.Config) (*reliable.Group, error) { return reliable.Join(ctx, l, c) }
	return kv.Serve(ctx, join, conn, cfg)
}

const clientUsage = `usage: rbcast-kv -servers ADDR:PORT,... [-timeout D] [-deadline D] [-local] get KEY
       rbcast-kv -servers ... put KEY VALUE | del KEY | cas KEY OLD NEW
       rbcast-kv -servers ... load -n N [-c CLIENTS] [-size BYTES] [-prefix P]
                 [-slow D] [-pause D] (N puts; prints "acked CLIENT SEQ" for each, "slow
                 put ..." for each slower than D, then the rate and latencies; -pause: each
                 client waits D before each put, so every put meets an idle group)
       rbcast-kv -servers ... verify -n N [-c CLIENTS] [-prefix P]
                 (gets PREFIX-i for i < N and checks each holds load's value i;
                 with -local, reads each replica's own state until it does or -deadline)
       rbcast-kv -servers ... history -n N [-c CLIENTS] [-keys K] [-prefix P]
                 (N random gets, puts, dels and cas on K keys; prints each operation as a
                 JSON line, kv.HistoryOp, for a linearizability check)
       rbcast-kv serve -i IFACE -group G -members N -listen ADDR:PORT [-node ID]
                 [-mode ordered|thesis [-tr D] [-eps D] [-tc D] [-slots N]]`

func client(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rbcast-kv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), clientUsage); fs.PrintDefaults() }
	if len(args) > 0 && cliflag.HelpAsked(args[:1]) {
		fs.SetOutput(stdout)
	}
	servers := fs.String("servers", "", "the replicas' UDP addresses, comma-separated (required)")
	timeout := fs.Duration("timeout", 500*time.Millisecond, "wait this long for one replica before trying the next")
	deadline := fs.Duration("deadline", 10*time.Second, "give up on a request after this long")
	local := fs.Bool("local", false, "get: read the replica's own state, not through the order (may be stale)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	want := map[string]int{"get": 1, "put": 2, "del": 1, "cas": 3, "load": -1, "verify": -1, "history": -1}
	switch {
	case fs.NArg() == 0:
		fmt.Fprintf(stderr, "rbcast-kv: want a command: get, put, del, cas, load, verify, history or serve\n%s\n", clientUsage)
		return 2
	case fs.Arg(0) == "help":
		// help [COMMAND]: the usage, or the command's own flags.
		if fs.NArg() > 1 {
			switch c := fs.Arg(1); {
			case c == "serve":
				return run([]string{"serve", "-h"}, stdout, stderr)
			case want[c] < 0:
				return client([]string{"-servers", "-", c, "-h"}, stdout, stderr)
			case want[c] == 0:
				fmt.Fprintf(stderr, "rbcast-kv: unknown command %q\n%s\n", c, clientUsage)
				return 2
			}
		}
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	case want[fs.Arg(0)] == 0:
		fmt.Fprintf(stderr, "rbcast-kv: unknown command %q\n%s\n", fs.Arg(0), clientUsage)
		return 2
	case want[fs.Arg(0)] < 0 && cliflag.HelpAsked(fs.Args()[1:]):
		// load -h, verify -h, history -h: their flags, with or without
		// -servers.
		*servers = cmp.Or(*servers, "-")
	case *servers == "":
		fmt.Fprintf(stderr, "rbcast-kv: -servers ADDR:PORT,... is required (the replicas' UDP addresses)\n")
		return 2
	case *timeout <= 0:
		fmt.Fprintf(stderr, "rbcast-kv: -timeout is %v, want > 0\n", *timeout)
		return 2
	case *deadline <= 0:
		fmt.Fprintf(stderr, "rbcast-kv: -deadline is %v, want > 0\n", *deadline)
		return 2
	}
	c := &kv.Client{Servers: strings.Split(*servers, ","), Timeout: *timeout}
	defer c.Close()
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "load":
		return load(c, rest, *deadline, stdout, stderr)
	case "verify":
		return verify(c, rest, *deadline, *local, stdout, stderr)
	case "history":
		return history(c, rest, *deadline, stdout, stderr)
	}
	n := want[cmd]
	if len(rest) != n {
		fmt.Fprintf(stderr, "rbcast-kv: %s takes %d arguments, got %d\n%s\n", cmd, n, len(rest), clientUsage)
		return 2
	}
	op := kv.Op{Key: rest[0]}
	switch cmd {
	case "get":
		op.Kind = kv.OpGet
	case "put":
		op.Kind, op.Value = kv.OpPut, []byte(rest[1])
	case "del":
		op.Kind = kv.OpDelete
	case "cas":
		op.Kind, op.Expect, op.Value = kv.OpCAS, []byte(rest[1]), []byte(rest[2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	res, err := c.Do(ctx, op, *local)
	if err != nil {
		fmt.Fprintln(stderr, "rbcast-kv:", err)
		return 2
	}
	switch {
	case res.Status == kv.StatusOK && cmd == "get":
		fmt.Fprintf(stdout, "%s\n", res.Value)
		return 0
	case res.Status == kv.StatusOK:
		fmt.Fprintln(stdout, "ok")
		return 0
	case res.Status == kv.StatusNotFound || res.Status == kv.StatusMismatch:
		fmt.Fprintln(stdout, res)
		return 1
	}
	fmt.Fprintln(stderr, "rbcast-kv:", res)
	return 2
}

// load runs N puts of PREFIX-i (values of -size bytes) from -c clients
// at once, each one request at a time, printing each acknowledged
// request's id, so a test can hold them against the replicas' applied
// logs; the last line is the rate and the latency percentiles.
func load(c *kv.Client, args []string, deadline time.Duration, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rbcast-kv load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rbcast-kv -servers ADDR:PORT,... load -n N [-c CLIENTS] [-size BYTES] [-prefix P] [-slow D] [-pause D]\n\nN puts of PREFIX-i from -c clients at once; prints \"acked CLIENT SEQ\" for each, then the rate and latencies.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if cliflag.HelpAsked(args) {
		fs.SetOutput(stdout)
	}
	n := fs.Int("n", 100, "puts to run")
	conc := fs.Int("c", 1, "clients running at once (a session each)")
	size := fs.Int("size", 0, "value size in bytes (0: the decimal index)")
	prefix := fs.String("prefix", "k", "key prefix")
	slow := fs.Duration("slow", 0, "print a line for every put slower than this (0: none)")
	pause := fs.Duration("pause", 0, "wait this long before each put (a cold put: the group idle meanwhile); 0: none")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *size > maxValue {
		fmt.Fprintf(stderr, "rbcast-kv load: -size %d: want at most %d (a request is one UDP datagram)\n", *size, maxValue)
		return 2
	}
	if *conc < 1 || *n < 0 || *size < 0 || *pause < 0 {
		fmt.Fprintf(stderr, "rbcast-kv load: -n %d -c %d -size %d -pause %v: want -c at least 1 and no negative counts or pause\n", *n, *conc, *size, *pause)
		return 2
	}
	var (
		mu    sync.Mutex
		lat   []time.Duration
		fail  error
		start = time.Now()
	)
	stop := func() bool { mu.Lock(); defer mu.Unlock(); return fail != nil }
	fanOut(c, *conc, *n, stop, func(k int, cl *kv.Client) func(i int) {
		return func(i int) {
			value := []byte(fmt.Sprint(i))
			if *size > 0 {
				value = []byte(strings.Repeat("v", *size))
			}
			time.Sleep(*pause)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			t0 := time.Now()
			res, err := cl.Do(ctx, kv.Op{Kind: kv.OpPut, Key: fmt.Sprintf("%s-%d", *prefix, i), Value: value}, false)
			cancel()
			d := time.Since(t0)
			mu.Lock()
			switch {
			case err != nil:
				fail = fmt.Errorf("put %d: %w", i, err)
			case res.Status != kv.StatusOK:
				fail = fmt.Errorf("put %d: %v", i, res)
			default:
				lat = append(lat, d)
				fmt.Fprintf(stdout, "acked %d %d\n", cl.ID, cl.Seq())
				if *slow > 0 && d > *slow {
					fmt.Fprintf(stdout, "slow put %d took %v from %s, %d tries, answered by %s, last try %v\n", i, d.Round(time.Millisecond),
						t0.UTC().Format("15:04:05.000"), cl.Tries, cl.Served, cl.LastTry.Round(time.Microsecond))
				}
			}
			mu.Unlock()
		}
	})
	if fail != nil {
		fmt.Fprintln(stderr, "rbcast-kv load:", fail)
		return 2
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Microsecond)
	}
	fmt.Fprintf(stdout, "done %d puts in %v, %.0f puts/s, p50 %v p99 %v, slowest %v\n", *n, elapsed.Round(time.Millisecond),
		float64(*n)/elapsed.Seconds(), pct(0.5), pct(0.99), pct(1))
	return 0
}

// verify gets PREFIX-i for i < N from -c clients at once and checks
// that each holds i, the value load gave it (load without -size). With
// -local the gets read the replica's own state (not through the order)
// and a key that does not hold its value yet is read again until the
// deadline: a replica may not have applied the last acknowledged puts
// yet (Safe tells the one that answers that every replica holds them,
// not that each applied them). It prints every key that does not hold
// its value and exits 1, or 2 when a get had no answer; the last line
// counts the keys verified.
func verify(c *kv.Client, args []string, deadline time.Duration, local bool, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rbcast-kv verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rbcast-kv -servers ADDR:PORT,... verify -n N [-c CLIENTS] [-prefix P]\n\nGets PREFIX-i for i < N and checks each holds load's value i (with -local: each replica's own state, until it does or -deadline).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if cliflag.HelpAsked(args) {
		fs.SetOutput(stdout)
	}
	n := fs.Int("n", 100, "keys to get")
	conc := fs.Int("c", 1, "clients running at once")
	prefix := fs.String("prefix", "k", "key prefix")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *conc < 1 || *n < 0 {
		fmt.Fprintf(stderr, "rbcast-kv verify: -n %d -c %d: want -c at least 1 and -n not negative\n", *n, *conc)
		return 2
	}
	var (
		mu       sync.Mutex
		wrong    int
		fail     error
		verified int
	)
	stop := func() bool { mu.Lock(); defer mu.Unlock(); return fail != nil }
	fanOut(c, *conc, *n, stop, func(k int, cl *kv.Client) func(i int) {
		return func(i int) {
			key, want := fmt.Sprintf("%s-%d", *prefix, i), fmt.Sprint(i)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			res, err := cl.Do(ctx, kv.Op{Kind: kv.OpGet, Key: key}, local)
			for local && err == nil && (res.Status != kv.StatusOK || string(res.Value) != want) && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
				if r, e := cl.Do(ctx, kv.Op{Kind: kv.OpGet, Key: key}, local); e == nil {
					res = r
				}
			}
			cancel()
			mu.Lock()
			switch {
			case err != nil:
				fail = fmt.Errorf("get %s: %w", key, err)
			case res.Status != kv.StatusOK || string(res.Value) != want:
				wrong++
				fmt.Fprintf(stdout, "%s: %v, want ok %q\n", key, res, want)
			default:
				verified++
			}
			mu.Unlock()
		}
	})
	if fail != nil {
		fmt.Fprintln(stderr, "rbcast-kv verify:", fail)
		return 2
	}
	fmt.Fprintf(stdout, "verified %d of %d keys\n", verified, *n)
	if wrong > 0 {
		return 1
	}
	return 0
}

// history runs N operations from -c clients at once, each one at a time:
// of a random key among -keys, 30 % gets, 40 % puts (of a value no other
// put writes), 10 % dels and 20 % cas (expecting the value the client
// last saw there). It prints every operation as a JSON line (a
// kv.HistoryOp, times in Unix nanoseconds: clients on one machine share
// the clock), including those no replica answered before -deadline
// (answered false: they may have been applied), so a test can check the
// history for linearizability. It exits 2 only on a usage error.
func history(c *kv.Client, args []string, deadline time.Duration, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rbcast-kv history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rbcast-kv -servers ADDR:PORT,... history -n N [-c CLIENTS] [-keys K] [-prefix P]\n\nN random gets, puts, dels and cas on K keys; prints each operation as a JSON line (kv.HistoryOp) for a linearizability check.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if cliflag.HelpAsked(args) {
		fs.SetOutput(stdout)
	}
	n := fs.Int("n", 100, "operations to run")
	conc := fs.Int("c", 1, "clients running at once (a session each)")
	keys := fs.Int("keys", 4, "keys to draw from (PREFIX-0 ...)")
	prefix := fs.String("prefix", "h", "key prefix")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *conc < 1 || *n < 0 || *keys < 1 {
		fmt.Fprintf(stderr, "rbcast-kv history: -n %d -c %d -keys %d: want -c and -keys at least 1 and -n not negative\n", *n, *conc, *keys)
		return 2
	}
	var (
		mu  sync.Mutex
		enc = json.NewEncoder(stdout)
		// Values are unique across runs of history: the process's tag,
		// the client's index, a count.
		tag = rand.Uint32()
	)
	fanOut(c, *conc, *n, nil, func(k int, cl *kv.Client) func(i int) {
		seen := map[string][]byte{}
		values := 0
		return func(int) {
			values++
			key := fmt.Sprintf("%s-%d", *prefix, rand.IntN(*keys))
			op := kv.Op{Key: key}
			switch d := rand.IntN(10); {
			case d < 3:
				op.Kind = kv.OpGet
			case d < 7:
				op.Kind = kv.OpPut
			case d < 8:
				op.Kind = kv.OpDelete
			default:
				op.Kind, op.Expect = kv.OpCAS, seen[key]
			}
			if op.Kind == kv.OpPut || op.Kind == kv.OpCAS {
				op.Value = fmt.Appendf(nil, "%08x-%d-%d", tag, k, values)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			call := time.Now().UnixNano()
			res, err := cl.Do(ctx, op, false)
			ret := time.Now().UnixNano()
			cancel()
			h := kv.HistoryOp{Client: cl.ID, Seq: cl.Seq(), Call: call, Op: op}
			if err != nil {
				fmt.Fprintf(stderr, "rbcast-kv history: %v\n", err)
			} else {
				h.Answered, h.Return, h.Result = true, ret, res
				if op.Kind == kv.OpGet || res.Status == kv.StatusMismatch {
					seen[key] = res.Value
				}
			}
			mu.Lock()
			enc.Encode(h)
			mu.Unlock()
		}
	})
	return 0
}

// fanOut runs n steps from conc clients at once: client 0 is c, the
// others new sessions to c's servers (closed before fanOut returns).
// worker(k, cl) gives client k's step function; each client calls its
// own with the next index not yet taken, one at a time, until all n are
// taken or stop (when not nil) says to stop.
func fanOut(c *kv.Client, conc, n int, stop func() bool, worker func(k int, cl *kv.Client) func(i int)) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next int
	)
	for k := range conc {
		cl := c
		if k > 0 {
			cl = &kv.Client{Servers: c.Servers, Timeout: c.Timeout}
			defer cl.Close()
		}
		step := worker(k, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || (stop != nil && stop()) {
					return
				}
				step(i)
			}
		}()
	}
	wg.Wait()
}
