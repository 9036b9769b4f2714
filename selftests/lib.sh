# shellcheck shell=bash
# selftests/lib.sh - sourced by run_all.sh and run_kvm.sh.
#
# Both scripts write one stream that run_all.sh parses. Besides each
# suite's own TAP it carries these marker lines (all TAP comments):
#   # kiln-selftest: NAME          a suite starts; its TAP follows
#   # kiln-selftest-exit: NAME RC  it ended with exit status RC
#   # kiln-error: MESSAGE          something that counts as one failure
#   # kiln-harness: CMD            run_all.sh starts the KVM suite
#   # kiln-harness-exit: NAME RC   ...and it ended with exit status RC
#   # kiln-run_kvm: done           run_kvm.sh reached its end

# A suite that hangs past its own per-test timeouts is killed: seconds.
: "${KILN_SUITE_TIMEOUT:=1200}"

# run_suite NAME CMD [ARGS...]: run one TAP-producing suite, stderr merged.
run_suite() {
	local name=$1 rc=0
	shift
	echo "# kiln-selftest: $name"
	timeout -k 10 "$KILN_SUITE_TIMEOUT" "$@" 2>&1 </dev/null || rc=$?
	echo "# kiln-selftest-exit: $name $rc"
	return "$rc"
}
