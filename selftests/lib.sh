# shellcheck shell=bash
# selftests/lib.sh - sourced by run_all.sh and run_kvm.sh.
#
# Both scripts write one stream that run_all.sh parses. Besides each
# suite's own TAP it carries these marker lines (all TAP comments):
#   # kiln-selftest: NAME          a suite starts; its TAP follows
#   # kiln-selftest-exit: NAME RC  it ended with exit status RC
#   # kiln-selftest-time: NAME S   ...after S seconds (for the slowest list)
#   # kiln-error: MESSAGE          something that counts as one failure
#   # kiln-harness: CMD            run_all.sh starts the KVM suite
#   # kiln-harness-exit: NAME RC   ...and it ended with exit status RC
#   # kiln-harness-retry: WHY      the harness stalled: the suites it did
#                                  not finish run again (run_all.sh)
#   # kiln-run_kvm: done           run_kvm.sh reached its end

# A suite that hangs past its own per-test timeouts is killed: seconds.
: "${KILN_SUITE_TIMEOUT:=1500}"

# run_suite NAME CMD [ARGS...]: run one TAP-producing suite, stderr merged.
run_suite() {
	local name=$1 rc=0 t0=$SECONDS
	shift
	echo "# kiln-selftest: $name"
	timeout -k 10 "$KILN_SUITE_TIMEOUT" "$@" 2>&1 </dev/null || rc=$?
	echo "# kiln-selftest-exit: $name $rc"
	echo "# kiln-selftest-time: $name $((SECONDS - t0))"
	return "$rc"
}

# kvm_suites O: the KVM suites, one path a line, in the order they run:
# $O/selftests/kvm_* and every selftests/kvm/*.sh (which get O as argument).
kvm_suites() {
	local t
	# KILN_KVM_SCRIPTS: another directory of script suites ("" none),
	# for a test of run_all.sh itself on a fake tree.
	# kvm_*_long: make test-long's (kvm_long_suites), not make test's.
	for t in "$1"/selftests/kvm_* ${KILN_KVM_SCRIPTS-selftests/kvm}/*.sh; do
		case $t in *_long | *_long.sh) continue ;; esac
		[ -f "$t" ] && [ -x "$t" ] && echo "$t"
	done
	return 0
}

# kvm_long_suites O: the suites only make test-long runs (kvm_*_long and
# the script suites *_long.sh).
kvm_long_suites() {
	local t

	for t in "$1"/selftests/kvm_*_long ${KILN_KVM_SCRIPTS-selftests/kvm}/*_long.sh; do
		[ -f "$t" ] && [ -x "$t" ] && echo "$t"
	done
	return 0
}
