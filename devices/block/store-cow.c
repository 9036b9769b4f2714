// SPDX-License-Identifier: GPL-2.0
/*
 * A cow root's layer over a block store (see store-cow.h): the per-block
 * state, the worker thread and its one job slot.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/block/store-cow.h"
#include "lib/log.h"
#include "lib/warn.h"
#include "lib/worker.h"

#define BS STORE_BLOCK_SIZE

/* Per block, the event loop's (cow->state). */
#define BLK_REMOTE     0x1 /* in the store, not in the local layer */
#define BLK_DIRTY_DATA 0x2 /* changed: send its bytes */
#define BLK_DIRTY_ZERO 0x4 /* changed to zeros: send a zero chunk */
#define BLK_FETCHING   0x8 /* the fetch in flight fills it */
#define BLK_DIRTY      (BLK_DIRTY_DATA | BLK_DIRTY_ZERO)

enum job_kind { JOB_NONE, JOB_FETCH, JOB_FLUSH };

struct store_cow {
	const char *name;
	struct disk *disk;
	struct store *store;
	uint64_t nr_blocks;
	uint64_t limit_blocks; /* dirty data blocks; UINT64_MAX: no cap */
	uint8_t *state;	       /* nr_blocks of BLK_* */
	uint64_t dirty_blocks; /* BLK_DIRTY_DATA ones; atomic reads */
	uint64_t errors;       /* atomic */
	bool warned;

	int data_fd; /* the delta: block n at data_offset + n BS */
	uint64_t data_offset;

	/* The job: set up by the loop, run by the worker, finished by both. */
	struct worker worker;
	int job_fd;	      /* the loop -> the worker: a job is set up */
	int done_fd;	      /* the worker -> the loop: it has run */
	pthread_mutex_t lock; /* the fields below, between the two */
	bool lock_ok;
	enum job_kind kind;
	bool ran;   /* the worker is done with it */
	int result; /* 0 or -errno */
	char err[320];
	/* fetch: blocks ascending, their ranges, their bytes */
	uint64_t fetch[STORE_IO_BLOCKS];
	unsigned int nr_fetch;
	struct store_range ranges[STORE_IO_BLOCKS];
	unsigned int nr_ranges;
	uint8_t *fetch_buf; /* STORE_IO_BLOCKS * BS */
	/* flush: each block's BLK_DIRTY_* when the job was set up */
	uint8_t *flushing;
	uint8_t block[BS]; /* the worker's copy of one block */
};

static void note_dirty(struct store_cow *c, uint64_t n)
{
	__atomic_store_n(&c->dirty_blocks, n, __ATOMIC_RELAXED);
}

/* ---- the worker --------------------------------------------------------- */

static int full_pwrite(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= n;
		off += n;
	}
	return 0;
}

static int full_pread(int fd, uint8_t *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n) { /* past the end of a sparse delta: zeros */
			memset(p, 0, len);
			return 0;
		}
		p += n;
		len -= n;
		off += n;
	}
	return 0;
}

static int run_fetch(struct store_cow *c)
{
	int ret = store__read(c->store, c->ranges, c->nr_ranges, c->fetch_buf,
			      c->err, sizeof(c->err));

	for (unsigned int i = 0; !ret && i < c->nr_fetch; i++) {
		ret = full_pwrite(c->data_fd, c->fetch_buf + (size_t)i * BS, BS,
				  c->data_offset + c->fetch[i] * BS);
		if (ret)
			snprintf(c->err, sizeof(c->err),
				 "block %" PRIu64 " into the local layer: %s",
				 c->fetch[i], strerror(-ret));
	}
	return ret;
}

/* Sends the blocks of c->flushing, then the store's flush. */
static int run_flush(struct store_cow *c)
{
	int ret;

	store__write_begin(c->store);
	for (uint64_t n = 0; n < c->nr_blocks; n++) {
		const uint8_t *data = NULL;

		if (!c->flushing[n])
			continue;
		if (c->flushing[n] & BLK_DIRTY_DATA) {
			ret = full_pread(c->data_fd, c->block, BS,
					 c->data_offset + n * BS);
			if (ret) {
				snprintf(c->err, sizeof(c->err),
					 "block %" PRIu64
					 " from the local layer: %s",
					 n, strerror(-ret));
				return ret;
			}
			data = c->block;
		}
		ret = store__write_add(c->store, n, data);
		if (ret == -E2BIG) {
			ret = store__write_send(c->store, c->err,
						sizeof(c->err));
			if (ret)
				return ret;
			store__write_begin(c->store);
			ret = store__write_add(c->store, n, data);
		}
		if (ret)
			return ret;
	}
	if (store__write_count(c->store)) {
		ret = store__write_send(c->store, c->err, sizeof(c->err));
		if (ret)
			return ret;
	}
	return store__flush(c->store, c->err, sizeof(c->err));
}

