# Shared helpers for scripts/netns/{up,down,loss}; sourced, not run.
# Naming scheme (all names start with the prefix, which starts with "rb"):
#   ${PREFIX}br      bridge namespace        ${PREFIX}br0  bridge inside it
#   ${PREFIX}h<i>    host namespace i        eth0          host end of its veth
#   ${PREFIX}v<i>    bridge end of host i's veth, enslaved to ${PREFIX}br0
# and in a routed topology (up -r):
#   ${PREFIX}br1     the second segment's bridge, in ${PREFIX}br
#   ${PREFIX}rt      router namespace        eth0, eth1    its legs
#   ${PREFIX}r<s>    bridge end of the router's leg on segment s
#   /run/rbcast-netns/${PREFIX}/  the router's smcrouted (pid file, socket)

PROG=${0##*/}

die() {
	echo "$PROG: $*" >&2
	exit 2
}

# check_prefix PREFIX: rb + lowercase letters/digits, short enough that
# ${PREFIX}br0 and ${PREFIX}v249 fit the kernel's 15-byte interface name limit
# (IFNAMSIZ-1).
check_prefix() {
	local p=$1
	[[ $p =~ ^rb[a-z0-9]*$ ]] || die "bad prefix -p '$p': must start with 'rb' and contain only lowercase letters and digits"
	((${#p} <= 11)) || die "bad prefix -p '$p': at most 11 characters (interface names like ${p}br0 must fit in 15)"
}

# host_namespaces PREFIX: the host namespaces up made for PREFIX, in index order.
host_namespaces() {
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1h[0-9]+\$" | sort -V || true
}

# own_namespaces PREFIX: every namespace up makes for PREFIX (hosts, then
# the router, then the bridge).
own_namespaces() {
	host_namespaces "$1"
	ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "$1rt" || true
	ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "$1br" || true
}

# router_dir PREFIX: where the router's smcrouted keeps its pid file and
# socket.
router_dir() { echo "/run/rbcast-netns/$1"; }

# start_router PREFIX: smcrouted in PREFIXrt, forwarding the multicast
# ranges between eth0 and eth1; waits until it answers.
start_router() {
	local p=$1 dir
	dir=$(router_dir "$p")
	mkdir -p "$dir"
	cat >"$dir/smcroute.conf" <<CONF
phyint eth0 enable
phyint eth1 enable
mroute from eth0 group 239.0.0.0/8 to eth1
mroute from eth1 group 239.0.0.0/8 to eth0
CONF
	if [[ -d /proc/sys/net/ipv6 ]] && ip netns exec "${p}rt" sh -c '[ "$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6)" = 0 ]'; then
		cat >>"$dir/smcroute.conf" <<CONF
mroute from eth0 group ff05::/16 to eth1
mroute from eth1 group ff05::/16 to eth0
mroute from eth0 group ff0e::/16 to eth1
mroute from eth1 group ff0e::/16 to eth0
CONF
	fi
	ip netns exec "${p}rt" smcrouted -N -l err -i "rbcast-$p" -f "$dir/smcroute.conf" \
		-P "$dir/smcroute.pid" -u "$dir/smcroute.sock" ||
		die "smcrouted did not start in ${p}rt"
	local try
	for ((try = 0; ; try++)); do
		[[ -s $dir/smcroute.pid ]] && ip netns exec "${p}rt" smcroutectl -u "$dir/smcroute.sock" show routes >/dev/null 2>&1 && break
		((try < 100)) || die "smcrouted in ${p}rt did not answer within 5 s"
		sleep 0.05
	done
}

# stop_router PREFIX: stop the smcrouted start_router started (by the pid
# in its pid file) and remove its directory.
stop_router() {
	local dir pid
	dir=$(router_dir "$1")
	[[ -d $dir ]] || return 0
	if [[ -s $dir/smcroute.pid ]]; then
		pid=$(cat "$dir/smcroute.pid")
		if [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null; then
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
		fi
	fi
	rm -rf "$dir"
}
