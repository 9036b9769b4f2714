#!/bin/bash
# selftests/run_all.sh [O] - run every Kiln selftest and summarise.
#
# 1. Every host-side test binary $O/selftests/* (not kvm_*), on the host.
# 2. The KVM suite, once: "tools/vmtest selftests/run_kvm.sh O", so the
#    harness VM boots a single time (vmtest runs it directly when the host
#    has hardware KVM). Without tools/vmtest it runs directly if /dev/kvm
#    exists; otherwise that is a failure, never a silent skip.
#
# Each suite's TAP is streamed under a "# kiln-selftest: NAME" header (the
# markers are listed in lib.sh). The TAP lines are counted across all
# suites; a suite that crashes, exits with an unexpected status or runs
# fewer tests than its plan counts as one more failure, as does a harness
# failure (vmtest exit 124/125). The last line is "N passed, N failed"
# (", N skipped" when N > 0). Exit 0 only when nothing failed and every
# suite ran.
set -u

O=${1:-build}
# O may be relative to the caller's directory; we run from the tree root.
[ -d "$O" ] && O=$(cd "$O" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=selftests/lib.sh
. selftests/lib.sh

host_suites() {
	local t found=0

	for t in "$O"/selftests/*; do
		if [ ! -f "$t" ] || [ ! -x "$t" ]; then
			continue
		fi
		case ${t##*/} in
		kvm_*) continue ;;
		esac
		found=$((found + 1))
		run_suite "$t" "$t"
	done
	[ "$found" -gt 0 ] ||
		echo "# kiln-error: no host selftests in $O/selftests (run make selftests)"
}

# Seconds one harness run may take: the KVM suites take minutes; each
# suite and test inside has its own, shorter timeout.
: "${KILN_HARNESS_TIMEOUT:=1200}"

# One run of the KVM suite in the harness; the harness's exit status.
harness_run() {
	local rc=0

	echo "# kiln-harness: tools/vmtest selftests/run_kvm.sh $O"
	tools/vmtest --timeout "$KILN_HARNESS_TIMEOUT" selftests/run_kvm.sh \
		"$O" 2>&1 </dev/null || rc=$?
	echo "# kiln-harness-exit: tools/vmtest $rc"
	return "$rc"
}

# The harness VM (nested SVM under TCG) has been seen to stall outright,
# no timeout inside it firing, while the same suites pass on the next
# boot. Such a stall ends as vmtest's own timeout (124): the suite runs
# once more, said so in the output, and only the second run counts. A
# test that fails is never retried.
kvm_suite() {
	local rc=0

	if [ -x tools/vmtest ]; then
		harness_run || rc=$?
		if [ "$rc" -eq 124 ]; then
			echo "# kiln-harness-retry: the harness VM made no progress" \
				"for ${KILN_HARNESS_TIMEOUT}s; running the KVM suite once more"
			harness_run || true
		fi
	elif [ -c /dev/kvm ]; then
		echo "# kiln-harness: selftests/run_kvm.sh $O (no tools/vmtest, host KVM)"
		selftests/run_kvm.sh "$O" 2>&1 </dev/null || rc=$?
		echo "# kiln-harness-exit: selftests/run_kvm.sh $rc"
	else
		echo "# kiln-error: KVM suite not run: no /dev/kvm and no tools/vmtest"
	fi
}

pass=0 fail=0 skip=0
failures=() flakes=()
# The suite being read: name, plan (-1: none yet), tests seen, failures.
cur='' plan=-1 seen=0 sfail=0
# The harness run: failure count when it started, run_kvm.sh finished;
# the counts to go back to should it be retried.
harness_mark=0 kvm_done=0 pass_mark=0 skip_mark=0 nfail_mark=0

failed() {
	fail=$((fail + 1))
	failures+=("$1")
}

