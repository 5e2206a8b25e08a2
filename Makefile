# rbcast — see README.md. `make demo` and `make test` are the two commands
# a fresh clone needs.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 30s
BENCHTIME ?= 2s

.PHONY: all build demo test test-short soak bench bench-net bench-peers bench-udp bench-rbcastd bench-views bench-auth bench-liu bench-levels bench-kv fuzz lint deps clean

all: build

deps:
	@./scripts/ensure-deps.sh

build:
	$(GO) build $(PKGS)

# The main job on its embedded default: an 8-member group on the simulated
# lossy segment. No root needed.
demo:
	$(GO) run ./cmd/rbcast-sim

# Unit, simulation, fuzz-seed and (as root) real-network tests, with the
# race detector. Tests that need root skip with a message when not root.
# The allocation counts skip under the race detector (it allocates on its
# own account), so they run once more without it. The mutation tests
# (docs/dsm.md, "Mutations") need the dsmmutate build tag.
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(GO) test -count=1 -tags dsmmutate -run '^TestMutation' ./dsm
	$(GO) test -count=1 -run '^(TestSteadyStateAllocs|TestWriteAllocs|TestSolveAllocatesNoMatrix)$$' ./internal/daemon ./orca ./orca/examples/asp

# Without the race detector, for a quick loop.
test-short:
	$(GO) test -count=1 -short $(PKGS)

# Many more simulation seeds than `make test` runs (SEEDS per protocol);
# a failing seed prints the command that re-runs it alone.
SEEDS ?= 20000
soak:
	RBCAST_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 60m -run 'TestSim$$|TestTotalSim$$' ./reliable/pbp ./reliable/seq ./reliable ./orca

# Micro-benchmarks (no root): codec, simulator, capture, the protocol cores
# alone, and the runtime's goodput on the simulator (one fixed scenario per
# sub-benchmark, hence 1x).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./frame ./testnet ./capture ./reliable/pbp ./reliable/seq
	$(GO) test -run '^$$' -bench SimGoodput -benchtime 1x ./reliable
	$(GO) test -run '^$$' -bench SimAlltoall -benchtime 1x ./reliable/pcode
	$(GO) test -run '^$$' -bench 'Read|WriteLocal' -benchmem ./orca
	@echo "The thesis's experiments on the netns bridge (PBP2, PBP1, TCP fan-out, raw ring; root, about 35 minutes): sudo make bench-net"

# Real-network benchmarks (root; builds and removes rb… namespaces): the
# PBP tables of docs/benchmarks.md (one-to-all, 64-byte messages, windows,
# all-to-all, latency; PBP2, PBP1, TCP fan-out and the raw ring ceiling back
# to back, REPS repetitions, medians; written to bench-net.md too), then the
# link-layer tables. About 35 minutes; run it on an otherwise idle machine.
REPS ?= 3
bench-net:
	RBCAST_REPORT_REPS=$(REPS) RBCAST_REPORT_OUT=$(CURDIR)/bench-net.md $(GO) test -run '^$$' -bench '^BenchmarkReport$$' -benchtime 1x -timeout 120m ./reliable
	$(GO) run ./cmd/linkbench

# The figures of docs/benchmarks.md (docs/img/*.svg) from BenchmarkReport's
# reports under docs/data/, oldest first: each figure comes from the newest
# report that has its table. After a `sudo make bench-net`, copy bench-net.md
# to docs/data/run-N.md (the next run number) and run this. No root needed.
# bench/files/run -o REPORT writes the files' fig. 5a: copy it to docs/data/files-N.md.
BENCH_REPORTS ?= $(shell ls -v docs/data/run-*.md docs/data/files-*.md 2>/dev/null)
.PHONY: plots bench-pcode bench-pcode-targets
plots:
	$(GO) run ./cmd/benchplot -o docs/img $(BENCH_REPORTS)

