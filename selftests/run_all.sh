#!/bin/bash
# selftests/run_all.sh [O] - run every Kiln selftest and summarise.
#
# 1. Every host-side test binary $O/selftests/* (not kvm_*), on the host.
# 2. The KVM suites: "tools/vmtest selftests/run_kvm.sh O SUITE...", so
#    each harness VM boots a single time (vmtest runs it directly when the
#    host has hardware KVM); where the host has the CPUs for it, two or
#    more harness VMs side by side, each with its share of the suites
#    (lanes, kvm_suite); again, for the suites not finished, only if a
#    harness stalled (lane_run). Without tools/vmtest they run directly if
#    /dev/kvm exists; otherwise that is a failure, never a silent skip.
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
# The binaries under test are O's, whatever O is (make test SAN=1
# O=build-san): the host suites default to build/'s, which may be stale.
export KILN_VMM=${KILN_VMM:-$O/vmm}
export KILN_VMMCTL=${KILN_VMMCTL:-$O/vmmctl}
export KILN_AGENT_HOST=${KILN_AGENT_HOST:-$O/guest/kiln-agent-host}
# The KVM suites read the guest and images from build/ unless told; the
# vmm itself finds O's guest from where it runs (its build tree).
if [ "$O" != "$PWD/build" ]; then
	export KILN_GUEST_DIR=${KILN_GUEST_DIR:-$O/guest}
	export KILN_IMAGES_DIR=${KILN_IMAGES_DIR:-$O/images}
fi
# shellcheck source=selftests/lib.sh
. selftests/lib.sh

# The host suites get a verification cache of their own (KILN_CACHE, a
# directory removed afterwards): their restores and image checks must not
# fill the user's cache (Documentation/rootfs.md, "The verification cache").
#
# host_suites parallel|serial: the host suites that run while the harness
# runs the KVM suites, or those that run after it: the ones named in
# HOST_AFTER_HARNESS, which boot harness VMs of their own and so would
# only wait for the harness lock meanwhile.
HOST_AFTER_HARNESS=" vmtest "
host_suites() {
	local t found=0 cache name after

	cache=$(mktemp -d "${TMPDIR:-/tmp}/kiln-unit-cache-XXXXXX") || {
		echo "# kiln-error: mktemp for the host suites' cache failed"
		return
	}
	for t in "$O"/selftests/*; do
		if [ ! -f "$t" ] || [ ! -x "$t" ]; then
			continue
		fi
		name=${t##*/}
		case $name in
		kvm_*) continue ;;
		esac
		found=$((found + 1))
		case $HOST_AFTER_HARNESS in
		*" $name "*) after=serial ;;
		*) after=parallel ;;
		esac
		[ "$after" = "$1" ] || continue
		KILN_CACHE=$cache run_suite "$t" "$t"
	done
	rm -rf "$cache"
	[ "$found" -gt 0 ] || [ "$1" = serial ] ||
		echo "# kiln-error: no host selftests in $O/selftests (run make selftests)"
}

# Seconds one harness run may take: the KVM suites take minutes; each
# suite and test inside has its own, shorter timeout, and vmtest's
# watchdog ends a harness that stops making progress long before this.
: "${KILN_HARNESS_TIMEOUT:=2400}"
# Harness runs at most in a lane, the first included (see lane_run).
: "${KILN_HARNESS_ATTEMPTS:=4}"
# The harness command; a test of this script names a fake one.
: "${KILN_VMTEST:=tools/vmtest}"

# The output of the lane's last harness run (lane_run makes the file).
log=

# One harness run of the KVM suites "$@" (all of them when none are
# given), its output also saved in file $log; the harness's exit status.
harness_run() {
	local rc

	echo "# kiln-harness: $KILN_VMTEST selftests/run_kvm.sh $O${1:+ ($# suites${KILN_HARNESS_LANE:+, lane $KILN_HARNESS_LANE})}"
	"$KILN_VMTEST" --timeout "$KILN_HARNESS_TIMEOUT" selftests/run_kvm.sh \
		"$O" "$@" 2>&1 </dev/null | tee "$log"
	rc=${PIPESTATUS[0]}
	echo "# kiln-harness-exit: $KILN_VMTEST $rc"
	return "$rc"
}

