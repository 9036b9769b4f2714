#!/bin/bash
# selftests/conformance.sh O vm|namespace - issue 38's conformance subset
# (selftests/conformance.list) under one isolation, through the SDK's
# built-in launcher of that kind (sdk/dist/test/conformance.js): the one
# runner of both halves, so the list cannot drift between them. TAP on
# stdout; exit 4 (skip) when the launcher says it is unavailable here.
#
# As selftests/kvm/sdk.sh does, it runs in a network namespace of its
# own (unshare --net) with lo up and the local world's addresses on it
# (sdk/examples/local-world.ts): the vmms it starts open their upstream
# connections there, nothing reaches any other network. Needs root,
# Node.js 20+, the built SDK (tools/sdk-build O) and the Debian image
# (make image); the callers check and skip.
set -u

O=${1:?usage: conformance.sh O vm|namespace}
kind=${2:?usage: conformance.sh O vm|namespace}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
O=$(cd "$O" && pwd) || exit 1

: "${KILN_SDK_EXAMPLE_TIMEOUT:=600}"
export KILN_SDK_EXAMPLE_TIMEOUT
export KILN_VMM=${KILN_VMM:-$O/vmm} KILN_GUEST_DIR=${KILN_GUEST_DIR:-$O/guest}
export KILN_IMAGES=${KILN_IMAGES:-$O/images}

if ! unshare --net true 2>/dev/null; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - conformance: unshare --net failed: the scenarios need root for their network namespace"
	exit 1
fi

# The local world's addresses (TEST-NET-1 and -3, documentation only).
world="192.0.2.10 192.0.2.11 192.0.2.20 192.0.2.53 203.0.113.10"
# shellcheck disable=SC2016
exec unshare --net sh -c '
	ip link set lo up || exit 1
	for a in $0; do ip addr add "$a/32" dev lo || exit 1; done
	exec node sdk/dist/test/conformance.js "$@"' "$world" "$kind" \
	selftests/conformance.list sdk/dist/examples
