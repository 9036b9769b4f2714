/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SNAPSHOT_FILE_H
#define KILN_SNAPSHOT_FILE_H

#include <fcntl.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/sha256.h"

/*
 * A snapshot directory on disk (Documentation/snapshots.md, "Layout"):
 * owner-only (0700, the caller's), each part a new file (0600, created
 * with O_EXCL: nothing is ever overwritten or followed), and the
 * manifest last, naming every part with its SHA-256. A directory
 * without a manifest is an unfinished snapshot.
 *
 * Guest memory is one sparse file as large as guest RAM that holds only
 * the pages that are not all zeros; the rest are holes (SEEK_DATA and
 * SEEK_HOLE find the data; a MAP_PRIVATE mapping reads holes as zeros).
 * Its digest is SNAP_DIGEST_PAGES, so that checking it reads the data
 * and never the holes.
 *
 * Every function reports one line in err and returns -errno.
 */

#define SNAP_FORMAT_VERSION 1
#define SNAP_MANIFEST	    "manifest.json"
#define SNAP_PAGE_SIZE	    4096U /* the memory file's unit */
#define SNAP_DIR_MODE	    0700
#define SNAP_FILE_MODE	    0600
#define SNAP_MANIFEST_MAX   (1U << 20)	/* bytes */
#define SNAP_PART_MAX	    (64U << 20) /* bytes: a state file, devices.json */
#define SNAP_SHA256_HEX	    SHA256_HEX_LEN

/*
 * The root disk (Documentation/snapshots.md, "The root disk"): an
 * ephemeral root's writable layer is the part SNAP_LAYER_FILE of kind
 * SNAP_LAYER_KIND; a persistent root's state file is referred to by the
 * manifest's SNAP_ROOT_STATE object {path, bytes, sha256: its pages
 * digest} as it was when the snapshot was taken; a cow root's block
 * store by the manifest's SNAP_ROOT_STORE object {socket, base, token:
 * the store's state token in hex} once the snapshot flushed to it.
 */
#define SNAP_LAYER_FILE "disk.delta"
#define SNAP_LAYER_KIND "disk"
#define SNAP_ROOT_STATE "rootState"
#define SNAP_ROOT_STORE "rootStore"

/*
 * SNAP_DIGEST_FILE: SHA-256 of the file's bytes (sha256sum's).
 * SNAP_DIGEST_PAGES: SHA-256 of, for every SNAP_PAGE_SIZE page of the
 * file that is not all zeros, in order, its offset (8 bytes,
 * little-endian) and its bytes; then the file's size (8 bytes,
 * little-endian). Holes and zero pages count alike.
 */
#define SNAP_DIGEST_FILE  "file"
#define SNAP_DIGEST_PAGES "pages"

/*
 * The only ways the writer opens: a directory, or a new file (the
 * seccomp filter allows openat with exactly these flags, vmm/seccomp.c).
 */
#define SNAP_OPEN_DIR (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define SNAP_OPEN_NEW (O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

struct snap_dir {
	int fd;
	json_t *parts; /* the manifest's "parts" so far */
};

/*
 * Make path (mkdir 0700), or take an existing directory that is the
 * caller's and exactly 0700 (-EPERM otherwise, naming the mode or the
 * owner). Not followed if a symbolic link.
 */
int __must_check snap_dir__create(struct snap_dir *d, const char *path,
				  char *err, size_t len);
/* A part from a buffer: file name, kind (the manifest's "kind"). */
int __must_check snap_dir__write_part(struct snap_dir *d, const char *file,
				      const char *kind, const void *buf,
				      size_t n, char *err, size_t len);
/* Guest memory: size bytes at mem, size a multiple of SNAP_PAGE_SIZE. */
int __must_check snap_dir__write_memory(struct snap_dir *d, const char *file,
					const uint8_t *mem, uint64_t size,
					char *err, size_t len);
/*
 * A sparse copy of the open file src, size bytes (whole pages): its data
 * extents (SEEK_DATA, SEEK_HOLE) read, and of them the pages that are
 * not all zeros written, the rest left holes; digest SNAP_DIGEST_PAGES.
 * The root disk's writable layer (Documentation/snapshots.md).
 */
int __must_check snap_dir__write_sparse(struct snap_dir *d, const char *file,
					const char *kind, int src,
					uint64_t size, char *err, size_t len);
/*
 * The manifest: fields (borrowed) plus "format" and "parts", written as
 * SNAP_MANIFEST, then the directory synced.
 */
int __must_check snap_dir__finish(struct snap_dir *d, const json_t *fields,
				  char *err, size_t len);
void snap_dir__close(struct snap_dir *d);

/* n bytes at p into fd at off, whole (EINTR retried): 0 or -errno. */
int __must_check snap_file__pwrite_all(int fd, const uint8_t *p, size_t n,
				       uint64_t off);

/* The digests above of an open file, as 64 hex digits and a NUL. */
int __must_check snap_file__sha256(int fd, char hex[SNAP_SHA256_HEX + 1]);
int __must_check snap_file__pages_sha256(int fd, char hex[SNAP_SHA256_HEX + 1]);

/*
 * Check the directory at path the way a restore will: owner-only
 * modes, a manifest of this format, every part there, a regular file of
 * the size and digest it names. 0 with the manifest in *manifest (the
 * caller's), or -errno: -EPERM (modes), -EINVAL (manifest), -EBADMSG (a
 * digest or size that does not match), another (I/O).
 */
int __must_check snap_dir__verify(const char *path, json_t **manifest,
				  char *err, size_t len);

#endif
