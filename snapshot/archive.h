/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SNAPSHOT_ARCHIVE_H
#define KILN_SNAPSHOT_ARCHIVE_H

#include <stddef.h>

#include "lib/compiler.h"

/*
 * A snapshot directory as one file, for moving it between hosts
 * (Documentation/snapshots.md, "Archives"): one zstd frame (content
 * checksum on) around
 *
 *   "KILNSNAP", le32 SNAP_ARCHIVE_VERSION,
 *   per file: le16 name length (1..SNAP_ARCHIVE_NAME_MAX), the name,
 *             le64 size, then chunks { le64 offset, le64 length, the
 *             bytes }, in increasing offset, ended by a chunk of length
 *             0 (offset 0); what no chunk covers is a hole,
 *   le16 0 after the last file.
 *
 * The manifest comes first; then every part it names, once, each of
 * the size it says. Nothing else may be in it, nor after it.
 *
 * Packing and unpacking run offline, never in a running VM's process
 * (its seccomp filter opens no existing file). Every function reports
 * one line in err and returns -errno.
 */

#define SNAP_ARCHIVE_MAGIC    "KILNSNAP"
#define SNAP_ARCHIVE_VERSION  1
#define SNAP_ARCHIVE_NAME_MAX 255
#define SNAP_ARCHIVE_LEVEL    3 /* zstd's own default */

/*
 * What unpacking takes from a hostile archive, at most (a small archive
 * must not fill the disk): a part of kind "memory" is exactly the
 * manifest's "memoryBytes", itself at most SNAP_ARCHIVE_MEMORY_MAX; one
 * of kind "disk" (the root's writable layer) at most
 * SNAP_ARCHIVE_DISK_MAX; any other at most SNAP_PART_MAX (what a
 * restore reads). The bytes written (the pages that are not all zeros:
 * the rest stay holes) at most SNAP_ARCHIVE_RATIO_MAX times the
 * archive's own size, and each write only with its bytes plus
 * SNAP_ARCHIVE_FREE_MIN free on the file system (statvfs).
 */
#define SNAP_ARCHIVE_MEMORY_MAX (1ULL << 40)  /* bytes: 1 TiB of RAM */
#define SNAP_ARCHIVE_DISK_MAX	(16ULL << 40) /* bytes */
#define SNAP_ARCHIVE_RATIO_MAX	4096U	      /* zstd's best is 32768 */
#define SNAP_ARCHIVE_FREE_MIN	(64ULL << 20) /* bytes left to others */

/*
 * Verify the snapshot directory dir (snap_dir__verify: modes, manifest,
 * digests), then write it to the new file (0600, O_EXCL) at zstd level
 * level. A snapshot that refers to a file outside it (a persistent
 * root's state file) is refused: it would not be whole on another host.
 * The file is removed again on any failure.
 */
int __must_check snap_archive__pack(const char *dir, const char *file,
				    int level, char *err, size_t len);

/*
 * Write the archive file into the new directory dir (made 0700; one
 * that exists is refused), each file 0600 with its holes, then verify
 * the result as a restore will. On any failure nothing of dir is left:
 * a truncated, corrupt or hostile archive (a name with '/', a file the
 * manifest does not name, a chunk outside its file, bytes after the
 * end, a size past the bounds above: -EFBIG naming the file and the
 * bound; too little free space: -ENOSPC) is named in err.
 */
int __must_check snap_archive__unpack(const char *file, const char *dir,
				      char *err, size_t len);

#endif