static void run_job(struct store_cow *c)
{
	enum job_kind kind;
	int ret;

	pthread_mutex_lock(&c->lock);
	kind = c->ran ? JOB_NONE : c->kind;
	pthread_mutex_unlock(&c->lock);
	if (kind == JOB_NONE)
		return;
	c->err[0] = '\0';
	ret = kind == JOB_FETCH ? run_fetch(c) : run_flush(c);
	pthread_mutex_lock(&c->lock);
	c->result = ret;
	c->ran = true;
	pthread_mutex_unlock(&c->lock);
	worker__wake(c->done_fd, c->name, "store job done");
}

static void *worker_loop(void *arg)
{
	struct store_cow *c = arg;
	struct pollfd pfd[2] = {
		{ .fd = c->job_fd, .events = POLLIN },
		{ .fd = c->worker.stop_fd, .events = POLLIN },
	};
	uint64_t v;

	worker__block_signals();
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			pr_err("%s: block store worker: poll: %s", c->name,
			       strerror(errno));
			return NULL;
		}
		/* A job set up before the stop still runs. */
		if (pfd[0].revents && read(c->job_fd, &v, sizeof(v)) > 0)
			run_job(c);
		if (pfd[1].revents)
			return NULL;
	}
}

/* ---- the loop's side ---------------------------------------------------- */

static bool range_blocks(const struct store_cow *c, uint64_t offset,
			 uint64_t len, uint64_t *first, uint64_t *end)
{
	if (offset % BS || len % BS || offset / BS > c->nr_blocks ||
	    len / BS > c->nr_blocks - offset / BS)
		return false;
	*first = offset / BS;
	*end = *first + len / BS;
	return true;
}

static bool any(const struct store_cow *c, uint64_t offset, uint64_t len,
		uint8_t bits)
{
	uint64_t first, end;

	if (!range_blocks(c, offset, len, &first, &end))
		return false;
	for (uint64_t n = first; n < end; n++)
		if (c->state[n] & bits)
			return true;
	return false;
}

bool store_cow__busy(const struct store_cow *c)
{
	return c->kind != JOB_NONE;
}

bool store_cow__missing(const struct store_cow *c, uint64_t offset,
			uint64_t len)
{
	return any(c, offset, len, BLK_REMOTE);
}

bool store_cow__fetching(const struct store_cow *c, uint64_t offset,
			 uint64_t len)
{
	return any(c, offset, len, BLK_FETCHING);
}

int store_cow__begin_write(struct store_cow *c, uint64_t offset, uint64_t len)
{
	uint64_t first, end, fresh = 0;

	if (!range_blocks(c, offset, len, &first, &end))
		return -EINVAL;
	for (uint64_t n = first; n < end; n++)
		fresh += !(c->state[n] & BLK_DIRTY_DATA);
	/*
	 * Checked as a write starts: writes in flight together may pass the
	 * cap by what they hold (the device's request slots bound that).
	 */
	if (c->dirty_blocks + fresh > c->limit_blocks)
		return -ENOSPC;
	return 0;
}

void store_cow__end_write(struct store_cow *c, uint64_t offset, uint64_t len,
			  bool zero)
{
	uint64_t first, end, dirty = c->dirty_blocks;

	if (!range_blocks(c, offset, len, &first, &end))
		return;
	for (uint64_t n = first; n < end; n++) {
		dirty -= !!(c->state[n] & BLK_DIRTY_DATA);
		c->state[n] &= ~(BLK_REMOTE | BLK_DIRTY);
		c->state[n] |= zero ? BLK_DIRTY_ZERO : BLK_DIRTY_DATA;
		dirty += !zero;
	}
	note_dirty(c, dirty);
}

/* Hands the job set up in c to the worker. */
static void post(struct store_cow *c, enum job_kind kind)
{
	pthread_mutex_lock(&c->lock);
	c->kind = kind;
	c->ran = false;
	c->result = 0;
	pthread_mutex_unlock(&c->lock);
	worker__wake(c->job_fd, c->name, "store job");
}

