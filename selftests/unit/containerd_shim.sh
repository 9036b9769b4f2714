#!/bin/bash
# selftests/unit/containerd_shim.sh - the containerd shim's Go unit tests
# (tools/containerd-shim-kiln-v2/spec_test.go: the OCI spec to
# container.create and spawn params, the io.kiln.* annotations, the VM's
# size and command line, exit statuses, the metrics' cgroup v2 shape) as
# a TAP suite: one TAP test per Go test, its log as comments.
set -u
O=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$O/obj/containerd-shim-kiln-v2.test

echo "TAP version 13"
if [ ! -x "$bin" ]; then
	echo "1..1"
	echo "not ok 1 - containerd shim unit tests: no $bin (make selftests builds it)"
	exit 1
fi
names=$("$bin" -test.list '.*') || {
	echo "1..1"
	echo "not ok 1 - containerd shim unit tests: $bin -test.list failed"
	exit 1
}
n=$(wc -w <<<"$names")
echo "1..$n"
i=0 status=0
for t in $names; do
	i=$((i + 1))
	out=$("$bin" -test.run "^$t\$" -test.v 2>&1)
	rc=$?
	sed 's/^/# /' <<<"$out"
	if [ $rc -eq 0 ] && grep -q -- "--- PASS: $t " <<<"$out"; then
		echo "ok $i - $t"
	else
		echo "not ok $i - $t"
		status=1
	fi
done
exit $status
