# Shared helpers for bench/peers/run-*; sourced, not run.
# The topology is the one every rbcast netns benchmark uses:
#   scripts/netns/up -n 3 -a -p PREFIX   (bridge, veths, MTU 1500)
# -a gives host i the address 10.77.0.(i+1)/24 on eth0.

PROG=${0##*/}
PEERS_DIR=$(dirname "$(readlink -f "$0")")
REPO=$(readlink -f "$PEERS_DIR/../..")
NETNS=$REPO/scripts/netns

die() {
	echo "$PROG: $*" >&2
	exit 2
}

log() { echo "$PROG: $*" >&2; }

# busy_snapshot: "busy total" jiffies of the whole machine from /proc/stat.
busy_snapshot() {
	awk '/^cpu /{idle=$5+$6; t=0; for(i=2;i<=NF;i++) t+=$i; print t-idle, t}' /proc/stat
}

# busy_pct BEFORE AFTER: % of all CPUs busy between two busy_snapshot outputs.
busy_pct() {
	local b0 t0 b1 t1
	read -r b0 t0 <<<"$1"
	read -r b1 t1 <<<"$2"
	awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN{ if (t > 0) printf "%.0f", 100*b/t; else print "?" }'
}

# cpu_seconds PID...: user+system CPU seconds the processes (all their
# threads) have used so far, from /proc/PID/stat.
cpu_seconds() {
	local p t=0
	for p; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
	awk -v t=$t -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.3f", t/hz}'
}

# loadavg1: the 1-minute load average.
loadavg1() { cut -d' ' -f1 /proc/loadavg; }

# median: the median of the numbers on stdin (one per line); "-" if none.
median() {
	sort -g | awk '{a[NR]=$1} END{ if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2 }'
}

# field KEY LINE...: the value of KEY=value in the given key=value line(s).
field() {
	local k=$1
	shift
	printf '%s\n' "$@" | tr ' ' '\n' | sed -n "s/^$k=//p"
}

# check_args: validate the common options.
check_common() {
	[[ $repeats =~ ^[1-9][0-9]*$ ]] || die "bad -r '$repeats': want a positive integer"
	[[ $dur =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bad -d '$dur': want seconds"
	[[ $bytes =~ ^[0-9]+$ ]] && ((bytes >= 24 && bytes <= 60000)) || die "bad -b '$bytes': want 24..60000"
	[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "bad -n '$rounds': want a positive integer"
	[[ $prefix =~ ^rbf[a-z0-9]*$ ]] && ((${#prefix} <= 11)) ||
		die "bad -p '$prefix': want rbf + lowercase letters/digits, <= 11 chars"
	((EUID == 0)) || die "needs root (network namespaces)"
}

# topology_up PREFIX: the 3-host segment with addresses, plus a multicast
# route on every host (JGroups' UDP sends to 228.x/232.x).
topology_up() {
	local p=$1 i
	"$NETNS/up" -n 3 -a -p "$p" >/dev/null
	for i in 0 1 2; do
		ip -n "${p}h$i" route add 224.0.0.0/4 dev eth0
	done
}