int store_cow__fetch(struct store_cow *c, uint64_t offset, uint64_t len)
{
	uint64_t first, end;

	if (c->kind != JOB_NONE)
		return -EBUSY;
	if (!range_blocks(c, offset, len, &first, &end))
		return -EINVAL;
	c->nr_fetch = 0;
	c->nr_ranges = 0;
	for (uint64_t n = first; n < end && c->nr_fetch < STORE_IO_BLOCKS;
	     n++) {
		struct store_range *r =
			c->nr_ranges ? &c->ranges[c->nr_ranges - 1] : NULL;

		if (!(c->state[n] & BLK_REMOTE))
			continue;
		c->state[n] |= BLK_FETCHING;
		if (r && r->first + r->count == n)
			r->count++;
		else
			c->ranges[c->nr_ranges++] =
				(struct store_range){ .first = n, .count = 1 };
		c->fetch[c->nr_fetch++] = n;
	}
	if (!c->nr_fetch)
		return -EINVAL;
	post(c, JOB_FETCH);
	return 0;
}

/* The dirty blocks move to c->flushing; the count starts again. */
static void take_dirty(struct store_cow *c)
{
	for (uint64_t n = 0; n < c->nr_blocks; n++) {
		c->flushing[n] = c->state[n] & BLK_DIRTY;
		c->state[n] &= ~BLK_DIRTY;
	}
	note_dirty(c, 0);
}

/* A failed flush: its blocks are dirty again, unless changed since. */
static void untake_dirty(struct store_cow *c)
{
	uint64_t dirty = c->dirty_blocks;

	for (uint64_t n = 0; n < c->nr_blocks; n++) {
		if (c->flushing[n] && !(c->state[n] & BLK_DIRTY)) {
			c->state[n] |= c->flushing[n];
			dirty += !!(c->flushing[n] & BLK_DIRTY_DATA);
		}
		c->flushing[n] = 0;
	}
	note_dirty(c, dirty);
}

int store_cow__flush(struct store_cow *c)
{
	if (c->kind != JOB_NONE)
		return -EBUSY;
	take_dirty(c);
	post(c, JOB_FLUSH);
	return 0;
}

/* The fetched blocks are the local layer's now: the disk maps them. */
static void place_fetched(struct store_cow *c, bool ok)
{
	for (unsigned int i = 0; i < c->nr_fetch; i++) {
		uint64_t n = c->fetch[i], reserved;
		struct disk_extent ext;

		c->state[n] &= ~BLK_FETCHING;
		if (!ok)
			continue;
		/* No cap on this disk: only a bad range fails, never here. */
		if (disk__begin_write(c->disk, n * BS, BS, &ext, &reserved))
			continue;
		disk__end_write(c->disk, n * BS, BS, reserved, true);
		c->state[n] &= ~BLK_REMOTE;
	}
}

static void fail(struct store_cow *c, const char *err)
{
	__atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
	warn__once(&c->warned, c->name,
		   "; its requests fail (further errors not logged)",
		   "block store: %s", err[0] ? err : "failed");
}

int store_cow__finish(struct store_cow *c)
{
	enum job_kind kind;
	bool ran;
	int ret;

	pthread_mutex_lock(&c->lock);
	kind = c->kind;
	ran = c->ran;
	ret = c->result;
	pthread_mutex_unlock(&c->lock);
	if (kind == JOB_NONE || !ran)
		return kind == JOB_NONE ? 0 : -EAGAIN;
	if (kind == JOB_FETCH)
		place_fetched(c, !ret);
	else if (ret)
		untake_dirty(c);
	else
		memset(c->flushing, 0, c->nr_blocks);
	if (ret)
		fail(c, c->err);
	pthread_mutex_lock(&c->lock);
	c->kind = JOB_NONE;
	pthread_mutex_unlock(&c->lock);
	return ret ? -EIO : 0;
}

/* ---- a snapshot ------------------------------------------------------------ */

int store_cow__settle(struct store_cow *c, struct store_token *t, char *err,
		      size_t elen)
{
	enum job_kind kind;
	int ret;

	pthread_mutex_lock(&c->lock);
	kind = c->kind;
	pthread_mutex_unlock(&c->lock);
	if (kind != JOB_NONE) {
		snprintf(err, elen, "block store: a job is still in flight");
		return -EBUSY;
	}
	if (!store__hello_token(c->store)->len) {
		snprintf(err, elen,
			 "block store: its hello gave no state token (a "
			 "store without tokens cannot be snapshotted)");
		return -EOPNOTSUPP;
	}
	/* The worker is idle (no job): its buffers are free to use here. */
	take_dirty(c);
	c->err[0] = '\0';
	ret = run_flush(c);
	if (ret) {
		__atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
		untake_dirty(c);
		snprintf(err, elen, "block store: flushing: %s",
			 c->err[0] ? c->err : strerror(-ret));
		return ret;
	}
	memset(c->flushing, 0, c->nr_blocks);
	return store__state(c->store, t, err, elen);
}