suite_end() {
	local rc=$1 why=

	if [ "$plan" -lt 0 ] && [ "$seen" -eq 0 ]; then
		case $rc in
		4) skip=$((skip + 1)) ;;
		*) why="no TAP output (exit $rc)" ;;
		esac
	else
		if [ "$rc" -gt 128 ]; then
			why="killed by signal $((rc - 128))"
		elif [ "$rc" -eq 124 ]; then
			why="suite timed out after ${KILN_SUITE_TIMEOUT}s"
		elif [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] && [ "$rc" -ne 4 ]; then
			why="exit status $rc"
		elif [ "$rc" -eq 1 ] && [ "$sfail" -eq 0 ]; then
			why="exit status 1 without a failed test"
		fi
		if [ -z "$why" ] && [ "$plan" -ge 0 ] && [ "$seen" -ne "$plan" ]; then
			why="planned $plan tests, reported $seen"
		fi
	fi
	[ -z "$why" ] || failed "$cur: $why"
	cur='' plan=-1 seen=0 sfail=0
}

parse() {
	local line re_skip='#[[:space:]]*[Ss][Kk][Ii][Pp]'

	while IFS= read -r line; do
		printf '%s\n' "$line"
		case $line in
		"# kiln-selftest: "*)
			if [ -n "$cur" ]; then
				failed "$cur: ended without an exit status"
				suite_end 0
			fi
			cur=${line#"# kiln-selftest: "}
			;;
		"# kiln-selftest-exit: "*)
			[ -n "$cur" ] && suite_end "${line##* }"
			;;
		"# kiln-error: "*)
			failed "${line#"# kiln-error: "}"
			;;
		"# kiln-harness: "*)
			harness_mark=$fail kvm_done=0
			pass_mark=$pass skip_mark=$skip nfail_mark=${#failures[@]}
			;;
		"# kiln-harness-retry: "*)
			pass=$pass_mark skip=$skip_mark fail=$harness_mark
			failures=("${failures[@]:0:$nfail_mark}")
			cur='' plan=-1 seen=0 sfail=0
			;;
		*"kiln-harness-flake: "*)
			flakes+=("${cur:-?}: ${line#*kiln-harness-flake: }")
			;;
		"# kiln-run_kvm: done")
			kvm_done=1
			;;
		"# kiln-harness-exit: "*)
			harness_end "${line#"# kiln-harness-exit: "}"
			;;
		"ok "*)
			[ -n "$cur" ] || continue
			seen=$((seen + 1))
			if [[ $line =~ $re_skip ]]; then
				skip=$((skip + 1))
			else
				pass=$((pass + 1))
			fi
			;;
		"not ok "*)
			[ -n "$cur" ] || continue
			seen=$((seen + 1)) sfail=$((sfail + 1))
			failed "$cur: ${line#not ok }"
			;;
		1..*)
			[ -n "$cur" ] && [[ ${line#1..} =~ ^[0-9]+ ]] &&
				plan=${BASH_REMATCH[0]}
			;;
		esac
	done
}

# "NAME RC": the harness (or run_kvm.sh run directly) has exited.
harness_end() {
	local name=${1% *} rc=${1##* }

	if [ -n "$cur" ]; then
		failed "$cur: cut off (the harness ended mid-suite)"
		cur='' plan=-1 seen=0 sfail=0
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
		case $rc in
		124) failed "$name: timed out (exit 124)" ;;
		125) failed "$name: the harness failed (exit 125)" ;;
		*) failed "$name: exit status $rc" ;;
		esac
	elif [ "$kvm_done" -eq 0 ]; then
		failed "$name: selftests/run_kvm.sh did not complete"
	elif [ "$rc" -eq 1 ] && [ "$fail" -eq "$harness_mark" ]; then
		failed "$name: exit status 1 without a failed test"
	fi
}

parse < <(host_suites; kvm_suite)

# Tests the harness broke and that ran once more (ksft_blame_environment
# in selftests/kselftest.h, called by selftests/kvm/vmm_util.h): named, so
# a rising number is seen.
for f in "${flakes[@]}"; do
	echo "# HARNESS FLAKE, test run again: $f"
done
for f in "${failures[@]}"; do
	echo "# FAILED: $f"
done
summary="$pass passed, $fail failed"
[ "$skip" -eq 0 ] || summary+=", $skip skipped"
echo "$summary"
[ "$fail" -eq 0 ]
