#!/bin/bash
# guest/build-kernel.sh OUTDIR - build the Kiln guest kernel, cached.
#
# The kernel takes minutes to build, so it lives outside the checkout in
# ${KILN_CACHE:-$HOME/.cache/kiln}/kernel-<key>, where <key> hashes every
# input: guest/kernel.config, the linux-source-6.1 package version and this
# script. A second call with the same inputs only refreshes the two links
# OUTDIR/vmlinux (ELF, for the vmm) and OUTDIR/bzImage (for QEMU and tools).
#
# The source tree is extracted once per package version into a sibling
# directory and built out of tree (O=), so config changes do not extract
# 130 MB again. Full logs go to <cache>/kernel-<key>/build.log; only one
# line reaches the terminal unless something fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: build-kernel.sh OUTDIR}
cache=${KILN_CACHE:-$HOME/.cache/kiln}
pkg=linux-source-6.1
tarball=/usr/src/$pkg.tar.xz
fragment=$here/kernel.config

if ! pkgver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ||
	[ -z "$pkgver" ] || [ ! -f "$tarball" ]; then
	echo "build-kernel: $pkg is not installed (run tools/install-deps)" >&2
	exit 1
fi

key=$({ cat "$fragment"; echo "$pkg $pkgver"; cat "${BASH_SOURCE[0]}"; } |
	sha256sum | cut -c1-16)
src=$cache/$pkg-$pkgver
dir=$cache/kernel-$key
log=$dir/build.log
stamp=$dir/.kiln-built

link_outputs() {
	mkdir -p "$out"
	ln -sfn "$dir/vmlinux" "$out/vmlinux"
	ln -sfn "$dir/arch/x86/boot/bzImage" "$out/bzImage"
}

# Cache hit: nothing to build, and nothing to print.
if [ -f "$stamp" ]; then
	link_outputs
	exit 0
fi

mkdir -p "$cache"
# Two makes (say, two worktrees sharing the cache) must not build the same
# directory at once; the second waits and then finds the stamp. Other keys
# are other directories and need not wait.
exec 9>"$dir.lock"
flock 9
if [ -f "$stamp" ]; then
	link_outputs
	exit 0
fi

fail() {
	echo "build-kernel: $1 failed; last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit 1
}

# Every option the fragment names must come out exactly as requested:
# Kconfig drops options whose dependencies are missing without a word.
check_config() {
	awk '
	NR == FNR {
		if ($0 ~ /^CONFIG_[A-Za-z0-9_]+=/) {
			eq = index($0, "=")
			have[substr($0, 1, eq - 1)] = substr($0, eq + 1)
		} else if ($0 ~ /^# CONFIG_[A-Za-z0-9_]+ is not set$/) {
			have[$2] = "n"
		}
		next
	}
	/^CONFIG_[A-Za-z0-9_]+=/ {
		eq = index($0, "=")
		opt = substr($0, 1, eq - 1)
		want = substr($0, eq + 1)
	}
	/^# CONFIG_[A-Za-z0-9_]+ is not set$/ {
		opt = $2
		want = "n"
	}
	opt != "" {
		got = (opt in have) ? have[opt] : "n"
		if (got != want) {
			printf "%s: want %s, got %s\n", opt, want, got
			bad = 1
		}
		opt = ""
	}
	END { exit bad }
	' "$dir/.config" "$fragment"
}

echo "  KERNEL building $(echo "$pkgver" | cut -d. -f1,2)" \
	"(cache miss, several minutes)" >&2

# No "rm -rf $dir": the inputs are the same by construction, so a build
# that was interrupted resumes where it stopped.
start=$(date +%s)
mkdir -p "$dir"
: >"$log"

# The source tree is shared by every key of this package version.
exec 8>"$src.lock"
flock 8
if [ ! -f "$src/.kiln-extracted" ]; then
	# Extract next to the final name and rename, so an interrupted
	# extraction never looks complete.
	tmp=$(mktemp -d "$cache/.extract.XXXXXX")
	tar -C "$tmp" -xf "$tarball" >>"$log" 2>&1 || fail "extracting $tarball"
	rm -rf "$src"
	mv "$tmp/$pkg" "$src"
	rmdir "$tmp"
	touch "$src/.kiln-extracted"
fi
exec 8>&-

# Fixed build identity so the same inputs give the same banner: the
# tarball's mtime stands for "when this source was made".
kmake=(make -C "$src" O="$dir" ARCH=x86_64
	KBUILD_BUILD_USER=kiln KBUILD_BUILD_HOST=kiln
	KBUILD_BUILD_TIMESTAMP="$(date -u -d "@$(stat -c %Y "$tarball")")")

"${kmake[@]}" KCONFIG_ALLCONFIG="$fragment" allnoconfig >>"$log" 2>&1 ||
	fail "allnoconfig"
"${kmake[@]}" olddefconfig >>"$log" 2>&1 || fail "olddefconfig"
if ! check_config >>"$log" 2>&1; then
	echo "build-kernel: guest/kernel.config options not honoured by Kconfig:" >&2
	check_config >&2 || true
	exit 1
fi
cp "$fragment" "$dir/kiln-kernel.config"

"${kmake[@]}" -j"$(nproc)" vmlinux bzImage >>"$log" 2>&1 || fail "kernel build"

echo "built in $(($(date +%s) - start)) s" >>"$log"
echo "$pkg $pkgver" >"$stamp"
link_outputs
