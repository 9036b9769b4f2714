/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_ROOTFS_H
#define KILN_ROOTFS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * A root image descriptor (Documentation/rootfs.md): which raw or qcow2 file
 * to use as the guest's base disk, and the size and digest it must have.
 * Loading
 * checks the descriptor only; verifying checks the file against it.
 */

#define ROOTFS_BLOCK_SIZE    4096U /* sizeBytes must be a multiple */
#define ROOTFS_DIGEST_PREFIX "sha256:"
#define ROOTFS_DIGEST_LEN    (sizeof(ROOTFS_DIGEST_PREFIX) - 1 + 64)
#define ROOTFS_NAME_MAX	     128U
#define ROOTFS_FACTS_MAX     256U /* entries in a descriptor's "facts" */

struct rootfs_image {
	char *name;	     /* pinned: never a moving alias like "latest" */
	char *path;	     /* the base file; relative ones resolved against
			     * the descriptor's directory */
	char *format;	     /* "raw" or "qcow2" */
	bool qcow2;	     /* format is "qcow2" */
	char *architecture;  /* "x86_64" ("amd64", "x64" normalized to it) */
	char *digest;	     /* "sha256:" + 64 lowercase hex digits */
	uint64_t size_bytes; /* bytes the guest sees (qcow2: the virtual
			      * size), > 0, a multiple of ROOTFS_BLOCK_SIZE */
	char *descriptor;    /* where it was loaded from, for messages */
	/*
	 * The descriptor's optional "facts": an array of {"source":
	 * "config", "topic", "relation", "value"}, each checked (printable
	 * ASCII, none empty), at most ROOTFS_FACTS_MAX; NULL: none given.
	 */
	json_t *facts;
};

/*
 * Parse and check the descriptor at descriptor_path into img (which the
 * caller frees with rootfs__free, also on failure). err receives one line,
 * "descriptor-path: field: why"; returns -errno.
 */
int __must_check rootfs__load(struct rootfs_image *img,
			      const char *descriptor_path, char *err,
			      size_t errlen);

/*
 * Check the base file against the descriptor: a regular file, opened
 * read-only, of exactly sizeBytes (a qcow2 image: a header the reader
 * accepts, whose virtual size is sizeBytes), whose SHA-256 (over the
 * whole file) is the digest. The hash
 * is skipped when the verification cache (Documentation/rootfs.md) holds
 * an entry for the same file identity, timestamps and digest; a good hash
 * records one (failing to record it is only a warning). err names the
 * field that does not match (sizeBytes or digest) with both values.
 */
int __must_check rootfs__verify(const struct rootfs_image *img, char *err,
				size_t errlen);
/* The same, but always hashes (and refreshes the cache entry). */
int __must_check rootfs__verify_full(const struct rootfs_image *img, char *err,
				     size_t errlen);

/*
 * Refuse a persistent state file that is the base image or its descriptor
 * (same path, or the same inode when both exist).
 */
int __must_check rootfs__check_state_path(const struct rootfs_image *img,
					  const char *state_path, char *err,
					  size_t errlen);

/*
 * The descriptor's rule for "name" (1 to ROOTFS_NAME_MAX characters of
 * [A-Za-z0-9._+:/@-], no moving alias such as "latest"); err gets one
 * line starting with desc.
 */
int __must_check rootfs__check_name(const char *desc, const char *name,
				    char *err, size_t errlen);

void rootfs__free(struct rootfs_image *img); /* fields may be NULL */

#endif
