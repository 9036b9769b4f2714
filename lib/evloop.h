/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_EVLOOP_H
#define KILN_LIB_EVLOOP_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/worker.h"

/*
 * One event loop on io_uring, for every device and the monitor's main
 * thread: the ring, a stop eventfd, and completions dispatched by what
 * rides in their user_data. A device adds handlers, not loops:
 *
 *	evloop__init(&d->loop, name);             in create, before any fail
 *	evloop__open(&d->loop, &params);          the ring and the stop fd
 *	evloop__read_eventfd(&d->loop, &d->kick, fd, &d->kick_buf);
 *	evloop__start(&d->loop, &ops, d, filter); its own thread, filtered
 *	evloop__exit(&d->loop);                   stop, join, close the ring
 *
 * A submission's user_data is either a struct ev_source (tag 0: its
 * handler is called with the result) or an 8-byte aligned pointer ORed
 * with a tag 1..EVLOOP_TAG_MAX, given to the handler set for that tag
 * (per-request completions, like a device's I/O, that carry no source).
 *
 * Each round submits what was queued, waits for one completion at least
 * (unless the last round said there is more to do), calls ops->begin,
 * the handlers of every completion there is, then ops->end. Handlers
 * re-arm what they want again. The stop eventfd, or evloop__stop() from
 * a handler, ends the loop after the round.
 */

#define EVLOOP_TAG_MASK 0x7UL
#define EVLOOP_TAG_MAX	7U

/* Opcodes a loop may declare; IORING_REGISTER_PROBE's table size. */
#define EVLOOP_MAX_OPCODES 16U
#define EVLOOP_PROBE_OPS   256U /* sqe->opcode is a u8 */

struct ev_source {
	void (*fn)(void *arg, int res); /* res: the CQE's */
	void *arg;
};

struct evloop_ops {
	/* Before a round's completions (take the device lock). */
	void (*begin)(void *arg);
	/* After them; true: work is left, look again without waiting. */
	bool (*end)(void *arg);
};

struct evloop_params {
	unsigned int sq_entries;
	unsigned int cq_entries; /* 0: twice sq_entries */
	/*
	 * What the loop's submissions may be (IORING_OP_*), besides the
	 * loop's own READ: registered as the ring's restrictions
	 * (IORING_REGISTER_RESTRICTIONS; registration itself only
	 * IORING_REGISTER_SYNC_CANCEL), so that a ring cannot be used to get
	 * around the seccomp filter. Every ring is restricted: a kernel
	 * that refuses, or lacks one of the opcodes, fails evloop__open().
	 */
	const uint8_t *opcodes;
	unsigned int nr_opcodes; /* at most EVLOOP_MAX_OPCODES */
};

struct evloop {
	const char *name; /* for the log; outlives the loop */
	struct io_uring ring;
	bool ring_ok;
	bool stopping;
	struct worker worker;
	struct ev_source stop;
	const struct evloop_ops *ops;
	void *arg;
	struct {
		void (*fn)(void *arg, void *ptr, int res);
		void *arg;
	} tags[EVLOOP_TAG_MAX + 1];
};

void evloop__init(struct evloop *l, const char *name);
int __must_check evloop__open(struct evloop *l, const struct evloop_params *p);
/* Stops and joins the thread if it runs, closes the ring and stop fd. */
void evloop__exit(struct evloop *l);

/* Completions with tag 1..EVLOOP_TAG_MAX go to fn(arg, pointer, res). */
void evloop__set_tag_handler(struct evloop *l, unsigned int tag,
			     void (*fn)(void *arg, void *ptr, int res),
			     void *arg);

/*
 * On a thread of its own (signals blocked), until the stop fd says so;
 * the thread runs under filter (lib/thread-filter.h) from its start.
 */
int __must_check evloop__start(struct evloop *l, const struct evloop_ops *ops,
			       void *arg, const struct sock_fprog *filter);
/*
 * On the caller's thread, until a handler or ops->end calls
 * evloop__stop(). 0, or the -errno of a ring that failed.
 */
int evloop__run(struct evloop *l, const struct evloop_ops *ops, void *arg);
/* From a handler or an op: this is the last round. */
void evloop__stop(struct evloop *l);

static inline struct io_uring *evloop__ring(struct evloop *l)
{
	return &l->ring;
}

/*
 * A free submission entry. Loops size their completion ring for all
 * they keep in flight, so making room only ever takes a submit.
 */
struct io_uring_sqe *evloop__get_sqe(struct evloop *l);

/* Arms one completion for src. buf and ts must stay until it comes. */
void evloop__read(struct evloop *l, struct ev_source *src, int fd, void *buf,
		  unsigned int len, uint64_t offset);
void evloop__read_eventfd(struct evloop *l, struct ev_source *src, int fd,
			  uint64_t *buf);
void evloop__poll(struct evloop *l, struct ev_source *src, int fd,
		  unsigned int events);
void evloop__timeout(struct evloop *l, struct ev_source *src,
		     struct __kernel_timespec *ts, uint64_t ns);

/*
 * From any thread: cancel what src has in flight, waiting until the
 * kernel has (IORING_REGISTER_SYNC_CANCEL); its completion, -ECANCELED
 * or the result if it finished first, still reaches the loop. -ENOENT:
 * nothing of src's is in the kernel (done, or not yet submitted).
 */
int evloop__cancel(struct evloop *l, struct ev_source *src);

#endif
