#!/bin/bash
# guest/images/build-debian.sh [OUTDIR [VARIANT]] - build a Debian 12 root
# image, cached.
#
# VARIANT is `agent` (the default) or `bench`; the image is
# debian-12-VARIANT, a raw ext4 file built from Debian packages only:
# `debootstrap --variant=minbase bookworm` plus the packages listed in
# guest/images/debian-12-agent.packages and, for another variant, those in
# guest/images/debian-12-VARIANT.packages, packed with `mkfs.ext4 -d` (no
# loop mount). It lives outside the checkout, in
#
#   ${KILN_CACHE:-$HOME/.cache/kiln}/images/debian-12-VARIANT-<key>.ext4
#
# where <key> hashes every input: the package lists, this script,
# ext4-image.sh, mke2fs.conf, the variant, the suite, the mirrors,
# SOURCE_DATE_EPOCH and the debootstrap and e2fsprogs versions. A second
# call with the same inputs only copies two small JSON files to
# OUTDIR/images/:
#
#   debian-12-VARIANT.json        descriptor: path, format, digest, size
#   debian-12-VARIANT.facts.json  what the image holds, as typed triples
#
# Documentation/images.md describes both. The mirror is the one apt already
# uses for the suite (KILN_DEBIAN_MIRROR overrides it). Full logs go to
# <cache>/images/debian-12-VARIANT-<key>.log; only one line reaches the
# terminal unless something fails. Needs root (debootstrap chroots).
set -euo pipefail
umask 022

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")
out=${1:-build}
variant=${2:-agent}
name=debian-12-$variant
suite=bookworm
arch=amd64
mkeconf=$here/mke2fs.conf
lib=$here/ext4-image.sh
# shellcheck source=SCRIPTDIR/ext4-image.sh
. "$lib"
# Every variant is agent plus its own list. Free space in the file system
# (MiB, before the 25 % margin): bench has room for fio's test files.
# Sparse, so unused room costs no disk.
pkglists=("$here/debian-12-agent.packages")
free_mib=64
case $variant in
agent) ;;
bench)
	pkglists+=("$here/$name.packages")
	free_mib=512 ;;
*)
	echo "usage: build-debian.sh [OUTDIR [agent|bench]]" >&2
	exit 2 ;;
esac
# Fixed build time (2025-01-01T00:00:00Z): every timestamp in the image,
# and the file system's own, is this. Part of the key.
epoch=1735689600
py=/usr/bin/python3

cache=${KILN_CACHE:-$HOME/.cache/kiln}
mkdir -p "$cache/images"
cache=$(cd "$cache" && pwd -P)
dir=$cache/images

for t in debootstrap mkfs.ext4 debugfs e2fsck "$py"; do
	if ! command -v "$t" >/dev/null; then
		echo "build-debian: $t is missing (run tools/install-deps)" >&2
		exit 1
	fi
done

# The first mirror apt's sources name for a suite, from sources.list and
# sources.list.d (one-line and deb822 formats). Parsed here because
# `apt-get indextargets` takes most of a second and this runs on every make.
apt_mirror() {
	local f
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] && sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f"
		done | awk -v s="$1" '$1 == "deb" && $3 == s { print $2; exit }'
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] && { cat "$f"; echo; }
		done | awk -v s="$1" '
		function flush(  n, i, a, u) {
			if (types ~ /(^| )deb( |$)/ && enabled != "no") {
				n = split(suites, a, " ")
				for (i = 1; i <= n; i++)
					if (a[i] == s) {
						split(uris, u, " ")
						print u[1]
						found = 1
						exit
					}
			}
			types = uris = suites = enabled = ""
		}
		/^#/ { next }
		/^[ \t]*$/ { flush(); next }
		{
			c = index($0, ":")
			k = tolower(substr($0, 1, c - 1))
			v = substr($0, c + 1)
			gsub(/^[ \t]+|[ \t]+$/, "", v)
			if (k == "types") types = v
			else if (k == "uris") uris = v
			else if (k == "suites") suites = v
			else if (k == "enabled") enabled = tolower(v)
		}
		END { if (!found) flush() }'
	} | head -n 1 | sed 's:/*$::'
}
mirror=${KILN_DEBIAN_MIRROR:-$(apt_mirror "$suite")}
mirror=${mirror%/}
if [ -z "$mirror" ]; then
	echo "build-debian: apt has no source for $suite (see" \
		"/etc/apt/sources.list*); set KILN_DEBIAN_MIRROR" >&2
	exit 1
