/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_BASELINE_H
#define KILN_BASELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "snapshot/load.h"

/*
 * The baseline cache (Documentation/snapshots.md, "Baselines"): a
 * directory of snapshots taken after a trusted boot and before the
 * first workload, one per configuration identity, without KVM.
 *
 *   CACHE/                    0700, the monitor's uid (refused otherwise)
 *     <identity hex>/         an entry: a snapshot directory (0700/0600)
 *     .tmp-<hex>-<pid>/       a capture being written (LOCK_EX held)
 *     .evict-<hex>-<pid>/     an entry being removed (LOCK_EX held)
 *
 * Leases are flock(2)s on the entry's directory: LOCK_SH for as long as
 * a VM restored from it runs (its memory file stays mapped), LOCK_EX
 * while a capture writes it or an eviction removes it. Least recently
 * used is the entry directory's mtime, set to now at every use.
 *
 * Every function reports one line in err (or why) and returns -errno.
 */

#define BASELINE_KEY_LEN      64 /* the identity digest's hex */
#define BASELINE_TMP_PREFIX   ".tmp-"
#define BASELINE_EVICT_PREFIX ".evict-"

/*
 * The entry name for an identity digest ("sha256:<64 hex>"): its hex.
 * -EINVAL for anything else, so a name is never a path.
 */
int __must_check baseline__key(const char *identity_digest,
			       char key[BASELINE_KEY_LEN + 1]);

/*
 * Open the cache directory at path, making it (0700) when missing. An
 * existing one must be a directory (not a symbolic link) of the
 * caller's euid with mode exactly 0700: -EPERM otherwise, naming the
 * mode or the owner. *fd is O_DIRECTORY, the caller's.
 */
int __must_check baseline__open_cache(const char *path, int *fd, char *err,
				      size_t len);

/*
 * Look up the entry key in the cache: 0 with a shared lease on it in
 * *lease_fd (the caller closes it to release) and the snapshot loaded
 * into l (snap_load__open: modes, format, every digest, and want);
 * -ENOENT when there is none; any other -errno when the candidate is
 * not usable, with why (one line): -EWOULDBLOCK, an exclusive lease is
 * held (a capture or an eviction: left alone); any snap_load__open
 * error, the entry then removed if no one else holds a lease on it.
 */
int __must_check baseline__lookup(int cache_fd, const char *cache,
				  const char *key,
				  const struct snap_expect *want,
				  struct snap_load *l, int *lease_fd, char *why,
				  size_t len);

/*
 * Remove the entry key whose directory the caller holds open in
 * lease_fd (leased or not), if no one else holds a lease on it: the
 * lease becomes exclusive (LOCK_EX | LOCK_NB), the entry is renamed out
 * of the way and removed. 0, -EWOULDBLOCK (leased by another: it
 * stays), or another -errno (logged).
 */
int baseline__discard(int cache_fd, const char *key, int lease_fd);

/*
 * Make CACHE/.tmp-<key>-<pid> (0700) and take LOCK_EX on it: 0 with the
 * directory in *fd and its name in name. baseline__publish renames it
 * to the entry once the snapshot in it is complete.
 */
#define BASELINE_TMP_NAME_LEN 96
int __must_check baseline__make_tmp(int cache_fd, const char *key, int *fd,
				    char name[BASELINE_TMP_NAME_LEN], char *err,
				    size_t len);
/*
 * renameat2(RENAME_NOREPLACE) of tmp to key, then fsync of the cache:
 * the entry appears whole or not at all; -EEXIST when another monitor published the same identity
 * first (tmp stays, the next sweep removes it).
 */
int __must_check baseline__publish(int cache_fd, const char *tmp,
				   const char *key, char *err, size_t len);

/*
 * Bring the cache within max_artifacts entries and max_bytes data bytes
 * (the st_blocks of the entries' files), removing the least recently
 * used first. An entry under any lease is skipped (it is in use, or
 * being written). Leftovers of a capture or eviction whose monitor
 * died (no lease held) are removed first. Each removal is logged. The
 * number of entries removed, or -errno.
 */
int __must_check baseline__evict(int cache_fd, uint64_t max_artifacts,
				 uint64_t max_bytes);

#endif
