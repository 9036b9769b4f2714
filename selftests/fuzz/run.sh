#!/bin/bash
# selftests/fuzz/run.sh O TARGET... - each fuzz target, built by `make
# fuzz` as O/fuzz/TARGET, for FUZZ_SECONDS (default 60) from its corpus
# (Documentation/fuzzing.md). What it learns goes to O/fuzz/corpus/TARGET
# (kept between runs), never into the tree's selftests/fuzz/corpus/. TAP,
# a line per target; a crash, a leak, a timeout (FUZZ_TIMEOUT seconds for
# one input) or a broken fuzz_check() fails it, with the input saved as
# O/fuzz/crashes/TARGET-* and named: fix the code, then keep the input
# in selftests/fuzz/corpus/TARGET/ as crash-WHAT, which the unit run
# replays from then on. Exit 0 only when every target ran clean.
set -u

O=${1:?usage: run.sh O TARGET...}
shift
: "${FUZZ_SECONDS:=60}"
: "${FUZZ_TIMEOUT:=25}"
: "${FUZZ_RSS_MB:=2048}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

fails=0 n=0
echo "TAP version 13"
echo "1..$#"
for t in "$@"; do
	n=$((n + 1))
	bin=$O/fuzz/$t
	if [ ! -x "$bin" ]; then
		echo "not ok $n $t: $bin not built (make fuzz)"
		fails=$((fails + 1))
		continue
	fi
	mkdir -p "$O/fuzz/corpus/$t" "$O/fuzz/crashes"
	log=$O/fuzz/$t.log
	echo "# $t: ${FUZZ_SECONDS}s, log in $log"
	if "$bin" -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_TIMEOUT" \
		-rss_limit_mb="$FUZZ_RSS_MB" -print_final_stats=1 \
		-artifact_prefix="$O/fuzz/crashes/$t-" \
		"$O/fuzz/corpus/$t" "selftests/fuzz/corpus/$t" >"$log" 2>&1; then
		echo "ok $n $t # $(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs"
	else
		fails=$((fails + 1))
		echo "not ok $n $t"
		grep -E 'ERROR|runtime error|fuzz_check|Test unit written' "$log" |
			head -n 5 | sed 's/^/# /'
	fi
done
[ "$fails" -eq 0 ]