# The tests of suite $1 that ended (ok or not ok) in the run saved in
# $log, one name a line: those a resumed run leaves out.
ended_tests() {
	awk -v p="# kiln-selftest: $1" '
		$0 == p { in_suite = 1; n = 0; next }
		/^# kiln-selftest: / { in_suite = 0 }
		in_suite && /^ok / { done[n++] = $3 }
		in_suite && /^not ok / { done[n++] = $4 }
		END { for (i = 0; i < n; i++) print done[i] }' "$log"
}

# The suites of "$@" that the run saved in $log did not finish, in order.
unfinished() {
	local t
	for t in "$@"; do
		awk -v p="# kiln-selftest-exit: $t " \
			'index($0, p) == 1 { done = 1 } END { exit !done }' "$log" ||
			echo "$t"
	done
}

# lane_run SUITE...: the lane's harness runs. The harness VM (nested SVM
# under TCG) has been seen to stall outright (no timeout inside it fires)
# and its kernel to crash, while the same suites pass on the next boot. vmtest's watchdog (or its timeout) ends
# a stalled run with 124, a crashed one ends with 125. The suites it did
# not finish then run again in a fresh harness, said so in the output.
# The one it cut off resumes: its tests that had ended (passed or
# failed) keep their results and are left out (run_kvm.sh passes them
# to the binary as -x NAME in KILN_RESUME_ENDED), so a crash costs the
# test it interrupted, not the whole suite; a suite that is a script
# runs again from its start, and only that run of it counts. At most
# KILN_HARNESS_ATTEMPTS runs. A test that fails is never retried here
# (see ksft_blame_environment for what is).
lane_run() {
	local rc=0 attempt=1 suites ended='' ended_in='' resume

	log=$(mktemp /tmp/kiln-harness.XXXXXX) || {
		echo "# kiln-error: mktemp for the harness log failed"
		return
	}
	trap 'rm -f "$log"' EXIT
	suites=("$@")
	while :; do
		rc=0
		KILN_RESUME_ENDED=$ended harness_run "${suites[@]}" || rc=$?
		[ "$rc" -eq 124 ] || [ "$rc" -eq 125 ] || break
		mapfile -t suites < <(unfinished "${suites[@]}")
		[ "${#suites[@]}" -gt 0 ] || break
		[ "$attempt" -lt "$KILN_HARNESS_ATTEMPTS" ] || break
		attempt=$((attempt + 1))
		# A resumed suite cut off again keeps what ended in both runs.
		[ "${suites[0]}" = "$ended_in" ] || ended=
		ended_in=${suites[0]}
		case $ended_in in
		*.sh) ended= ;;
		*)
			# shellcheck disable=SC2046,SC2086 # names, a word each
			ended=$(printf '%s\n' $ended $(ended_tests "$ended_in") |
				awk 'NF && !seen[$0]++' | tr '\n' ' ')
			;;
		esac
		resume=
		[ -z "$ended" ] ||
			resume="; resuming: the $(wc -w <<<"$ended") tests of ${ended_in##*/} that had ended keep their results"
		echo "# kiln-harness-retry: the harness VM stalled, timed out" \
			"or failed (exit $rc) in $ended_in;" \
			"the ${#suites[@]} suites it did not finish run again" \
			"(run $attempt of at most $KILN_HARNESS_ATTEMPTS)$resume"
	done
	rm -f "$log"
}

# kvm_suite_cost SUITE: about how many seconds the KVM suite takes in a
# harness VM of one CPU (ci56, 2026-12-04), 60 for one not listed: what
# shares the suites among the lanes. A stale figure costs minutes, never
# a result.
kvm_suite_cost() {
	case ${1##*/} in
	kvm_bind_nofile) echo 120 ;;
	kvm_rootfs_long) echo 440 ;;
	sdk.sh) echo 100 ;;
	conformance.sh) echo 110 ;;
	ns_cgroup.sh) echo 15 ;;
	kvm_control) echo 310 ;;
	kvm_net) echo 290 ;;
	kvm_net_hook) echo 35 ;;
	kvm_virtiofs) echo 235 ;;
	kvm_rootfs) echo 210 ;;
	kvm_operator) echo 80 ;;
	kvm_vmm_boot) echo 95 ;;
	kvm_harness_watch) echo 90 ;;
	kvm_die_with_parent) echo 90 ;;
	kvm_hostile) echo 60 ;;
	kvm_seams_guest) echo 60 ;;
	kvm_intercept_ca) echo 20 ;;
	kvm_virtual_stream) echo 20 ;;
	kvm_vsock) echo 15 ;;
	kvm_jail) echo 10 ;;
	kvm_net_dns_hook) echo 5 ;;
	kvm_mailbox) echo 5 ;;
	docs.sh) echo 120 ;;
	containerd.sh) echo 480 ;;
	*) echo 60 ;;
	esac
}

