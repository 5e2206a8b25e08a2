#!/usr/bin/env bash
# netns-example.sh: the lossy netns run of docs/debugging.md's worked example.
#
# Four rbcastd daemons on a namespace segment (scripts/netns/up), 5% random
# loss of rbcast frames arriving at every host (scripts/netns/loss, nftables
# here), each daemon capturing its interface (-capture); every member sends
# MSGS lines and a receiver at each member records what the daemon
# delivered (OUT/recv<host>.txt). Each daemon writes its own capture,
# OUT/h<host>.pcapng; pcap-replay reads them together. Every daemon keeps a
# 16 MiB flight recorder; host 1's is dumped with SIGUSR1 at the end
# (OUT/rbcast-flight-<time>.pcapng).
#
# usage: sudo cmd/pcap-replay/netns-example.sh [OUT] (from the repository root)
# env:   MSGS (default 300), LOSS (percent, default 5), ORDER (fifo|total,
#        default fifo), PREFIX (namespace prefix, default rbgex)
#
# Needs root and nft. Removes its namespaces on exit, also on failure.
set -euo pipefail

out=${1:-/tmp/rbcast-example}
msgs=${MSGS:-300}
loss=${LOSS:-5}
order=${ORDER:-fifo}
prefix=${PREFIX:-rbgex}
n=4
((EUID == 0)) || { echo "$0: needs root (namespaces, CAP_NET_RAW)" >&2; exit 2; }

mkdir -p "$out"
rm -f "$out"/h?.pcapng "$out"/recv?.txt "$out"/daemon?.log "$out"/h?.sock "$out"/rbcast-flight-*.pcapng "$out"/rbcast-invariant-*.pcapng
go build -o "$out/rbcastd" ./cmd/rbcastd
go build -o "$out/pcap-replay" ./cmd/pcap-replay

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/netns/down -p "$prefix" >/dev/null
}
trap cleanup EXIT

scripts/netns/up -n "$n" -p "$prefix" >/dev/null
scripts/netns/loss -p "$prefix" -e all in random "$loss"

daemons=()
for i in $(seq 0 $((n - 1))); do
	# Host 0 runs the registration server (member 0); the others are given
	# ids in the order their Joins arrive.
	node=()
	((i == 0)) && node=(-node 0)
	ip netns exec "${prefix}h$i" "$out/rbcastd" run -i eth0 -group 7 -members "$n" "${node[@]}" -order "$order" \
		-socket "$out/h$i.sock" -capture "$out/h$i.pcapng" -flight-recorder 16 -flight-dir "$out" \
		>"$out/daemon$i.log" 2>&1 &
	daemons+=($!)
	pids+=($!)
done
for i in $(seq 0 $((n - 1))); do
	for _ in $(seq 100); do [[ -S $out/h$i.sock ]] && break; sleep 0.05; done
done

recvs=()
for i in $(seq 0 $((n - 1))); do
	"$out/rbcastd" recv -socket "$out/h$i.sock" -all -o "$out/recv$i.txt" &
	recvs+=($!)
	pids+=($!)
done
sleep 1 # the receivers subscribe before anything is sent
senders=()
for i in $(seq 0 $((n - 1))); do
	seq 1 "$msgs" | sed "s/^/message from member $i, number /" |
		"$out/rbcastd" send -q -socket "$out/h$i.sock" -lines &
	senders+=($!)
	pids+=($!)
done
# send exits once every live member acknowledged every message it sent;
# then the receivers get the last deliveries and stop on SIGTERM.
for p in "${senders[@]}"; do wait "$p"; done
sleep 1
for p in "${recvs[@]}"; do kill -TERM "$p"; done
for p in "${recvs[@]}"; do wait "$p"; done
# Host 1's flight recorder: its last 16 MiB of frames, on SIGUSR1.
kill -USR1 "${daemons[1]}"
for _ in $(seq 100); do compgen -G "$out/rbcast-flight-*.pcapng" >/dev/null && break; sleep 0.05; done
sleep 0.2
for p in "${daemons[@]}"; do kill -TERM "$p"; done
for p in "${daemons[@]}"; do wait "$p" || true; done
pids=()

for i in $(seq 0 $((n - 1))); do
	echo "host $i: $(grep 'group started' "$out/daemon$i.log" | grep -o 'self=[0-9]*'), delivered $(wc -l <"$out/recv$i.txt") messages"
done
echo "captures: $(cd "$out" && ls h?.pcapng rbcast-flight-*.pcapng | tr '\n' ' ')"