const struct store_token *store_cow__hello_token(const struct store_cow *c)
{
	return store__hello_token(c->store);
}

/* ---- life ---------------------------------------------------------------- */

static void mark_remote(void *arg, uint64_t block)
{
	struct store_cow *c = arg;

	c->state[block] |= BLK_REMOTE;
}

/*
 * Where the delta keeps block 0 (disk.h: block n at the same offset
 * from it as in the base): a write's extent, begun and ended unwritten.
 */
static int find_layer(struct store_cow *c)
{
	struct disk_extent ext;
	uint64_t reserved;
	int ret;

	ret = disk__begin_write(c->disk, 0, BS, &ext, &reserved);
	if (ret)
		return ret;
	disk__end_write(c->disk, 0, BS, reserved, false);
	c->data_fd = ext.fd;
	c->data_offset = ext.offset;
	return 0;
}

int store_cow__open(struct store_cow **out, const struct store_cow_params *p,
		    char *err, size_t elen)
{
	struct store_cow *c;
	int ret = -ENOMEM;

	c = calloc(1, sizeof(*c));
	if (!c) {
		store__close(p->store);
		snprintf(err, elen, "block store: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	worker__init(&c->worker);
	c->job_fd = c->done_fd = -1;
	c->name = p->name;
	c->disk = p->disk;
	c->store = p->store;
	c->nr_blocks = disk__size(p->disk) / BS;
	c->limit_blocks =
		p->max_dirty_bytes ? p->max_dirty_bytes / BS : UINT64_MAX;
	if (pthread_mutex_init(&c->lock, NULL))
		goto out_err;
	c->lock_ok = true;
	c->state = calloc(c->nr_blocks ? c->nr_blocks : 1, 1);
	c->flushing = calloc(c->nr_blocks ? c->nr_blocks : 1, 1);
	c->fetch_buf = malloc((size_t)STORE_IO_BLOCKS * BS);
	if (!c->state || !c->flushing || !c->fetch_buf)
		goto out_err;
	ret = find_layer(c);
	if (ret) {
		snprintf(err, elen, "block store: the local layer: %s",
			 strerror(-ret));
		goto out_close;
	}
	c->job_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->job_fd < 0 || c->done_fd < 0 || worker__open(&c->worker)) {
		ret = -errno;
		goto out_err;
	}
	ret = store__list(c->store, mark_remote, c, err, elen);
	if (ret)
		goto out_close;
	*out = c;
	return 0;

out_err:
	snprintf(err, elen, "block store: %s", strerror(-ret));
out_close:
	store_cow__close(c);
	return ret;
}

int store_cow__start(struct store_cow *c, const struct sock_fprog *filter)
{
	return worker__start(&c->worker, filter, worker_loop, c);
}

void store_cow__stop(struct store_cow *c)
{
	char err[sizeof(c->err)];
	int ret;

	if (!c || !c->worker.started)
		return;
	worker__exit(&c->worker, c->name);
	/* A job the loop never finished: its blocks put back in place. */
	if (c->kind != JOB_NONE) {
		if (!c->ran)
			run_job(c);
		store_cow__finish(c);
	}
	take_dirty(c);
	if (!memchr(c->flushing, BLK_DIRTY_DATA, c->nr_blocks) &&
	    !memchr(c->flushing, BLK_DIRTY_ZERO, c->nr_blocks))
		return;
	c->err[0] = '\0';
	ret = run_flush(c);
	if (ret) {
		__atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
		snprintf(err, sizeof(err), "%s", c->err);
		pr_err("%s: block store: the changes since the guest's last "
		       "flush were not stored: %s",
		       c->name, err[0] ? err : strerror(-ret));
		untake_dirty(c);
	}
}

void store_cow__close(struct store_cow *c)
{
	if (!c)
		return;
	worker__exit(&c->worker, c->name);
	if (c->job_fd >= 0)
		close(c->job_fd);
	if (c->done_fd >= 0)
		close(c->done_fd);
	if (c->lock_ok)
		pthread_mutex_destroy(&c->lock);
	store__close(c->store);
	free(c->state);
	free(c->flushing);
	free(c->fetch_buf);
	free(c);
}

int store_cow__done_fd(const struct store_cow *c)
{
	return c->done_fd;
}

uint64_t store_cow__dirty_bytes(const struct store_cow *c)
{
	return __atomic_load_n(&c->dirty_blocks, __ATOMIC_RELAXED) * BS;
}

uint64_t store_cow__errors(const struct store_cow *c)
{
	return __atomic_load_n(&c->errors, __ATOMIC_RELAXED);
}
