#!/bin/bash
# selftests/kvm/sdk.sh O - the TypeScript SDK's scenarios against real VMs.
#
# Runs every sdk/dist/examples/N-*.js (the seed's scenarios as written in
# sdk/examples/, built by tools/sdk-build) in one Node process
# (sdk/dist/test/run-examples.js), one TAP test each: an example asserts
# what its scenario claims and throws when a claim fails; its output
# comes as TAP comments. Needs Node.js 20+, root and KVM (run_kvm.sh runs
# it in the harness), the guest (make guest) and the Debian image (make
# image).
#
# The process runs in a network namespace of its own (unshare --net),
# with lo up and the addresses of the network scenarios' local world on
# it (sdk/examples/local-world.ts: a resolver, upstreams, a token
# service). The vmms it starts open their upstream connections there:
# nothing reaches any other network.
set -u

O=${1:-build}
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
O=$(cd "$O" && pwd) || exit 1

# A scenario past this many seconds has hung: it fails, the rest are not run.
: "${KILN_SDK_EXAMPLE_TIMEOUT:=600}"
export KILN_SDK_EXAMPLE_TIMEOUT

# (No process substitution: the harness VM has no /dev/fd.)
shopt -s nullglob
examples=(sdk/dist/examples/[0-9]*-*.js)
# KILN_SDK_EXAMPLES="2 8": only the scenarios with those numbers.
if [ -n "${KILN_SDK_EXAMPLES:-}" ]; then
	picked=()
	for e in "${examples[@]}"; do
		n=${e##*/}
		case " $KILN_SDK_EXAMPLES " in
		*" ${n%%-*} "*) picked+=("$e") ;;
		esac
	done
	examples=("${picked[@]}")
fi
if [ "${#examples[@]}" -eq 0 ] || [ ! -f sdk/dist/test/run-examples.js ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - sdk examples: none in sdk/dist/examples (tools/sdk-build $O builds them)"
	exit 1
fi

# The harness's /tmp is the host's over virtio-fs: sockets and scratch
# directories go to the harness VM's own tmpfs (as run_kvm.sh sets).
export TMPDIR=${KILN_TEST_TMP:-${TMPDIR:-/tmp}}
export KILN_VMM=$O/vmm KILN_GUEST_DIR=$O/guest KILN_IMAGES=$O/images

if ! unshare --net true 2>/dev/null; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - sdk examples: unshare --net failed: the scenarios need root for their network namespace"
	exit 1
fi

# The local world's addresses (TEST-NET-1 and -3, documentation only).
world="192.0.2.10 192.0.2.11 192.0.2.20 192.0.2.53 203.0.113.10"
# shellcheck disable=SC2016
exec unshare --net sh -c '
	ip link set lo up || exit 1
	for a in $0; do ip addr add "$a/32" dev lo || exit 1; done
	exec node sdk/dist/test/run-examples.js "$@"' "$world" "${examples[@]}"
