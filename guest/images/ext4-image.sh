# shellcheck shell=bash
# guest/images/ext4-image.sh - reproducible ext4 images, for the image
# builders to source (bash). Part of every image's cache key.
#
#   ext4_uuid TAG KEY
#   ext4_pack ROOT IMAGE SIZE_MIB INODES LABEL KEY EPOCH [OWNER]
#   ext4_descriptor DEST NAME PATH DIGEST BYTES
#
# ext4_pack writes no temporary files outside its IMAGE's directory and
# needs no privileges: mkfs.ext4 -d copies the tree, debugfs fixes up
# what mkfs copied from the build host (times, and with OWNER=0 owners).

ext4_conf=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mke2fs.conf

# ext4_uuid TAG KEY: a fixed UUID (version 4 layout) derived from both.
ext4_uuid() {
	echo "$1 $2" | sha256sum |
		sed -E 's/^(.{8})(.{4}).(.{3}).(.{3})(.{12}).*/\1-\2-4\3-8\4-\5/'
}

# ext4_pack ROOT IMAGE SIZE_MIB INODES LABEL KEY EPOCH [OWNER]
#
# Sets every time in ROOT to EPOCH, then builds IMAGE (SIZE_MIB, sparse)
# from it with mkfs.ext4 -d under guest/images/mke2fs.conf: UUID and
# directory hash seed from KEY, superblock times from EPOCH. mkfs copies
# each file's ctime, which user space cannot set, so debugfs sets atime
# and ctime of every inode to EPOCH afterwards; with OWNER (a uid, used as
# gid too) it also gives every inode that owner, for trees built without
# root. Ends with e2fsck -fn. Output goes to stdout/stderr; status 1 on
# failure.
ext4_pack() {
	local root=$1 image=$2 size_mib=$3 inodes=$4 label=$5 key=$6
	local epoch=$7 owner=${8:-}
	local fsenv=(env MKE2FS_CONFIG="$ext4_conf" E2FSPROGS_FAKE_TIME="$epoch"
		LC_ALL=C TZ=UTC)
	local cmds=$image.debugfs err=$image.debugfs.err

	find "$root" -xdev -exec touch -h -d "@$epoch" {} + || return 1
	rm -f "$image"
	"${fsenv[@]}" mkfs.ext4 -q -F -t ext4 -T default -L "$label" \
		-U "$(ext4_uuid kiln-image-uuid "$key")" -N "$inodes" -m 0 \
		-E "root_owner=0:0,hash_seed=$(ext4_uuid kiln-image-hash-seed "$key"),nodiscard" \
		-d "$root" "$image" "${size_mib}M" || return 1

	/usr/bin/python3 - "$root" "$cmds" "$epoch" "$owner" <<-'EOF' || return 1
	import os, sys
	root, dest, epoch, owner = sys.argv[1:]
	fields = [("atime", "@" + epoch), ("ctime", "@" + epoch)]
	if owner:
	    fields += [("uid", owner), ("gid", owner)]
	with open(dest, "w") as out:
	    for d, dirs, files in os.walk(root):
	        for n in [""] + dirs + files:
	            p = os.path.join(d, n)[len(root):] or "/"
	            if '"' in p or "\n" in p:
	                sys.exit("cannot name %r in debugfs" % p)
	            for field, value in fields:
	                out.write('sif "%s" %s %s\n' % (p, field, value))
	EOF
	# debugfs echoes every command on stdout and reports errors on
	# stderr, with an exit status of 0 either way: anything but its
	# banner is an error.
	echo "debugfs: $(wc -l <"$cmds") commands"
	"${fsenv[@]}" debugfs -w -f "$cmds" "$image" >/dev/null 2>"$err" ||
		return 1
	if grep -v '^debugfs [0-9]' "$err" >&2; then
		echo "debugfs failed" >&2
		return 1
	fi
	rm -f "$cmds" "$err"
	"${fsenv[@]}" e2fsck -fn "$image"
}

# ext4_descriptor DEST NAME PATH DIGEST BYTES: the image's JSON descriptor
# (Documentation/images.md).
ext4_descriptor() {
	/usr/bin/python3 - "$@" <<-'EOF'
	import json, sys
	dest, name, path, digest, size = sys.argv[1:]
	with open(dest, "w") as f:
	    json.dump({"name": name, "path": path, "format": "raw",
	               "architecture": "x86_64", "digest": "sha256:" + digest,
	               "sizeBytes": int(size)}, f, indent=2)
	    f.write("\n")
	EOF
}
