#!/bin/bash
# selftests/run_kvm.sh [O [SUITE...]] - run the KVM selftests, one after
# the other.
#
# Runs $O/selftests/kvm_* and every executable selftests/kvm/*.sh (given
# O as argument), each a TAP-producing suite; with SUITEs (paths as
# kvm_suites in lib.sh prints them), only those, in that order: how
# run_all.sh resumes after a harness stall. Meant to run where KVM
# exists, normally as "tools/vmtest selftests/run_kvm.sh O" from
# run_all.sh, which parses the output (markers: see lib.sh).
# Exit status: 0 when every suite exited 0 (pass) or 4 (all skipped).
set -u

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 125
# shellcheck source=selftests/lib.sh
. selftests/lib.sh

O=${1:-build}
[ $# -eq 0 ] || shift
# The device the suites need; a test of run_all.sh itself names another.
: "${KILN_KVM_DEVICE:=/dev/kvm}"
status=0 found=0

if [ $# -gt 0 ]; then
	suites=("$@")
else
	mapfile -t suites < <(kvm_suites "$O")
fi

# The network tests make taps and attach the egress program to them: a
# host loads tun when /dev/net/tun is first opened (its static node, made
# by systemd) and the tc modules when the qdisc and filter are made; a
# harness VM, whose busybox init makes no static nodes, loads them by
# name. Best effort: a kernel with them built in has no such modules, and
# a kernel without them fails the network tests with the vmm's own error.
if [ "$(id -u)" -eq 0 ]; then
	for m in tun sch_ingress cls_bpf; do
		modprobe -q "$m" 2>/dev/null || true
	done
fi

# In the harness VM the tests' scratch directories go to its own tmpfs:
# its /tmp is the host's, over virtiofs (selftests/kvm/test_tmp.h).
if [ -n "${KILN_IN_HARNESS:-}" ] && [ -z "${KILN_TEST_TMP:-}" ] &&
	[ -d /dev/shm ] && [ -w /dev/shm ]; then
	export KILN_TEST_TMP=/dev/shm
fi

if [ ! -c "$KILN_KVM_DEVICE" ]; then
	echo "# kiln-error: run_kvm.sh: no $KILN_KVM_DEVICE on $(uname -n):" \
		"the KVM tests would only skip"
	status=1
fi

# The leftover vmms: their command name and the signal that stops them.
# A test of this script itself names a stand-in and a signal it survives
# (selftests/unit/run_all.c), as SIGKILL cannot be survived on purpose.
vmm_comm=${KILN_RUN_KVM_VMM_COMM:-vmm}
leftover_signal=${KILN_RUN_KVM_LEFTOVER_SIGNAL:-KILL}

# Of the pids "$1", those still there (not zombies) after 10 s.
wait_gone() {
	local p i left
	for ((i = 0; i < 100; i++)); do
		left=
		for p in $1; do
			[ -d "/proc/$p" ] &&
				! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null &&
				left+="${left:+ }$p"
		done
		[ -n "$left" ] || return 0
		sleep 0.1
	done
	echo "$left"
}

# Each thread of the pids "$1": state, wait channel, kernel stack.
show_stuck() {
	local p d
	for p in $1; do
		for d in /proc/"$p"/task/*; do
			echo "# kiln-harness-stuck: vmm $p thread ${d##*/}:" \
				"$(awk '/^State:/ { print $2 }' "$d/status" 2>/dev/null)," \
				"wait $(cat "$d/wchan" 2>/dev/null)"
			sed "s/^/# kiln-harness-stuck:   /" "$d/stack" 2>/dev/null
		done
	done
}

for t in "${suites[@]}"; do
	if [ ! -f "$t" ] || [ ! -x "$t" ]; then
		echo "# kiln-error: run_kvm.sh: no KVM suite $t"
		status=1
		continue
	fi
	found=$((found + 1))
	rc=0
	# The first suite of a resumed run leaves out its tests that ended
	# before the last harness went away (run_all.sh, kvm_suite).
	skip=()
	if [ "$found" -eq 1 ]; then
		for n in ${KILN_RESUME_ENDED:-}; do
			skip+=(-x "$n")
		done
	fi
	case $t in
	*.sh) run_suite "$t" "$t" "$O" || rc=$? ;;
	*) run_suite "$t" "$t" "${skip[@]}" || rc=$? ;;
	esac
	[ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || status=1
	# A vmm a suite left behind starves the harness's CPUs (suspected
	# cause of whole-harness stalls): report it as a failure, stop it.
	left=$(pgrep -d ' ' -x "$vmm_comm" || true)
	if [ -n "$left" ]; then
		kill -s "$leftover_signal" $left 2>/dev/null || true
		# SIGKILL ends a process unless one of its threads is stuck in
		# the kernel, which no process can do to itself. ci49 had a
		# vCPU thread spinning in the harness kernel: it survived, held
		# a CPU for the rest of the run and was reported after every
		# later suite. Such a harness runs nothing more: its threads'
		# kernel stacks are shown, and the exit status is the one
		# run_all.sh gives the unfinished suites a fresh harness for
		# (counted as a harness stall in the summary).
		stuck=$(wait_gone "$left")
		if [ -n "$stuck" ]; then
			show_stuck "$stuck"
			echo "# kiln-harness-stuck: vmm $stuck survived SIGKILL" \
				"after $t: a thread stuck in the harness kernel;" \
				"this harness runs no more suites"
			exit 125
		fi
		echo "# kiln-error: $t left vmm processes running: $left"
		status=1
	fi
done

if [ "$found" -eq 0 ]; then
	echo "# kiln-error: run_kvm.sh: no KVM selftests in $O/selftests" \
		"(run make selftests)"
	status=1
fi
echo "# kiln-run_kvm: done"
exit "$status"