fi
# Only written into the image's sources.list; nothing is fetched from it.
security=${KILN_DEBIAN_SECURITY:-$(apt_mirror "$suite-security")}
security=${security%/}

mapfile -t pkgarr < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "${pkglists[@]}")
pkgs=$(IFS=,; echo "${pkgarr[*]}")
tool_versions=$(dpkg-query -W -f='${Package} ${Version}\n' debootstrap e2fsprogs 2>/dev/null || true)

key=$({
	cat "${pkglists[@]}" "$self" "$lib" "$mkeconf"
	echo "variant=$variant free=$free_mib"
	echo "suite=$suite arch=$arch mirror=$mirror security=$security"
	echo "SOURCE_DATE_EPOCH=$epoch"
	echo "$tool_versions"
} | sha256sum | cut -c1-16)
base=$dir/$name-$key
img=$base.ext4
log=$base.log
stamp=$base.stamp

publish() {
	mkdir -p "$out/images"
	cp "$base.json" "$out/images/$name.json"
	cp "$base.facts.json" "$out/images/$name.facts.json"
}

# Cache hit: nothing to build, and nothing to print.
if [ -f "$stamp" ] && [ -f "$img" ]; then
	publish
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "build-debian: building $name needs root (debootstrap chroots)" >&2
	exit 1
fi

# Two makes sharing the cache must not build the same key at once; the
# second waits, then finds the stamp.
exec 9>"$base.lock"
flock 9
if [ -f "$stamp" ] && [ -f "$img" ]; then
	publish
	exit 0
fi
rm -f "$stamp"

tmp=
cleanup() {
	[ -n "$tmp" ] && [ -d "$tmp" ] || return 0
	# debootstrap mounts proc and sys inside the target: undo anything
	# left mounted below $tmp (deepest first) and never delete across a
	# mount point.
	awk -v t="$tmp/" 'index($5 "/", t) == 1 { print $5 }' /proc/self/mountinfo |
		sort -r | while read -r m; do umount -l "$m" || true; done
	rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	echo "build-debian: $1 failed; last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit 1
}
# step WHAT CMD...: run CMD with its output in the log.
step() {
	local what=$1
	shift
	echo "== $what" >>"$log"
	"$@" >>"$log" 2>&1 || fail "$what"
}

echo "  IMAGE  $name (cache miss, a few minutes)" >&2
start=$(date +%s)
: >"$log"
echo "key $key: suite $suite, mirror $mirror, packages $pkgs" >>"$log"

tmp=$(mktemp -d "$dir/.build-$name.XXXXXX")
root=$tmp/root
mkdir -p "$dir/debs"

# A clean, fixed environment for everything that runs in the target:
# maintainer scripts honour SOURCE_DATE_EPOCH (py_compile then writes
# hash-checked .pyc, independent of file times), no host PATH shims.
clean_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
	TZ=UTC SOURCE_DATE_EPOCH="$epoch" PYTHONHASHSEED=0
	DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true)

step "debootstrap $suite" "${clean_env[@]}" debootstrap --variant=minbase \
	--merged-usr --arch="$arch" --components=main --include="$pkgs" \
	--keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
	--cache-dir="$dir/debs" "$suite" "$root" "$mirror"

# Nothing that boots through systemd, and no ssh server.
unwanted=$(dpkg-query --admindir="$root/var/lib/dpkg" -W \
	-f='${Package} ${db:Status-Abbrev}\n' 2>/dev/null |
	awk '$2 ~ /^ii/ && $1 ~ /^(systemd|systemd-sysv|openssh-server|dropbear.*)$/ { print $1 }')
