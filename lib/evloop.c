// SPDX-License-Identifier: GPL-2.0
/* The io_uring event loop (see evloop.h). */
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/evloop.h"
#include "lib/log.h"

void evloop__init(struct evloop *l, const char *name)
{
	*l = (struct evloop){ .name = name };
	worker__init(&l->worker);
}

static void stop_done(void *arg, int res)
{
	(void)res;
	evloop__stop(arg);
}

/*
 * io_uring_register(2) itself: Debian 12's liburing 2.3 declares
 * io_uring_register_restrictions() and io_uring_enable_rings() but its
 * shared library does not export them.
 */
static int ring_register(struct io_uring *ring, unsigned int op, void *arg,
			 unsigned int nr)
{
	long ret = syscall(__NR_io_uring_register, ring->ring_fd, op, arg, nr);

	return ret < 0 ? -errno : 0;
}

/* Every opcode the loop asks for is one this kernel has (REGISTER_PROBE). */
static int probe_opcodes(struct evloop *l, const uint8_t *ops, unsigned int n)
{
	/*
	 * The probe and room for its ops (a flexible array): a union, since
	 * a struct may not hold a variable-sized struct but at its end.
	 */
	union {
		struct io_uring_probe p;
		uint8_t room[sizeof(struct io_uring_probe) +
			     EVLOOP_PROBE_OPS *
				     sizeof(struct io_uring_probe_op)];
	} probe = { 0 };
	int ret;

	ret = ring_register(&l->ring, IORING_REGISTER_PROBE, &probe,
			    EVLOOP_PROBE_OPS);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < n; i++) {
		if (ops[i] > probe.p.last_op ||
		    !(probe.p.ops[ops[i]].flags & IO_URING_OP_SUPPORTED)) {
			pr_err("%s: io_uring: the kernel has no opcode %u",
			       l->name, ops[i]);
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

/*
 * A ring that can submit only the loop's opcodes, and register only the
 * cancellation evloop__cancel() needs. Never a ring without: the vmm's
 * seccomp filters forbid opening files and making sockets, and a ring
 * that could OPENAT or SOCKET would do both for any thread that holds it
 * (Documentation/security.md). A kernel that cannot restrict (before
 * 5.10) is an error; the loop needs 6.0 anyway (SYNC_CANCEL).
 */
static int ring_open(struct evloop *l, const struct evloop_params *p,
		     struct io_uring_params *up)
{
	struct io_uring_restriction res[EVLOOP_MAX_OPCODES + 2];
	uint8_t ops[EVLOOP_MAX_OPCODES + 1];
	unsigned int n = 0, nr_ops = 0;
	int ret;

	if (p->nr_opcodes > EVLOOP_MAX_OPCODES)
		return -EINVAL;
	ops[nr_ops++] = IORING_OP_READ; /* the loop's own: the stop fd */
	for (unsigned int i = 0; i < p->nr_opcodes; i++)
		ops[nr_ops++] = p->opcodes[i];
	for (unsigned int i = 0; i < nr_ops; i++)
		res[n++] = (struct io_uring_restriction){
			.opcode = IORING_RESTRICTION_SQE_OP,
			.sqe_op = ops[i],
		};
	/* evloop__cancel(), from another thread. */
	res[n++] = (struct io_uring_restriction){
		.opcode = IORING_RESTRICTION_REGISTER_OP,
		.register_op = IORING_REGISTER_SYNC_CANCEL,
	};
	up->flags |= IORING_SETUP_R_DISABLED;
	ret = io_uring_queue_init_params(p->sq_entries, &l->ring, up);
	if (ret)
		return ret;
	ret = probe_opcodes(l, ops, nr_ops);
	if (!ret)
		ret = ring_register(&l->ring, IORING_REGISTER_RESTRICTIONS, res,
				    n);
	if (!ret)
		ret = ring_register(&l->ring, IORING_REGISTER_ENABLE_RINGS,
				    NULL, 0);
	if (ret) {
		pr_err("%s: io_uring restrictions: %s", l->name,
		       strerror(-ret));
		io_uring_queue_exit(&l->ring);
	}
	return ret;
}

int evloop__open(struct evloop *l, const struct evloop_params *p)
{
	struct io_uring_params up = { 0 };
	int ret;

	ret = worker__open(&l->worker);
	if (ret)
		return ret;
	if (p->cq_entries) {
		up.flags |= IORING_SETUP_CQSIZE;
		up.cq_entries = p->cq_entries;
	}
	ret = ring_open(l, p, &up);
	if (ret)
		return ret;
	l->ring_ok = true;
	l->stop = (struct ev_source){ .fn = stop_done, .arg = l };
	return 0;
}

void evloop__exit(struct evloop *l)
{
	worker__exit(&l->worker, l->name);
	/* Waits for I/O in flight: it may still write into guest memory. */
	if (l->ring_ok)
		io_uring_queue_exit(&l->ring);
	l->ring_ok = false;
}

void evloop__set_tag_handler(struct evloop *l, unsigned int tag,
			     void (*fn)(void *arg, void *ptr, int res),
			     void *arg)
{
	if (tag && tag <= EVLOOP_TAG_MAX) {
		l->tags[tag].fn = fn;
		l->tags[tag].arg = arg;
	}
}

void evloop__stop(struct evloop *l)
{
	l->stopping = true;
}

struct io_uring_sqe *evloop__get_sqe(struct evloop *l)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(&l->ring)))
		io_uring_submit(&l->ring);
	return sqe;
}

