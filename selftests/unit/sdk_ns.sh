#!/bin/bash
# selftests/unit/sdk_ns.sh - issue 38's conformance subset
# (selftests/conformance.list: the SDK's scenarios 1, both 3s, 4, 5, 6,
# 7 and personas.ts) through the SDK's NamespaceLauncher (`--isolation namespace`,
# Documentation/design.md "Namespace isolation"), on the host: no KVM.
# selftests/conformance.sh runs it, as it runs the same list through the
# VmLauncher in the harness (selftests/kvm/conformance.sh), the
# scenarios unchanged. Needs root (a loop device, a network namespace
# for the local world), Node.js 20+, the built SDK (tools/sdk-build) and
# the Debian image (make image), as `make test` makes them; skipped,
# saying which, without them.
set -u

# Installed as O/selftests/sdk_ns; run from the tree (run_all.sh's cwd),
# else from O's parent (build/ in the tree).
O=$(cd "$(dirname "$0")/.." && pwd)
vmm=${KILN_VMM:-$O/vmm}
[ -f sdk/package.json ] || cd "$O/.." || exit 1

skip() {
	echo "TAP version 13"
	echo "1..0 # SKIP $1"
	exit 4
}

[ "$(id -u)" = 0 ] || skip "not root: the image needs a loop device"
command -v node >/dev/null || skip "no node (Node.js 20 or later)"
images=${KILN_IMAGES:-$O/images}
[ -f "$images/debian-12-agent.json" ] ||
	skip "no $images/debian-12-agent.json (make image)"

[ -f sdk/dist/test/conformance.js ] ||
	skip "no sdk/dist/test/conformance.js (tools/sdk-build $O builds it)"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kiln-sdk-ns-XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
export KILN_VMM=$vmm KILN_IMAGES=$images
# The namespace launcher needs no kernel, initramfs or pins.json (issue
# 38): the guest directory it is given holds kiln-agent-ns alone, which
# its vmm finds there.
guest=${KILN_GUEST_DIR:-$O/guest}
mkdir "$scratch/guest" && ln -s "$guest/kiln-agent-ns" "$scratch/guest/" ||
	exit 1
export KILN_GUEST_DIR=$scratch/guest
export KILN_SDK_EXAMPLE_TIMEOUT=${KILN_SDK_EXAMPLE_TIMEOUT:-120}
export TMPDIR=$scratch
# No exec: the trap removes the scratch directory after.
selftests/conformance.sh "$O" namespace
