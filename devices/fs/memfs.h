/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_MEMFS_H
#define KILN_FS_MEMFS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/fs/backend.h"
#include "lib/log.h"

/*
 * The `memory` mount source: an in-RAM POSIX file system (regular files,
 * directories, symlinks, hard links, FIFOs and sockets), seeded with
 * files and bounded by max_bytes, which covers file data and metadata
 * alike and answers ENOSPC. Semantics and accounting:
 * Documentation/virtio-fs.md ("memory").
 */

#define MEMFS_DEFAULT_MAX_BYTES (64ULL << 20)

/* One seed file; its parents are created as 0755 directories. */
struct memfs_file {
	const char *path; /* absolute, e.g. "/etc/agent.conf" */
	const void *data;
	size_t len; /* bytes */
};

struct memfs_params {
	const char *name;		/* for the log; copied */
	const struct memfs_file *files; /* seed, copied */
	unsigned int nr_files;
	uint64_t max_bytes; /* 0: MEMFS_DEFAULT_MAX_BYTES */
};

/*
 * Builds the file system with its seed. -EINVAL (with a message naming
 * the path) for a bad seed path, -ENOSPC if the seed does not fit in
 * max_bytes, -ENOMEM. Free with fs_backend__destroy().
 */
int __must_check memfs__create(struct fs_backend **out,
			       const struct memfs_params *p);

#endif
