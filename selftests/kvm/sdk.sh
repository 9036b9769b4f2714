#!/bin/bash
# selftests/kvm/sdk.sh O - the TypeScript SDK's scenarios against real VMs.
#
# Runs each sdk/dist/examples/N-*.js (the seed's scenarios as written in
# sdk/examples/, built by tools/sdk-build) with node, one TAP test each:
# the example asserts what its scenario claims and exits non-zero when a
# claim fails. Its output is kept as TAP comments. Needs Node.js 20+ and
# KVM (run_kvm.sh runs it in the harness), the guest (make guest) and the
# Debian image (make image).
set -u

O=${1:-build}
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
O=$(cd "$O" && pwd) || exit 1

# A scenario past this many seconds has hung: it is killed and fails.
: "${KILN_SDK_EXAMPLE_TIMEOUT:=600}"

echo "TAP version 13"
# (No process substitution: the harness VM has no /dev/fd.)
shopt -s nullglob
examples=(sdk/dist/examples/[0-9]*-*.js)
if [ "${#examples[@]}" -eq 0 ]; then
	echo "1..1"
	echo "not ok 1 - sdk examples: none in sdk/dist/examples (tools/sdk-build $O builds them)"
	exit 1
fi
echo "1..${#examples[@]}"

# The harness's /tmp is the host's over virtio-fs: sockets and scratch
# directories go to the harness VM's own tmpfs (as run_kvm.sh sets).
export TMPDIR=${KILN_TEST_TMP:-${TMPDIR:-/tmp}}
export KILN_VMM=$O/vmm KILN_GUEST_DIR=$O/guest KILN_IMAGES=$O/images

status=0 n=0
for e in "${examples[@]}"; do
	n=$((n + 1))
	name=$(basename "$e" .js)
	t0=$SECONDS
	out=$(timeout -k 10 "$KILN_SDK_EXAMPLE_TIMEOUT" node "$e" 2>&1 </dev/null)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/# /'
	echo "# kiln-test-time: $name $((SECONDS - t0))"
	if [ "$rc" -eq 0 ]; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name (exit $rc)"
		status=1
	fi
done
exit "$status"