void evloop__read(struct evloop *l, struct ev_source *src, int fd, void *buf,
		  unsigned int len, uint64_t offset)
{
	struct io_uring_sqe *sqe = evloop__get_sqe(l);

	io_uring_prep_read(sqe, fd, buf, len, offset);
	io_uring_sqe_set_data(sqe, src);
}

void evloop__read_eventfd(struct evloop *l, struct ev_source *src, int fd,
			  uint64_t *buf)
{
	evloop__read(l, src, fd, buf, sizeof(*buf), 0);
}

void evloop__poll(struct evloop *l, struct ev_source *src, int fd,
		  unsigned int events)
{
	struct io_uring_sqe *sqe = evloop__get_sqe(l);

	io_uring_prep_poll_add(sqe, fd, events);
	io_uring_sqe_set_data(sqe, src);
}

void evloop__timeout(struct evloop *l, struct ev_source *src,
		     struct __kernel_timespec *ts, uint64_t ns)
{
	struct io_uring_sqe *sqe = evloop__get_sqe(l);

	ts->tv_sec = ns / 1000000000ULL;
	ts->tv_nsec = ns % 1000000000ULL;
	io_uring_prep_timeout(sqe, ts, 0, 0);
	io_uring_sqe_set_data(sqe, src);
}

int evloop__cancel(struct evloop *l, struct ev_source *src)
{
	struct io_uring_sync_cancel_reg reg = {
		.addr = (uint64_t)(uintptr_t)src,
		.timeout = { .tv_sec = -1, .tv_nsec = -1 },
	};

	return io_uring_register_sync_cancel(&l->ring, &reg);
}

static void dispatch(struct evloop *l, const struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	unsigned int tag = data & EVLOOP_TAG_MASK;
	void *ptr = (void *)(uintptr_t)(data & ~EVLOOP_TAG_MASK);
	struct ev_source *src = ptr;

	if (!tag) {
		src->fn(src->arg, cqe->res);
		return;
	}
	if (l->tags[tag].fn)
		l->tags[tag].fn(l->tags[tag].arg, ptr, cqe->res);
}

int evloop__run(struct evloop *l, const struct evloop_ops *ops, void *arg)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	bool more = false;
	int ret;

	while (!l->stopping) {
		if (more)
			ret = io_uring_submit(&l->ring);
		else
			ret = io_uring_submit_and_wait(&l->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -EBUSY) {
			pr_err("%s: io_uring: %s", l->name, strerror(-ret));
			return ret;
		}
		if (ops->begin)
			ops->begin(arg);
		seen = 0;
		io_uring_for_each_cqe(&l->ring, head, cqe)
		{
			dispatch(l, cqe);
			seen++;
		}
		io_uring_cq_advance(&l->ring, seen);
		more = ops->end ? ops->end(arg) : false;
	}
	return 0;
}

static void *loop_thread(void *arg)
{
	struct evloop *l = arg;

	worker__block_signals();
	(void)evloop__run(l, l->ops, l->arg);
	return NULL;
}

int evloop__start(struct evloop *l, const struct evloop_ops *ops, void *arg,
		  const struct sock_fprog *filter)
{
	l->ops = ops;
	l->arg = arg;
	evloop__read_eventfd(l, &l->stop, l->worker.stop_fd,
			     &l->worker.stop_buf);
	return worker__start(&l->worker, filter, loop_thread, l);
}
