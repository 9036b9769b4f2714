#!/bin/bash
# tools/harness/build.sh - build (or find) the cached harness VM image.
#
# Usage: build.sh CACHE_ROOT
# Prints the harness directory (CACHE_ROOT/harness-<key>) on stdout; all
# progress and errors go to stderr. The directory holds:
#   vmlinuz        Debian's cloud kernel
#   initramfs.cpio busybox + the modules listed below + init.sh as /init
#   modroot/lib/modules/<kver>
#                  the kernel's full module tree (depmod'ed), so modprobe
#                  works inside the harness (see init.sh)
#   kver, pkg      kernel release and "<package> <version>"
# The key is the kernel package and version plus a hash of this script,
# init.sh and kvm-hold.c, so editing any of them rebuilds. A cache hit costs no apt calls: the
# package resolution is memoised against the apt lists' timestamps.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
meta=cloud-amd64
# Modules the harness loads at boot (with their dependencies): the ones it
# needs to reach the shared root, and KVM, loaded in parallel with that.
boot_mods=(virtio_pci virtio_console virtiofs)
kvm_mods=(irqbypass kvm kvm-amd)

die() { echo "vmtest: $*" >&2; exit 1; }
say() { echo "  VMTEST $*" >&2; }

lists_stamp() {
	local f
	f=(/var/lib/apt/lists/*_Packages*)
	[ -e "${f[0]}" ] || return 1
	stat -c '%n %s %Y' "${f[@]}" | sha256sum | cut -c1-16
}

# Print "<package> <version>" of the kernel linux-image-cloud-amd64 pulls in.
resolve_pkg() {
	local pkg ver
	pkg=$(apt-cache depends "linux-image-$meta" 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	[ -n "$pkg" ] || return 1
	ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null |
		awk '/^Version:/ { print $2; exit }')
	[ -n "$ver" ] || return 1
	echo "$pkg $ver"
}

# Memoised resolve_pkg; falls back to the newest built harness if apt has
# no lists at all (e.g. they were cleaned after install).
cached_pkg() {
	local memo="$root/harness-kernel-pkg" stamp line
	if ! stamp=$(lists_stamp); then
		line=$(ls -td "$root"/harness-*/pkg 2>/dev/null | head -n1) ||
			true
		[ -n "$line" ] ||
			die "no apt package lists and no cached harness; run apt-get update"
		cat "$line"
		return
	fi
	if [ -f "$memo" ] && [ "$(head -n1 "$memo")" = "$stamp" ]; then
		sed -n 2p "$memo"
		return
	fi
	line=$(resolve_pkg) || {
		say "apt-get update (no linux-image-$meta candidate)"
		apt-get update -qq >&2 || die "apt-get update failed"
		line=$(resolve_pkg)
	} || die "cannot resolve linux-image-$meta with apt-cache"
	printf '%s\n%s\n' "$(lists_stamp)" "$line" >"$memo.$$"
	mv -f "$memo.$$" "$memo"
	echo "$line"
}

fetch_kernel() {
	local pkg=$1 ver=$2 dst=$3
	local opt=(-q -o APT::Sandbox::User=root)
	(cd "$dst" && apt-get download "${opt[@]}" "$pkg=$ver" >/dev/null) || {
		say "apt-get update (download of $pkg failed)"
		apt-get update -qq >&2 || die "apt-get update failed"
		(cd "$dst" && apt-get download "${opt[@]}" "$pkg=$ver" >/dev/null)
	} || die "apt-get download $pkg=$ver failed"
}