if [ -n "$unwanted" ]; then
	echo "unwanted packages installed: $unwanted" >>"$log"
	fail "package check"
fi

configure() {
	# Files debootstrap copied from the host (with the host's modes)
	# are replaced, not rewritten in place.
	rm -f "$root/etc/hostname" "$root/etc/hosts" "$root/etc/resolv.conf" \
		"$root/etc/machine-id" "$root/etc/apt/sources.list"
	echo kiln >"$root/etc/hostname"
	cat >"$root/etc/hosts" <<-'EOF'
	127.0.0.1	localhost
	127.0.1.1	kiln
	::1	localhost ip6-localhost ip6-loopback
	ff02::1	ip6-allnodes
	ff02::2	ip6-allrouters
	EOF
	cat >"$root/etc/resolv.conf" <<-'EOF'
	# Placeholder from Kiln's image. Whoever gives the guest a network
	# writes the real file here (or, on a read-only root, mounts one
	# over it). Without a nameserver line the resolver asks 127.0.0.1;
	# names in /etc/hosts always resolve.
	options timeout:2 attempts:2
	EOF
	{
		echo "deb $mirror $suite main"
		echo "deb $mirror $suite-updates main"
		[ -z "$security" ] || echo "deb $security $suite-security main"
	} >"$root/etc/apt/sources.list"
	# Kiln's init mounts things here (argv, shares).
	mkdir -p "$root/kiln"
	chmod 0755 "$root/kiln"
	# No identity baked into a shared image.
	: >"$root/etc/machine-id"
	rm -f "$root/var/lib/dbus/machine-id"
	# Caches, lists, logs and backups the build left behind.
	rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
		"$root"/var/cache/apt/archives/partial/* \
		"$root"/var/lib/apt/lists/* \
		"$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
		"$root"/var/cache/ldconfig/aux-cache "$root"/etc/.pwd.lock \
		"$root"/tmp/* "$root"/var/tmp/* "$root"/run/* "$root"/debootstrap
	mkdir -p "$root/var/lib/apt/lists/partial"
	# Log files stay (wtmp, lastlog... are expected to exist), empty.
	find "$root/var/log" -type f -exec truncate -s 0 {} +
	chmod 1777 "$root/tmp" "$root/var/tmp"
	# The root user: present, with bash, locked password.
	grep -q '^root:[^:]*:0:0:[^:]*:/root:/bin/bash$' "$root/etc/passwd"
	# The unprivileged user agents run as (exec's "user": "agent"):
	# uid and gid 1000, bash, a home of its own, password locked. Its
	# password-change date is SOURCE_DATE_EPOCH's day (shadow honours
	# it), so the image stays reproducible.
	"${clean_env[@]}" chroot "$root" /usr/sbin/useradd --create-home \
		--uid 1000 --user-group --shell /bin/bash agent
	grep -q '^agent:[^:]*:1000:1000:[^:]*:/home/agent:/bin/bash$' \
		"$root/etc/passwd"
	# git refuses a repository another uid owns ("dubious ownership"):
	# a host directory bound in belongs to whoever made it on the host,
	# and the guest is one user's sandbox, so every directory is safe.
	printf '[safe]\n\tdirectory = *\n' >"$root/etc/gitconfig"
}
step "configure" configure

# What the image holds, checked in the image itself (its own bash and
# PATH), not assumed from the package list.
probe=(bash sh dash env ls cat cp mv rm mkdir ln chmod chown find xargs
	grep sed awk sort head tail tr cut wc tee date sleep tar gzip xz zstd
	curl wget git python3 pip3 perl ps top kill pgrep free ip ss ping fio
	node npm jq rg gcc cc make useradd
	apt apt-get apt-cache dpkg dpkg-query update-ca-certificates openssl
	mount umount hostname id su sudo which less vi nano ssh sshd systemctl)
# shellcheck disable=SC2016 # expanded by the image's bash
step "probe commands" chroot "$root" /usr/bin/env -i \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	/bin/bash -c 'for c; do
		p=$(type -P -- "$c") && [ -x "$p" ] &&
			printf "%s\t%s\n" "$c" "$p"
	done >/kiln-commands; :' probe "${probe[@]}"
mv "$root/kiln-commands" "$tmp/commands"
printf '%s\n' "${probe[@]}" >"$tmp/probed"
dpkg-query --admindir="$root/var/lib/dpkg" -W \
	-f='${Package}\t${Version}\n' "${pkgarr[@]}" >"$tmp/versions" 2>>"$log" ||
	fail "package versions"
npkgs=$(dpkg-query --admindir="$root/var/lib/dpkg" -W \
	-f='${db:Status-Abbrev}\n' | grep -c '^ii')

step "facts" "$py" - "$root" "$tmp" "$base.facts.json" "$npkgs" <<-'EOF'
import json, os, sys
root, tmp, dest, npkgs = sys.argv[1:]

def read(path):
    with open(root + path) as f:
        return f.read()

osr = {}
for line in read("/etc/os-release").splitlines():
    k, sep, v = line.partition("=")
    if sep:
        osr[k] = v.strip().strip('"')
login = next(l.split(":")[6] for l in read("/etc/passwd").splitlines()
             if l.startswith("root:"))
have = dict(l.split("\t") for l in open(tmp + "/commands").read().splitlines())
probed = open(tmp + "/probed").read().split()

facts = []
def fact(topic, relation, value):
    facts.append({"source": "config", "topic": topic,
                  "relation": relation, "value": value})

fact("os", "distribution", osr["ID"])
fact("os", "version", read("/etc/debian_version").strip())
fact("os", "version_id", osr["VERSION_ID"])
fact("os", "codename", osr["VERSION_CODENAME"])
fact("os", "pretty_name", osr["PRETTY_NAME"])
fact("os", "architecture", "x86_64")
fact("os", "package_manager", "apt")
fact("os", "package_backend", "dpkg")
fact("os", "packages_installed", int(npkgs))
fact("shell", "default", login)
fact("shell", "posix_sh", os.path.basename(os.readlink(root + "/usr/bin/sh")))
for line in read("/etc/passwd").splitlines():
    user, _, uid = line.split(":")[:3]
    if uid == "0" or 1000 <= int(uid) < 65534:
        fact("user", "exists", user)
for c in probed:
    fact("command", "available" if c in have else "absent", c)
for line in open(tmp + "/versions").read().splitlines():
    p, v = line.split("\t")
    fact("package", "installed", p + "=" + v)
with open(dest, "w") as f:
    json.dump(facts, f, indent=2)
    f.write("\n")
EOF

# Size: used space plus 25% plus $free_mib MiB, rounded up to MiB; inodes:
# the file count plus 25% plus 4096.
used_kib=$(du -sxk "$root" | cut -f1)
nfiles=$(find "$root" -xdev | wc -l)
size_mib=$(((used_kib * 5 / 4 + free_mib * 1024 + 1023) / 1024))
ninodes=$((nfiles + nfiles / 4 + 4096))
echo "used ${used_kib} KiB, $nfiles files -> ${size_mib} MiB, $ninodes inodes" >>"$log"

# Fixed times, UUID and hash seed (ext4-image.sh), then e2fsck -fn.
step "ext4" ext4_pack "$root" "$tmp/image" "$size_mib" "$ninodes" \
	kiln-root "$key" "$epoch"

digest=$(sha256sum "$tmp/image" | cut -d' ' -f1)
bytes=$(stat -c %s "$tmp/image")
mv "$tmp/image" "$img"
step "descriptor" ext4_descriptor "$base.json" "$name" "$img" "$digest" "$bytes"

echo "built in $(($(date +%s) - start)) s: $bytes bytes, sha256 $digest" >>"$log"
echo "$digest" >"$stamp"
publish
