#!/bin/bash
# selftests/kvm/conformance.sh O - issue 38's conformance subset
# (selftests/conformance.list) through the SDK's VmLauncher: the microVM
# half of what selftests/unit/sdk_ns.sh runs on the host through the
# NamespaceLauncher (selftests/conformance.sh runs both). Needs KVM, so
# run_kvm.sh runs it in the harness; the guest (make guest), the Debian
# image (make image) and the built SDK (tools/sdk-build O).
set -u

O=${1:-build}
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
if [ ! -f sdk/dist/test/conformance.js ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - conformance: no sdk/dist/test/conformance.js (tools/sdk-build $O builds it)"
	exit 1
fi
# The harness's /tmp is the host's over virtio-fs: sockets and scratch
# directories go to the harness VM's own tmpfs (as run_kvm.sh sets).
export TMPDIR=${KILN_TEST_TMP:-${TMPDIR:-/tmp}}
exec selftests/conformance.sh "$O" vm
