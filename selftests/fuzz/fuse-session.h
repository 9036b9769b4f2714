/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FUZZ_FUSE_SESSION_H
#define KILN_SELFTESTS_FUZZ_FUSE_SESSION_H

/*
 * What the FUSE decoder's targets share (fuse.c over the in-memory
 * backend, fuse_bind.c over the bind backend, fuse_virtual.c over the
 * virtual one): a guest's session with devices/fs/fuse.c, as virtio-fs
 * drives it, and the checks of every reply.
 *
 * Input: requests, each two bytes (little-endian) of its length, one of
 * the reply buffer's, a byte of how the two are split into segments,
 * and the request bytes (a fuse_in_header and its arguments). The
 * session opens with a FUSE_INIT of its own first, so inputs start at
 * the operations.
 *
 * Checked for every request: it is answered (or, for those that take
 * none, not) at once, never parked; or, with the server on a ring (a
 * READ or WRITE through the backend's io_fd), once the ring completes
 * what the server queued for it; or, with a backend that forwards
 * (f->forwards), once the backend answers, from its own thread, within
 * FUZZ_FUSE_WAIT_S. A reply fits the buffer the guest gave,
 * its header says its own length and the request's unique, its error is
 * 0 or a negative errno.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <time.h>

#include "devices/fs/fuse.h"
#include "lib/iovec.h"
#include "selftests/fuzz/fuzz.h"

#define FUZZ_FUSE_MAX_REQUESTS 64
#define FUZZ_FUSE_REPLY_MAX    ((64U << 10) + 4096) /* a READDIR's and a bit */
#define FUZZ_FUSE_MAX_SEGS     8U
#define FUZZ_FUSE_IO_TAG       1U  /* in the ring's user_data */
#define FUZZ_FUSE_MAX_IO       64U /* completions one request may take */
#define FUZZ_FUSE_INIT_UNIQUE  1
#define FUZZ_FUSE_ROOT_NODE    1
#define FUZZ_FUSE_WAIT_S       10 /* a forwarded request's answer, at most */

