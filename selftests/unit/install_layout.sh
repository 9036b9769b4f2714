#!/bin/bash
# install_layout: what `make install` puts where (tools/kiln-install)
# against the list in Documentation/install.md, exactly, for two
# prefixes; the installed guest against its pins; uninstall leaving no
# file; the man pages against `vmm --help` and `vmmctl --help`; the bash
# completion against the option table. TAP; built as
# $O/selftests/install_layout and run from the tree root (run_all.sh).
set -u
o=$(cd "$(dirname "$0")/.." && pwd)
n=0
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-install-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

result() { # result STATUS NAME [WHY]: one TAP line
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n $2"
	else
		fail=$((fail + 1))
		echo "not ok $n $2"
		[ -z "${3-}" ] || printf '%s\n' "$3" | sed 's/^/# /'
	fi
}

# The docs' list: the rows of install.md's table that start with a path
# under $PREFIX.
doc_list() {
	sed -n 's/^| `\$PREFIX\/\([^`]*\)`.*/\1/p' Documentation/install.md | sort
}

# Every file (and link) under $1, relative to it.
files_under() {
	(cd "$1" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort)
}

# The long options `PROG --help` lists, one a line.
help_flags() {
	"$o/$1" --help | grep -oE '^  (-[a-z], )?--[a-z][a-z0-9-]*' |
		sed 's/^ *//; s/^-[a-z], //' | sort -u
}

echo "TAP version 13"
echo "1..7"

install_into() { # install_into DESTDIR PREFIX
	tools/kiln-install install "$o" "$1" "$2" >"$tmp/log" 2>&1
}

# 1, 2: exactly the documented files, nothing else, for either prefix.
for prefix in /usr/local /opt/kiln; do
	d=$tmp/root${prefix//\//_}
	why=
	if ! install_into "$d" "$prefix"; then
		why=$(cat "$tmp/log")
	else
		outside=$(files_under "$d" | grep -v "^${prefix#/}/" || true)
		diff=$(diff <(doc_list) <(files_under "$d$prefix") 2>&1)
		[ -z "$outside" ] || why="outside $prefix: $outside"
		[ -z "$diff" ] || why="$why docs (<) vs installed (>): $diff"
		[ "$(doc_list | wc -l)" -ge 10 ] || why="$why install.md lists $(doc_list | wc -l) files"
	fi
	[ -z "$why" ]
	result $? "install_${prefix//\//_}_is_the_documented_list" "$why"
done

# 3: the installed guest is what its pins say, and executable bits only
# on the binaries.
d=$tmp/root_usr_local/usr/local
why=
for f in vmlinux bzImage initramfs.cpio; do
	pin=$(sed -n "s/^ *\"$f\": \"sha256:\([0-9a-f]*\)\".*/\1/p" \
		"$d/lib/kiln/guest/pins.json")
	have=$(sha256sum "$d/lib/kiln/guest/$f" | cut -c1-64)
	[ -n "$pin" ] && [ "$pin" = "$have" ] || why="$why $f: pin '$pin', file $have;"
done
[ -x "$d/bin/vmm" ] && [ -x "$d/bin/vmmctl" ] || why="$why binaries not executable;"
[ ! -x "$d/lib/kiln/guest/vmlinux" ] || why="$why vmlinux executable;"
[ -z "$why" ]
result $? installed_guest_matches_its_pins "$why"

# 4: uninstall takes every file and Kiln's own directories.
tools/kiln-install uninstall "$o" "$tmp/root_usr_local" /usr/local >"$tmp/log" 2>&1
left=$(files_under "$tmp/root_usr_local")
[ -z "$left" ] && [ ! -e "$d/lib/kiln" ]
result $? uninstall_leaves_no_file "left: $left $(ls -d "$d/lib/kiln" 2>/dev/null)"

# 5: a relative PREFIX is refused before anything is written.
tools/kiln-install install "$o" "$tmp/rel" usr >"$tmp/log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ ! -e "$tmp/rel" ] && grep -q "must be an absolute path" "$tmp/log"
result $? relative_prefix_refused "exit $rc: $(cat "$tmp/log")"

# 6: every option of --help in the man page (roff writes - as \-).
why=
for prog in vmm vmmctl; do
	page=$o/man/$prog.1
	[ -s "$page" ] || why="$why $page missing;"
	for f in $(help_flags "$prog"); do
		sed 's/\\-/-/g' "$page" 2>/dev/null | grep -qF -- "$f" ||
			why="$why $prog.1 lacks $f;"
	done
done
[ "$(help_flags vmm | wc -l)" -ge 50 ] || why="$why vmm --help gave $(help_flags vmm | wc -l) options;"
[ -z "$why" ]
result $? man_pages_have_every_option "$why"

# 7: `vmm run --<TAB>` offers exactly the table's options (and -v);
# `vmm run --rootfs-verify <TAB>` its choices.
# shellcheck disable=SC1091
got=$(bash -c '
	. "$1/completion/vmm"
	COMP_WORDS=(vmm run --); COMP_CWORD=2; _kiln_vmm
	printf "%s\n" "${COMPREPLY[@]}" | grep -- "^--" | sort -u
	COMP_WORDS=(vmm run --rootfs-verify ""); COMP_CWORD=3; _kiln_vmm
	echo "choices: ${COMPREPLY[*]}"' - "$o" 2>&1)
want=$(help_flags vmm; echo "choices: full cached")
diff=$(diff <(echo "$want" | sort) <(echo "$got" | sort))
[ -z "$diff" ]
result $? completion_has_every_option "want (<) vs got (>): $diff"

echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