# split_lanes N SUITE...: "LANE SUITE" lines, each suite, costliest
# first, going to the lane (0 to N-1) that has the least cost so far.
split_lanes() {
	local n=$1 i best c s
	local -a load=()
	shift
	for ((i = 0; i < n; i++)); do
		load[i]=0
	done
	while read -r c s; do
		best=0
		for ((i = 1; i < n; i++)); do
			[ "${load[i]}" -lt "${load[best]}" ] && best=$i
		done
		load[best]=$((load[best] + c))
		echo "$best $s"
	done < <(for s in "$@"; do
		echo "$(kvm_suite_cost "$s") $s"
	done | sort -s -k1,1nr)
}

# The KVM suites, in KILN_HARNESS_LANES harness VMs side by side (by
# default as many as "vmtest --lanes" says: one per host CPU, the
# harness having one), each running its share of the suites one after
# the other and resuming on its own after a stall (lane_run). Lane 0's
# output streams; the others' follows it once all have ended, each
# lane's whole, as the parser wants one harness run at a time.
kvm_suite() {
	local all lanes i s dir rc
	local -a mine
	local -A lane_of=()

	if [ -x "$KILN_VMTEST" ]; then
		mapfile -t all < <(kvm_suites "$O")
		lanes=${KILN_HARNESS_LANES:-$("$KILN_VMTEST" --lanes 2>/dev/null)}
		[[ $lanes =~ ^[1-9][0-9]*$ ]] || lanes=1
		[ "$lanes" -le "${#all[@]}" ] || lanes=${#all[@]}
		if [ "$lanes" -le 1 ]; then
			(lane_run "${all[@]}")
			return
		fi
		dir=$(mktemp -d /tmp/kiln-lanes.XXXXXX) || {
			echo "# kiln-error: mktemp for the harness lanes failed"
			return
		}
		while read -r i s; do
			lane_of[$s]=$i
		done < <(split_lanes "$lanes" "${all[@]}")
		for ((i = lanes - 1; i >= 0; i--)); do
			mine=()
			for s in "${all[@]}"; do
				[ "${lane_of[$s]}" = "$i" ] && mine+=("$s")
			done
			echo "# kiln-harness-lane: $i of $lanes runs ${mine[*]##*/}"
			if [ "$i" -gt 0 ]; then
				(KILN_HARNESS_LANE=$i lane_run "${mine[@]}") \
					>"$dir/$i" 2>&1 &
			else
				(KILN_HARNESS_LANE=0 lane_run "${mine[@]}")
			fi
		done
		wait
		for ((i = 1; i < lanes; i++)); do
			cat "$dir/$i"
		done
		rm -rf "$dir"
	elif [ -c /dev/kvm ]; then
		rc=0
		echo "# kiln-harness: selftests/run_kvm.sh $O (no tools/vmtest, host KVM)"
		selftests/run_kvm.sh "$O" 2>&1 </dev/null || rc=$?
		echo "# kiln-harness-exit: selftests/run_kvm.sh $rc"
	else
		echo "# kiln-error: KVM suite not run: no /dev/kvm and no $KILN_VMTEST"
	fi
}

pass=0 fail=0 skip=0
failures=() flakes=() retries=() times=() test_times=()
# The suite being read: name, plan (-1: none yet), tests seen, failures.
cur='' plan=-1 seen=0 sfail=0
# The harness run: failure count when it started, run_kvm.sh finished.
harness_mark=0 kvm_done=0
# The counts when the suite being read started, and when the harness
# ended: what a retry goes back to (it runs the cut-off suite again);
# and the counts at the harness's end, what a resumed retry keeps.
suite_mark=() exit_mark=() end_mark=()

# mark NAME: set array NAME to the counts now, for restore.
mark() {
	local -n m=$1
	# shellcheck disable=SC2034 # m is the caller's array
	m=("$pass" "$skip" "$fail" "${#failures[@]}" "${#flakes[@]}")
}

# restore PASS SKIP FAIL NFAILURES NFLAKES: back to counts mark took.
restore() {
	local n=$4 k=$5
	pass=$1 skip=$2 fail=$3
	failures=("${failures[@]:0:$n}")
	flakes=("${flakes[@]:0:$k}")
}

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
			mark suite_mark
			;;
		"# kiln-selftest-exit: "*)
			[ -n "$cur" ] && suite_end "${line##* }"
			;;
		"# kiln-error: "*)
			failed "${line#"# kiln-error: "}"
			;;
		"# kiln-harness: "*)
			harness_mark=$fail kvm_done=0
			;;
		"# kiln-harness-retry: "*"; resuming: "*)
			restore "${end_mark[@]}"
			retries+=("${line#"# kiln-harness-retry: "}")
			;;
		"# kiln-harness-retry: "*)
			restore "${exit_mark[@]}"
			retries+=("${line#"# kiln-harness-retry: "}")
			;;
		*"kiln-harness-flake: "*)
			flakes+=("${cur:-?}: ${line#*kiln-harness-flake: }")
			;;
		"# kiln-run_kvm: done")
			kvm_done=1
			;;
		"# kiln-selftest-time: "*)
			times+=("${line#"# kiln-selftest-time: "}")
			;;
		"# kiln-test-time: "*)
			[ -n "$cur" ] &&
				test_times+=("${cur##*/}.${line#"# kiln-test-time: "}")
			;;
		"# kiln-harness-exit: "*)
			mark end_mark
			if [ -n "$cur" ]; then
				exit_mark=("${suite_mark[@]}")
			else
				mark exit_mark
			fi
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

