#!/bin/bash
# guest/mkinitramfs.sh INIT OUTPUT - pack the Kiln guest initramfs.
#
# OUTPUT is an uncompressed newc cpio: /init (our static INIT), Debian's
# static busybox as /bin/busybox with a link per applet, the empty mount
# points init expects, and a root-only /etc/passwd and /etc/group.
#
# The archive is deterministic: sorted names, owner 0:0, one fixed mtime,
# no device or inode numbers from the build host. No device nodes are
# needed (init mounts devtmpfs before it opens anything), so this runs
# without root.
set -euo pipefail

init=${1:?usage: mkinitramfs.sh INIT OUTPUT}
output=${2:?usage: mkinitramfs.sh INIT OUTPUT}
busybox=${BUSYBOX:-/bin/busybox}

if [ ! -x "$busybox" ]; then
	echo "mkinitramfs: $busybox missing (install busybox-static)" >&2
	exit 1
fi

root=$(mktemp -d "${output}.root.XXXXXX")
trap 'rm -rf "$root"' EXIT

# Mount points and the directories applet links go into. /kiln is where
# the monitor's second archive drops its argv file.
mkdir -p "$root"/{proc,sys,dev,tmp,run,root,etc,kiln,bin,sbin,usr/bin,usr/sbin}
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"

install -m 0755 "$init" "$root/init"
install -m 0755 "$busybox" "$root/bin/busybox"

# Absolute targets: an applet link means the same wherever it sits.
"$busybox" --list-full | while read -r applet; do
	[ "$applet" = bin/busybox ] && continue
	mkdir -p "$root/$(dirname "$applet")"
	ln -sfn /bin/busybox "$root/$applet"
done

printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"

# A fixed mtime (the epoch) keeps the archive byte-identical between builds.
find "$root" -exec touch -h -d @0 {} +

tmp=$output.tmp
(cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
	cpio --quiet -o -H newc --owner=0:0 --reproducible) >"$tmp"
mv "$tmp" "$output"
