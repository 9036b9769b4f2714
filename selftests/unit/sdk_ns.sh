#!/bin/bash
# selftests/unit/sdk_ns.sh - the SDK's scenarios under --isolation namespace
# (Documentation/design.md, "Namespace isolation"), on the host: no KVM.
#
# The scenarios that need no network (1, both 3s, 4, 5: issue 38's
# conformance subset less 6, whose egress the namespace launcher does
# not have yet) run as selftests/kvm/sdk.sh runs them in the harness,
# sdk/dist/test/run-examples.js in one Node process, with KILN_VMM a
# wrapper that gives the vmm --isolation namespace after its
# subcommand: the SDK itself is unchanged. Needs root (a loop device),
# Node.js 20+, the built SDK (tools/sdk-build) and the Debian image
# (make image), as `make test` makes them; skipped, saying which,
# without them.
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
[ -f sdk/dist/test/run-examples.js ] ||
	skip "no sdk/dist (tools/sdk-build $O builds it)"
images=${KILN_IMAGES:-$O/images}
[ -f "$images/debian-12-agent.json" ] ||
	skip "no $images/debian-12-agent.json (make image)"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kiln-sdk-ns-XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
cat >"$scratch/vmm" <<EOS
#!/bin/sh
sub=\$1
shift
exec "$vmm" "\$sub" --isolation namespace "\$@"
EOS
chmod 0755 "$scratch/vmm"

export KILN_VMM=$scratch/vmm KILN_IMAGES=$images
export KILN_GUEST_DIR=${KILN_GUEST_DIR:-$O/guest}
export KILN_SDK_EXAMPLE_TIMEOUT=${KILN_SDK_EXAMPLE_TIMEOUT:-120}
export TMPDIR=$scratch
examples=()
for n in 1-run-one-command 3-bind-workspaces 3-virtual-workspaces \
	4-inspect-and-mutate 5-long-lived-and-interactive; do
	examples+=("sdk/dist/examples/$n.js")
done
node sdk/dist/test/run-examples.js "${examples[@]}"
