#!/usr/bin/env bash
# Installs what the tests need and a fresh machine may lack. Safe to run
# repeatedly; does nothing that is already done.
#   - Go modules (go mod download)
#   - as root: nftables (loss injection on kernels without netem),
#     iproute2 (ip netns, veth, bridge), tshark (the Wireshark dissector
#     test in capture/) and smcroute (multicast routing in the routed netns
#     topology, scripts/netns/up -r smcroute) from Debian packages
set -euo pipefail
cd "$(dirname "$0")/.."

go mod download

if [ "$(id -u)" != 0 ]; then
	echo "ensure-deps: not root; skipping system packages (real-network tests will skip)"
	exit 0
fi
missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v smcrouted >/dev/null 2>&1 || missing+=(smcroute)
if [ ${#missing[@]} -gt 0 ]; then
	echo "ensure-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# wireshark-common asks whether non-root users may capture; answer no
	# so the install never waits for input.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