# The peers of issue 4 on the same 3-host netns segment (root; installs the
# Debian packages if missing, builds and removes rbf… namespaces): corosync
# CPG agreed order (knet, udpu), JGroups 2.12 SEQUENCER as shipped and
# without bundling. 5 repeats each, medians; about 8 minutes. See
# docs/benchmarks.md.
# Issue 20: one file to every member, rbcastd sendfile against UFTP,
# udpcast and TCP fan-out on the netns segment (root; installs uftp and
# udpcast if missing; rbf… namespaces). FILES_ARGS passes bench/files/run's
# flags (-h lists them); the defaults take about 20 minutes.
FILES_ARGS ?=
.PHONY: bench-files
bench-files:
	command -v uftp >/dev/null && command -v udp-sender >/dev/null || apt-get install -y uftp udpcast
	bench/files/run $(FILES_ARGS)

bench-peers:
	bench/peers/ensure-deps
	bench/peers/run-corosync
	bench/peers/run-corosync -t udpu
	bench/peers/run-jgroups
	bench/peers/run-jgroups -U

# rbcast over UDP (issue 26, docs/udp.md; root, builds and removes rbe…
# and rbfnorm namespaces, installs smcroute and NORM if missing): PBP2
# one-to-all over link/udp multicast (GSO on and off) and unicast fan-out
# beside the raw ring, PBP2 on the ring and TCP fan-out, on one segment
# and across the routed topology (bench-udp.md), then against NORM's
# normMsgr across the router with 2 and 7 receivers (appended). About 25
# minutes; run it on an otherwise idle machine.
bench-udp:
	RBCAST_REPORT_REPS=$(REPS) RBCAST_REPORT_OUT=$(CURDIR)/bench-udp.md $(GO) test -run '^$$' -bench '^BenchmarkUDPReport$$' -benchtime 1x -timeout 120m ./reliable
	bench/peers/ensure-deps
	bench/peers/run-norm -r $(REPS) | tee -a $(CURDIR)/bench-udp.md

# docs/benchmarks.md, "rbcastd": the daemon against the library it runs, in
# one run on one 3-host netns segment (cmd/rbcastd BenchmarkReport: goodput,
# send FILE to two recv -o FILE, 64-byte messages, FIFO and total-order
# latency, 3 senders in total order; REPS repetitions, MTU 1500 and 9000),
# then corosync CPG (knet, udpu) on the same shape of segment. Root; about
# 15 minutes on an idle machine; writes bench-rbcastd.md.
bench-rbcastd:
	RBCASTD_REPORT_REPS=$(REPS) RBCASTD_REPORT_OUT=$(CURDIR)/bench-rbcastd.md $(GO) test -run '^$$' -bench '^BenchmarkReport$$' -benchtime 1x -timeout 90m ./cmd/rbcastd
	bench/peers/ensure-deps
	{ echo; echo '### corosync CPG, same run (bench/peers/run-corosync: 3 hosts, 1000-byte messages)'; echo; echo '```'; \
	  bench/peers/run-corosync -r $(REPS); bench/peers/run-corosync -t udpu -r $(REPS); echo '```'; } | tee -a bench-rbcastd.md

# docs/benchmarks.md, "View changes" (issue 19): rbcastd under views on a
# 4-host netns segment (cmd/rbcastd BenchmarkNetnsViews, prefix rbm: join
# latency, kill -9 to the new view at -failure-timeout 1s and 300ms, the
# stable receiver's stall), then corosync's confchg for the same join and
# kill (bench/peers/run-corosync-views: token 1000 and 300 ms without the
# per-node coefficient, and corosync's defaults), VIEWS_N of each. Root;
# about 5 minutes at VIEWS_N=10; writes bench-views.md.
VIEWS_N ?= 10
bench-views:
	{ echo '```'; $(GO) test -run '^$$' -bench '^BenchmarkNetnsViews$$' -benchtime $(VIEWS_N)x -timeout 30m ./cmd/rbcastd; echo '```'; } | tee bench-views.md
	bench/peers/ensure-deps
	{ echo; echo '```'; bench/peers/run-corosync-views -r $(VIEWS_N) -T 1000 -C 0; bench/peers/run-corosync-views -r $(VIEWS_N) -T 300 -C 0; \
	  bench/peers/run-corosync-views -r $(VIEWS_N); echo '```'; } | tee -a bench-views.md