# Append the .ko paths (relative to the module tree) that loading modules
# $4... needs, in load order and not already in $3, copying them to $1.
add_modules() {
	local tree=$1 kx=$2 list=$3 kver=$4 m ko
	shift 4
	for m in "$@"; do
		modprobe -d "$kx" -S "$kver" --show-depends "$m" ||
			die "module $m not found in the $kver package"
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' |
	while read -r ko; do
		ko=${ko#"$kx/lib/modules/$kver/"}
		[ -e "$tree/lib/modules/$kver/$ko" ] && continue
		mkdir -p "$tree/lib/modules/$kver/$(dirname "$ko")"
		cp "$kx/lib/modules/$kver/$ko" "$tree/lib/modules/$kver/$ko"
		echo "$ko" >>"$list"
	done
}

# Copy busybox, the wanted modules and init.sh into $1 and pack it as $2.
make_initramfs() {
	local tree=$1 out=$2 kx=$3 kver=$4
	mkdir -p "$tree"/{bin,dev,proc,sys,newroot,etc,lib/modules/"$kver"}
	cp /bin/busybox "$tree/bin/busybox" ||
		die "no /bin/busybox (install busybox-static)"
	cp "$here/init.sh" "$tree/init"
	chmod 755 "$tree/init"
	gcc -std=gnu11 -O2 -Wall -Werror -static -o "$tree/bin/kvm-hold" \
		"$here/kvm-hold.c" || die "building kvm-hold failed"
	: >"$tree/etc/modules"
	: >"$tree/etc/modules.kvm"
	add_modules "$tree" "$kx" "$tree/etc/modules" "$kver" "${boot_mods[@]}"
	add_modules "$tree" "$kx" "$tree/etc/modules.kvm" "$kver" "${kvm_mods[@]}"
	(cd "$tree" && find . -print0 | sort -z |
		cpio --null -o -H newc --quiet -R 0:0) >"$out" ||
		die "cpio of the initramfs failed"
}

build() {
	local pkg=$1 ver=$2 dir=$3 work kx kver
	work=$(mktemp -d "$root/.build.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	say "building harness ($pkg $ver) in $dir"
	fetch_kernel "$pkg" "$ver" "$work"
	kx="$work/out"
	mkdir -p "$kx"
	dpkg-deb -x "$work"/"$pkg"_*.deb "$kx" || die "dpkg-deb -x of $pkg failed"
	kver=${pkg#linux-image-}
	[ -d "$kx/lib/modules/$kver" ] || die "$pkg has no modules for $kver"
	depmod -b "$kx" "$kver" || die "depmod for $kver failed"
	make_initramfs "$work/initramfs" "$work/initramfs.cpio" "$kx" "$kver"
	mkdir -p "$work/final"
	mv "$kx/boot/vmlinuz-$kver" "$work/final/vmlinuz"
	mkdir -p "$work/final/modroot/lib/modules"
	mv "$kx/lib/modules/$kver" "$work/final/modroot/lib/modules/"
	mv "$work/initramfs.cpio" "$work/final/"
	echo "$kver" >"$work/final/kver"
	echo "$pkg $ver" >"$work/final/pkg"
	rm -rf "$dir"
	mv "$work/final" "$dir"
	rm -rf "$work"
	trap - EXIT
}

# Drop other harness builds nobody used for a day (superseded kernels or
# scripts); each is ~120 MB.
prune() {
	local keep=$1 d
	for d in "$root"/harness-*/; do
		d=${d%/}
		[ "$d" != "$keep" ] && [ -d "$d" ] || continue
		[ -n "$(find "$d/last-used" -mmin -1440 2>/dev/null)" ] && continue
		rm -rf "$d"
	done
}

main() {
	[ $# -eq 1 ] || die "usage: build.sh CACHE_ROOT"
	root=$1
	mkdir -p "$root" || die "cannot create cache dir $root"
	local line pkg ver hash dir
	line=$(cached_pkg)
	read -r pkg ver <<<"$line"
	hash=$(cat "$here/build.sh" "$here/init.sh" "$here/kvm-hold.c" |
		sha256sum | cut -c1-12)
	dir="$root/harness-${pkg#linux-image-}-$ver-$hash"
	if [ ! -f "$dir/pkg" ]; then
		exec {lock}>"$root/.harness.lock"
		flock "$lock"
		if [ ! -f "$dir/pkg" ]; then
			build "$pkg" "$ver" "$dir"
			prune "$dir"
		fi
		exec {lock}>&-
	fi
	touch "$dir/last-used"
	echo "$dir"
}

main "$@"