struct fuzz_fuse {
	struct fuse_req req;
	struct iovec out[FUZZ_FUSE_MAX_SEGS], in[FUZZ_FUSE_MAX_SEGS];
	uint8_t *reply;
	/* The server's ring (fuse_server_params.ring, FUZZ_FUSE_IO_TAG), or NULL. */
	struct io_uring *ring;
	/* The backend forwards: requests park and end on its thread. */
	bool forwards;
	/* done, parked and len are under lock once a request is parked. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool parked;
	bool done;
	uint32_t len;
};

static inline void fuzz_fuse_on_park(struct fuse_req *req)
{
	struct fuzz_fuse *f = (struct fuzz_fuse *)req;

	fuzz_check(f->forwards);
	pthread_mutex_lock(&f->lock);
	fuzz_check(!f->done && !f->parked);
	f->parked = true;
	pthread_mutex_unlock(&f->lock);
}

/* As the device does: a parked request's reply is copied into its buffers. */
static inline void fuzz_fuse_on_done(struct fuse_req *req, const void *reply,
				     uint32_t len)
{
	struct fuzz_fuse *f = (struct fuzz_fuse *)req;

	pthread_mutex_lock(&f->lock);
	fuzz_check(!f->done && (!reply || f->parked));
	fuzz_check(len <= req->in_len);
	if (reply)
		fuzz_check(iov__from_buf(req->in, req->nr_in, 0, reply, len) ==
			   len);
	f->done = true;
	f->len = len;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static const struct fuse_req_ops fuzz_fuse_ops = {
	.park = fuzz_fuse_on_park,
	.done = fuzz_fuse_on_done,
};

/* buf[0, len) as up to nr segments: cut at the split byte's choices. */
static inline unsigned int fuzz_fuse_split(struct iovec *iov, uint8_t *buf,
					   size_t len, uint8_t how)
{
	unsigned int nr = 1 + how % FUZZ_FUSE_MAX_SEGS, i;
	size_t off = 0, n;

	for (i = 0; i < nr - 1 && off < len; i++) {
		n = 1 + (how * (i + 7)) % (len - off);
		iov[i] = (struct iovec){ buf + off, n };
		off += n;
	}
	iov[i++] = (struct iovec){ buf + off, len - off };
	return i;
}

/*
 * The ring's completions handed to the server until the request is done,
 * as the device's event loop does; at most FUZZ_FUSE_MAX_IO of them (a
 * short write goes on from where it stopped, so each moves it on).
 */
static inline void fuzz_fuse_drain(struct fuse_server *s, struct fuzz_fuse *f)
{
	struct io_uring_cqe *cqe;
	unsigned int i;
	uint64_t data;
	int ret, res;

	for (i = 0; !f->done; i++) {
		fuzz_check(f->ring && i < FUZZ_FUSE_MAX_IO);
		do
			ret = io_uring_submit_and_wait(f->ring, 1);
		while (ret == -EINTR);
		fuzz_check(ret >= 0);
		fuzz_check(!io_uring_peek_cqe(f->ring, &cqe));
		data = io_uring_cqe_get_data64(cqe);
		res = cqe->res;
		io_uring_cqe_seen(f->ring, cqe);
		fuzz_check(data == ((uintptr_t)&f->req | FUZZ_FUSE_IO_TAG));
		fuse_server__io_complete(s, &f->req, res);
	}
}

/* A forwarded request's end, from the backend's thread: bounded. */
static inline void fuzz_fuse_wait(struct fuzz_fuse *f)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += FUZZ_FUSE_WAIT_S;
	pthread_mutex_lock(&f->lock);
	while (!f->done)
		fuzz_check(pthread_cond_timedwait(&f->cond, &f->lock, &until) !=
			   ETIMEDOUT);
	pthread_mutex_unlock(&f->lock);
}

/* One request; the reply checked against what the guest can see. */
static inline void fuzz_fuse_request(struct fuse_server *s, struct fuzz_fuse *f,
				     const uint8_t *p, size_t len,
				     size_t reply_len, uint8_t how)
{
	struct fuse_in_header ih;
	struct fuse_out_header oh;
	uint8_t *copy = malloc(len ? len : 1);

	fuzz_check(copy);
	memcpy(copy, p, len);
	memset(&f->req, 0, sizeof(f->req));
	f->req.ops = &fuzz_fuse_ops;
	f->req.out = f->out;
	f->req.nr_out = fuzz_fuse_split(f->out, copy, len, how);
	f->req.out_len = len;
	f->req.in = f->in;
	f->req.nr_in = fuzz_fuse_split(f->in, f->reply, reply_len, how >> 3);
	f->req.in_len = reply_len;
	f->done = false;
	f->parked = false;
	fuse_server__handle(s, &f->req);
	if (f->forwards)
		fuzz_fuse_wait(f);
	else
		fuzz_fuse_drain(s, f);
	if (f->len >= sizeof(oh)) {
		memcpy(&oh, f->reply, sizeof(oh));
		fuzz_check(oh.len == f->len);
		fuzz_check(oh.error <= 0 && oh.error > -4096);
		if (len >= sizeof(ih)) {
			memcpy(&ih, copy, sizeof(ih));
			fuzz_check(oh.unique == ih.unique);
		}
	}
	free(copy);
}

static inline void fuzz_fuse_init_session(struct fuse_server *s,
					  struct fuzz_fuse *f)
{
	struct {
		struct fuse_in_header h;
		struct fuse_init_in in;
	} init = { .h = { .len = sizeof(init),
			  .opcode = FUSE_INIT,
			  .unique = FUZZ_FUSE_INIT_UNIQUE,
			  .nodeid = FUZZ_FUSE_ROOT_NODE },
		   .in = { .major = FUSE_KERNEL_VERSION,
			   .minor = FUSE_KERNEL_MINOR_VERSION,
			   .max_readahead = 1U << 17,
			   .flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES |
				    FUSE_DO_READDIRPLUS |
				    FUSE_EXPORT_SUPPORT } };

	fuzz_fuse_request(s, f, (const uint8_t *)&init, sizeof(init),
			  FUZZ_FUSE_REPLY_MAX, 0);
}

/*
 * The session the input describes, on server s: INIT, then each request
 * of the input in turn, at most FUZZ_FUSE_MAX_REQUESTS. f->ring must be
 * the server's ring (or NULL if it has none), f->forwards set if the
 * backend forwards; f->reply, the lock and the condition are made on
 * the first call and kept.
 */
static inline void fuzz_fuse__run(struct fuse_server *s, struct fuzz_fuse *f,
				  const uint8_t *data, size_t size)
{
	struct fuzz_in in;
	int i;

	if (!f->reply) {
		pthread_condattr_t ca;

		f->reply = malloc(FUZZ_FUSE_REPLY_MAX);
		fuzz_check(f->reply);
		fuzz_check(!pthread_mutex_init(&f->lock, NULL));
		fuzz_check(!pthread_condattr_init(&ca));
		fuzz_check(!pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
		fuzz_check(!pthread_cond_init(&f->cond, &ca));
		pthread_condattr_destroy(&ca);
	}
	fuzz_fuse_init_session(s, f);
	fuzz_in__init(&in, data, size);
	for (i = 0; i < FUZZ_FUSE_MAX_REQUESTS && in.left; i++) {
		size_t len, want = fuzz_in__u16(&in);
		size_t reply_len =
			fuzz_in__u16(&in) % (FUZZ_FUSE_REPLY_MAX + 1);
		uint8_t how = fuzz_in__u8(&in);
		const uint8_t *p = fuzz_in__bytes(&in, want, &len);

		fuzz_fuse_request(s, f, p, len, reply_len, how);
	}
}

#endif