# docs/benchmarks.md, "Authenticated groups" (issue 25): PBP2 one-to-all
# goodput without a key, with the MAC and encrypted, at MTU 1500 and 9000,
# CPU-seconds per GB, one-way latency p50 (reliable BenchmarkAuthReport;
# REPS repetitions, medians; writes bench-auth.md), then corosync CPG over
# knet without crypto and with aes256/sha256 on the same shape of segment
# (appended). Root; about 10 minutes on an idle machine. LAT_REPS: the
# latency rows' repetitions (default REPS).
bench-auth:
	RBCAST_REPORT_REPS=$(REPS) RBCAST_AUTH_LAT_REPS=$(LAT_REPS) RBCAST_REPORT_OUT=$(CURDIR)/bench-auth.md $(GO) test -run '^$$' -bench '^BenchmarkAuthReport$$' -benchtime 1x -timeout 60m ./reliable
	bench/peers/ensure-deps
	{ echo; echo '### corosync CPG over knet, same run (bench/peers/run-corosync: 3 hosts, 1000-byte messages; CPU µs per message = CPU-s per GB ordered)'; echo; echo '```'; \
	  bench/peers/run-corosync -r $(REPS); bench/peers/run-corosync -c aes256:sha256 -r $(REPS); echo '```'; } | tee -a bench-auth.md

# docs/benchmarks.md, "Replicated key-value service" (issue 23): three
# rbcast-kv replicas against three etcd members (Debian etcd-server,
# installed when missing) on the same 4-host netns segment, the same load
# (KV_N puts of 128-byte values from KV_C clients, one put at a time each),
# REPS runs each; then REPS failovers (replica 0 killed under one client).
# Root; about 5 minutes at the defaults; writes bench-kv.md.
KV_N ?= 20000
KV_C ?= 32
bench-kv:
	bench/kv/run -r $(REPS) -n $(KV_N) -c $(KV_C) | tee bench-kv.md

# docs/benchmarks.md, "Liu's tables": the measurements of Liu's thesis,
# chapter 6: the distributed CPU task (Tables 6.1-6.3) and message passing
# (6.4-6.7), unicast and every delivery level to 1-8 children, 900-byte
# messages. Root; about 2 minutes a repetition (REPS); bench-liu.md.
bench-liu:
	RBCAST_REPORT_REPS=$(REPS) RBCAST_REPORT_OUT=$(CURDIR)/bench-liu.md $(GO) test -run '^$$' -bench '^BenchmarkLiuTables$$' -benchtime 1x -timeout 60m ./reliable

# docs/benchmarks.md, "Delivery levels": goodput and one-way latency of a
# group with views at FIFO, Agreed and Safe beside the registered PBP2
# group, MTU 1500 and 9000, REPS times interleaved (medians). Root; about
# 45 s per repetition (REPS=3: 2 min 10 s idle); bench-levels.md.
bench-levels:
	RBCAST_BENCH_SECONDS=3 RBCAST_REPORT_REPS=$(REPS) RBCAST_REPORT_OUT=$(CURDIR)/bench-levels.md $(GO) test -run '^$$' -bench '^BenchmarkLevels$$' -benchtime 1x -timeout 30m ./reliable

# PCODE (issue 24; root, builds and removes rbpb… namespaces, OpenMPI
# needed for the MPI column): all-to-all, 1000 rounds, N = 2, 4, 8, 20 B
# to 8 KB, loss 0, 1, 5 %: PCODE (both drivers of the paper), a TCP mesh
# (both), PBP2 with and without Expect, MPI_Allgather; then jacobi and cg
# with and without Expect in their barriers. Writes bench-pcode.md. Hours
# with every cell; run it on an otherwise idle machine.
bench-pcode:
	bench/alltoall/run | tee $(CURDIR)/bench-pcode.md

# Only the cells issue 24's targets need, and the targets computed from
# them (bench/alltoall/targets): all-to-all at N = 2, 4, 8, 1 KB and 20 B,
# loss 0 and 1 %, 1000 rounds, pcode, tcp1, tcp2, pbp2, pbp2-expect, mpi;
# jacobi and cg with and without Expect at 0 and 1 %, 3 runs. Root; about
# 10 minutes (4 of them tcp1's rounds under loss, which wait for TCP's
# retransmission timeouts). Writes bench-pcode-targets.md.
bench-pcode-targets:
	bench/alltoall/targets | tee $(CURDIR)/bench-pcode-targets.md

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	$(GO) clean -testcache
