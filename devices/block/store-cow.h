/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_STORE_COW_H
#define KILN_STORE_COW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/block/disk.h"
#include "devices/block/store.h"
#include "lib/compiler.h"

struct sock_fprog; /* lib/thread-filter.h */

/*
 * A cow root's layer over a block store (Documentation/rootfs.md, "cow
 * roots"). The disk underneath is an ephemeral one (its memfd delta is
 * the VM's local layer, with no cap of its own); this adds, per block:
 *
 *  - remote: the store holds it and the local layer does not yet. A
 *    read of it waits for a fetch, which puts the store's bytes in the
 *    local layer (then the disk maps the block as data);
 *  - dirty: the guest changed it (data or zeros) since the store last
 *    took it. A flush sends every dirty block, then the store's flush;
 *    dirty data blocks are capped by max_dirty_bytes (-ENOSPC past it).
 *
 * The store talk runs on a worker thread of its own, one job at a time
 * (a fetch or a flush: the queue is that one slot, the block device
 * parks the requests that wait for it). The block device's event loop
 * starts a job, reads done_fd through its ring, and calls
 * store_cow__finish. Everything but the job runs on that loop's thread,
 * which alone touches the disk; the worker only reads and writes the
 * delta's bytes at offsets the loop gave it, of blocks the loop keeps
 * every request away from until the job is finished.
 */

struct store_cow_params {
	const char *name;	  /* for the log; outlives the layer */
	struct disk *disk;	  /* borrowed: ephemeral, no dirty cap */
	struct store *store;	  /* taken: closed by store_cow__close */
	uint64_t max_dirty_bytes; /* unflushed data bytes; 0: no cap */
};

struct store_cow;

/*
 * Lists the store's blocks (remote from now on). On failure the store is
 * closed too, err says why.
 */
int __must_check store_cow__open(struct store_cow **out,
				 const struct store_cow_params *p, char *err,
				 size_t elen);
void store_cow__close(struct store_cow *c); /* NULL is fine */

/* The worker thread, under filter. */
int __must_check store_cow__start(struct store_cow *c,
				  const struct sock_fprog *filter);
/*
 * The VM ends: joins the worker (a job in flight ends first, within the
 * store's deadline), then sends every dirty block and flushes, once,
 * logging a failure. Call it after the block device's loop has stopped.
 */
void store_cow__stop(struct store_cow *c);

/* Readable (an eventfd) when a job has finished. */
int store_cow__done_fd(const struct store_cow *c);

/* ---- the block device's event loop only -------------------------------- */

bool store_cow__busy(const struct store_cow *c); /* a job in flight */
/* Blocks of [offset, offset + len) still only in the store. */
bool store_cow__missing(const struct store_cow *c, uint64_t offset,
			uint64_t len);
/* Blocks of [offset, offset + len) that the fetch in flight fills. */
bool store_cow__fetching(const struct store_cow *c, uint64_t offset,
			 uint64_t len);
/* Before a guest write: -ENOSPC past max_dirty_bytes. */
int __must_check store_cow__begin_write(struct store_cow *c, uint64_t offset,
					uint64_t len);
/* After a guest write (zero: a discard or write-zeroes) that completed. */
void store_cow__end_write(struct store_cow *c, uint64_t offset, uint64_t len,
			  bool zero);
/*
 * Starts fetching the first STORE_IO_BLOCKS missing blocks of the range
 * (-EBUSY while a job runs, -EINVAL when none is missing).
 */
int __must_check store_cow__fetch(struct store_cow *c, uint64_t offset,
				  uint64_t len);
/* Starts sending the dirty blocks and the store's flush; -EBUSY. */
int __must_check store_cow__flush(struct store_cow *c);
/*
 * After done_fd: the job's end, put in place (fetched blocks in the
 * disk's map; a failed flush's blocks dirty again). 0, or -EIO (logged
 * once for the layer's life) when the store failed it.
 */
int store_cow__finish(struct store_cow *c);

/*
 * A snapshot's (Documentation/snapshots.md, "The root disk"), on the
 * caller's thread, with the block device paused (so no job is in flight
 * and the loop touches nothing): every dirty block sent and flushed as a
 * guest FLUSH would be, then the store's state token into t. -EBUSY with
 * a job in flight; -EOPNOTSUPP for a store whose hello gave no token; a
 * failed flush leaves its blocks dirty. err says why.
 */
int __must_check store_cow__settle(struct store_cow *c, struct store_token *t,
				   char *err, size_t elen);
/* The state token the store's hello gave (len 0: none). */
const struct store_token *store_cow__hello_token(const struct store_cow *c);

/* From any thread: unflushed data bytes, and jobs the store failed. */
uint64_t store_cow__dirty_bytes(const struct store_cow *c);
uint64_t store_cow__errors(const struct store_cow *c);

#endif
