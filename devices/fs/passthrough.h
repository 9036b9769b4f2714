/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_FS_PASSTHROUGH_H
#define KILN_FS_PASSTHROUGH_H

#include <stdbool.h>

#include "lib/compiler.h"
#include "devices/fs/backend.h"
#include "lib/fdbudget.h"
#include "lib/log.h"

/*
 * The `bind` mount source: a host directory served to the guest, every
 * name resolved one component at a time beneath it (openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, O_NOFOLLOW)
 * so that nothing the guest sends, and no symlink a host process races in,
 * reaches outside `source`. Design, guarantees and the ownership mapping:
 * Documentation/virtio-fs.md ("bind").
 *
 * Masks: each mask path is absent from the guest's view of a read-only
 * bind; in a read-write bind it is served from the same path beneath
 * mask_storage instead, so nothing the guest does under it touches source.
 */
/*
 * Who the guest sees owning files, and what the host file gets
 * (Documentation/virtio-fs.md, "Ownership"):
 *
 * FS_OWNERSHIP_DEFAULT     mapped if the host file system holds user.*
 *                          xattrs, else squash with one warning line
 * FS_OWNERSHIP_MAPPED      the guest's uid, gid, mode and device numbers
 *                          in the user.kiln.stat xattr of a host file the
 *                          vmm's user owns; refused at create where the
 *                          host file system cannot hold it
 * FS_OWNERSHIP_SQUASH      everything the vmm's user's (shown as 0);
 *                          chown to other ids is EPERM
 * FS_OWNERSHIP_PASSTHROUGH the host's real ids and modes: a vmm running
 *                          as root only
 */
enum fs_ownership {
	FS_OWNERSHIP_DEFAULT,
	FS_OWNERSHIP_MAPPED,
	FS_OWNERSHIP_SQUASH,
	FS_OWNERSHIP_PASSTHROUGH,
};

struct fs_bind_params {
	const char *name;   /* for the log, e.g. "bind:/workspace"; copied */
	const char *source; /* absolute host directory */
	bool read_only;	    /* access "ro" */
	/* absolute paths inside the bind ("/node_modules", "/.env") */
	const char *const *mask_paths;
	unsigned int nr_mask_paths;
	/*
	 * Absolute host directory: required iff !read_only and
	 * nr_mask_paths > 0, NULL otherwise. Neither inside source nor
	 * containing it.
	 */
	const char *mask_storage;
	enum fs_ownership ownership;
	/*
	 * Host descriptors the mount may hold (node descriptors it closes
	 * least recently used first, and open files): 0 for half the soft
	 * RLIMIT_NOFILE at create (between 64 and 65536); else at least 8.
	 * Documentation/virtio-fs.md, "Limits".
	 */
	unsigned int max_fds;
	/*
	 * The monitor's descriptor budget (lib/fdbudget.h) the mount's
	 * descriptors are charged to as well: past it an open fails with
	 * EMFILE once no idle node descriptor is left to close. NULL: only
	 * max_fds. Borrowed: outlives the backend.
	 */
	struct fd_budget *fds;
};

/*
 * Checks p completely (each problem logged once, naming the path and why)
 * and opens source and mask_storage: call it before the seccomp filter is
 * installed. Afterwards the backend only uses *at() calls relative to
 * the descriptors it holds. Answers 0 and *out, or -errno (*out NULL).
 * Freed with fs_backend__destroy().
 */
int __must_check passthrough__create(struct fs_backend **out,
				     const struct fs_bind_params *p);

#endif
