#!/bin/bash
# guest/images/build-test-image.sh [OUTDIR] - build kiln-test, a small ext4
# root for tests, cached.
#
# 32 MiB, 4 KiB blocks, with a journal (guest/images/mke2fs.conf), packed
# with `mkfs.ext4 -d` (no loop mount, no root needed). It holds Debian's
# static busybox as /bin/busybox with a link per applet in /bin and /sbin,
# /etc/os-release (NAME="Kiln test"), a root-only passwd and group, and
# the empty directories init mounts things on. It lives in
#
#   ${KILN_CACHE:-$HOME/.cache/kiln}/images/kiln-test-<key>.ext4
#
# where <key> hashes this script, ext4-image.sh, mke2fs.conf, the busybox
# binary, the e2fsprogs version and the fixed epoch. Every call copies the
# descriptor to OUTDIR/images/kiln-test.json; a cache miss prints one
# IMAGE line and takes about a second. Tests boot copies of the image (or
# QEMU's snapshot=on), never the cached file itself.
set -euo pipefail
umask 022

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")
out=${1:-build}
name=kiln-test
busybox=${BUSYBOX:-/bin/busybox}
mkeconf=$here/mke2fs.conf
lib=$here/ext4-image.sh
# shellcheck source=SCRIPTDIR/ext4-image.sh
. "$lib"
size_mib=32
inodes=2048
# The same fixed time as the Debian images (2025-01-01T00:00:00Z).
epoch=1735689600

for t in mkfs.ext4 debugfs e2fsck /usr/bin/python3 "$busybox"; do
	if ! command -v "$t" >/dev/null; then
		echo "build-test-image: $t is missing (run tools/install-deps)" >&2
		exit 1
	fi
done

cache=${KILN_CACHE:-$HOME/.cache/kiln}
mkdir -p "$cache/images"
cache=$(cd "$cache" && pwd -P)
dir=$cache/images

key=$({
	cat "$self" "$lib" "$mkeconf"
	sha256sum <"$busybox"
	dpkg-query -W -f='${Package} ${Version}\n' e2fsprogs 2>/dev/null || true
	echo "size=$size_mib inodes=$inodes SOURCE_DATE_EPOCH=$epoch"
} | sha256sum | cut -c1-16)
base=$dir/$name-$key
img=$base.ext4
log=$base.log

# The cached descriptor is written last: with the image, it marks a
# complete build.
publish() {
	mkdir -p "$out/images"
	cp "$base.json" "$out/images/$name.json"
}
if [ -f "$base.json" ] && [ -f "$img" ]; then
	publish
	exit 0
fi

exec 9>"$base.lock"
flock 9
if [ -f "$base.json" ] && [ -f "$img" ]; then
	publish
	exit 0
fi

tmp=$(mktemp -d "$dir/.build-$name.XXXXXX")
echo "  IMAGE  $name" >&2
# From here on everything goes to the log; its tail to stderr on failure.
exec 3>&2 >"$log" 2>&1
finish() {
	local rc=$?

	rm -rf "$tmp"
	[ "$rc" -eq 0 ] && return
	echo "build-test-image: failed; last lines of $log:" >&3
	tail -n 20 "$log" >&3
}
trap finish EXIT

tree() {
	local root=$1 applet

	mkdir -p "$root"/{bin,sbin,etc,dev,proc,sys,run,tmp,root,kiln}
	chmod 0755 "$root"
	chmod 1777 "$root/tmp"
	chmod 0700 "$root/root"
	install -m 0755 "$busybox" "$root/bin/busybox"
	# Every applet in /bin or /sbin (usr/bin/x -> /bin/x), pointing at
	# /bin/busybox; linuxrc, at the top, is left out. One process, not
	# one ln per applet: this is most of the build.
	local applets
	applets=$("$busybox" --list-full)
	# shellcheck disable=SC2086 # one applet a word
	/usr/bin/python3 - "$root" $applets <<-'EOF'
	import os, sys
	root = sys.argv[1]
	for applet in sys.argv[2:]:
	    parts = applet.split("/")
	    if parts[0] == "usr":
	        parts = parts[1:]
	    if len(parts) != 2 or parts[0] not in ("bin", "sbin"):
	        continue
	    link = os.path.join(root, *parts)
	    if parts != ["bin", "busybox"] and not os.path.lexists(link):
	        os.symlink("/bin/busybox", link)
	EOF
	for applet in bin/sh bin/cat sbin/init; do
		[ -L "$root/$applet" ] || { echo "no $applet applet" >&2; exit 1; }
	done
	cat >"$root/etc/os-release" <<-'EOF'
	NAME="Kiln test"
	ID=kiln-test
	PRETTY_NAME="Kiln test (busybox)"
	EOF
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	echo kiln >"$root/etc/hostname"
}

echo "key $key: $busybox, ${size_mib} MiB"
tree "$tmp/root"
ext4_pack "$tmp/root" "$tmp/image" "$size_mib" "$inodes" kiln-test "$key" \
	"$epoch" 0
ext4_descriptor "$tmp/json" "$name" "$img" \
	"$(sha256sum "$tmp/image" | cut -d' ' -f1)" "$(stat -c %s "$tmp/image")"
mv "$tmp/image" "$img"
mv "$tmp/json" "$base.json"
publish
