#!/bin/bash
# selftests/kvm/docs.sh O - the docs' runnable examples, run as they stand.
#
# Every fenced block of README.md and Documentation/cli.md that follows a
# line "<!-- runnable -->" is a shell block run with bash -e -o pipefail;
# one that follows "<!-- runnable: NAME -->" is a file's contents, written
# to NAME before the next shell block runs. A document's blocks run in
# order, in one scratch directory of the document's own, where build/ is
# O (so `build/vmm` is the tree's) and O is first on PATH (so `vmm` and
# `vmmctl` are, as an installation would put them). /var/lib/kiln,
# /run/kiln and /var/log/kiln, where the examples keep their files, are
# tmpfs mounts of this test's own mount namespace: the harness's /var
# and /run are the host's. One TAP line a block: "ok N - FILE:LINE".
# Kept in sync with nothing: a block that no longer runs fails here.
set -u

O=${1:-build}
[ -d "$O" ] && O=$(cd "$O" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
TREE=$PWD
# KILN_DOCS: other documents (paths from the tree), for a test of this one.
read -r -a DOCS <<<"${KILN_DOCS:-README.md Documentation/cli.md}"
BLOCK_TIMEOUT=${KILN_DOCS_BLOCK_TIMEOUT:-600}

# blocks DOC: "LINE KIND NAME" a block (KIND sh or file), its text in
# $scratch/blocks/LINE.
blocks() {
	awk -v out="$2" '
		/^<!-- runnable(: [^ ]+)? -->$/ {
			want = ($3 == "-->") ? "sh" : $3
			next
		}
		/^```/ && !inblock {
			if (want != "") {
				inblock = 1
				start = NR + 1
				file = out "/" start
				printf "" >file
				print start, (want == "sh" ? "sh -" : "file " want)
				want = ""
				next
			}
			skip = 1
			inblock = 1
			next
		}
		/^```/ && inblock {
			if (!skip)
				close(file)
			inblock = 0
			skip = 0
			next
		}
		inblock && !skip { print >file; next }
		# A marker is for the block right after it (blank lines apart).
		!inblock && !/^[[:space:]]*$/ { want = "" }
	' "$1"
}

# The mount namespace of the whole run: the examples' system directories
# are this test's own.
if [ -z "${KILN_DOCS_NS:-}" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "1..0 # SKIP the docs' examples keep files in /var/lib/kiln and /run/kiln: run as root"
		exit 4
	fi
	exec env KILN_DOCS_NS=1 unshare -m --propagation private "$0" "$O"
fi
for d in /var/lib/kiln /run/kiln /var/log/kiln; do
	mkdir -p "$d" 2>/dev/null
	mount -t tmpfs -o size=1g,mode=0755 kiln-docs "$d" || {
		echo "Bail out! mount tmpfs on $d failed"
		exit 1
	}
done

root=$(mktemp -d "${KILN_TEST_TMP:-/tmp}/kiln-docs-XXXXXX") || exit 1
trap 'rm -rf "$root"' EXIT

n=0 failed=0
declare -a plan=()
for doc in "${DOCS[@]}"; do
	dir=$root/${doc//\//_}
	mkdir -p "$dir/run" "$dir/blocks"
	ln -s "$O" "$dir/run/build"
	# A file, not <(...): the harness's /dev has no /dev/fd.
	blocks "$TREE/$doc" "$dir/blocks" >"$dir/plan"
	while read -r line kind name; do
		plan+=("$doc $dir $line $kind $name")
	done <"$dir/plan"
done

nr_sh=0
for p in "${plan[@]}"; do
	read -r _ _ _ kind _ <<<"$p"
	[ "$kind" = sh ] && nr_sh=$((nr_sh + 1))
done
if [ "$nr_sh" -eq 0 ]; then
	echo "Bail out! no block of ${DOCS[*]} is marked <!-- runnable -->"
	exit 1
fi
echo "1..$nr_sh"

for p in "${plan[@]}"; do
	read -r doc dir line kind name <<<"$p"
	if [ "$kind" = file ]; then
		cp "$dir/blocks/$line" "$dir/run/$name"
		continue
	fi
	n=$((n + 1))
	log=$dir/$line.log
	(
		cd "$dir/run" &&
			PATH=$O:$PATH timeout -k 10 "$BLOCK_TIMEOUT" \
				bash -e -o pipefail "$dir/blocks/$line"
	) </dev/null >"$log" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "ok $n - $doc:$line"
	else
		failed=$((failed + 1))
		echo "not ok $n - $doc:$line exited $rc"
		sed 's/^/# /' "$log" | tail -40
	fi
done
[ "$failed" -eq 0 ]