# The host suites run while the harness VMs run the KVM suites, sharing
# the host's CPUs with them (one harness VM of one CPU left about half of
# the 2-core host idle). Their output is kept and comes after the harness's;
# then the host suites that boot harnesses of their own run.
run_everything() {
	local host_log host_pid

	host_log=$(mktemp /tmp/kiln-host-suites.XXXXXX) || {
		echo "# kiln-error: mktemp for the host suites' output failed"
		return
	}
	host_suites parallel >"$host_log" 2>&1 &
	host_pid=$!
	kvm_suite
	wait "$host_pid"
	cat "$host_log"
	rm -f "$host_log"
	host_suites serial
}

parse < <(run_everything)

# Harness runs that stalled, and what ran again after them.
for r in "${retries[@]}"; do
	echo "# HARNESS STALL, suites run again: $r"
done
# Tests the harness broke and that ran again (ksft_blame_environment
# in selftests/kselftest.h, called by selftests/kvm/vmm_util.h): named, so
# a rising number is seen.
for f in "${flakes[@]}"; do
	echo "# HARNESS FLAKE, test run again: $f"
done
# Where the time went: the slowest suites (CI's budget is in README.md).
printf '%s\n' "${times[@]}" | sort -k2,2nr | head -8 |
	while read -r name secs; do
		[ -n "$name" ] && echo "# SLOW: $name ${secs}s"
	done
# And the slowest tests (reruns included), for where to cut.
printf '%s\n' "${test_times[@]}" | sort -k2,2nr | head -10 |
	while read -r name secs; do
		[ -n "$name" ] && echo "# SLOW TEST: $name ${secs}s"
	done
for f in "${failures[@]}"; do
	echo "# FAILED: $f"
done
summary="$pass passed, $fail failed"
[ "$skip" -eq 0 ] || summary+=", $skip skipped"
[ "${#flakes[@]}" -eq 0 ] || summary+=", ${#flakes[@]} run again (harness)"
[ "${#retries[@]}" -eq 0 ] || summary+=", ${#retries[@]} harness stall(s)"
echo "$summary"
[ "$fail" -eq 0 ]
