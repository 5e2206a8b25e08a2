# Shared helpers for scripts/netns/{up,down,loss}; sourced, not run.
# Naming scheme (all names start with the prefix, which starts with "rb"):
#   ${PREFIX}br      bridge namespace        ${PREFIX}br0  bridge inside it
#   ${PREFIX}h<i>    host namespace i        eth0          host end of its veth
#   ${PREFIX}v<i>    bridge end of host i's veth, enslaved to ${PREFIX}br0

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

# own_namespaces PREFIX: every namespace up makes for PREFIX (hosts, then the bridge).
own_namespaces() {
	host_namespaces "$1"
	ip netns list 2>/dev/null | awk '{print $1}' | grep -Fx "$1br" || true
}
