// SPDX-License-Identifier: GPL-2.0
/*
 * The virtual backend: FUSE requests relayed, byte for byte, to a server
 * the orchestrator runs, over one Unix SOCK_SEQPACKET connection (one
 * message per packet; Documentation/virtual-fs.md is the protocol).
 *
 * forward() runs on the device thread and never waits: it records the
 * request and sends it with MSG_DONTWAIT, or leaves it queued, in order,
 * while the socket is full or VIRTUAL_FS_MAX_SENT requests are already
 * at the server. One relay thread per backend, started by the first
 * forward(), polls the socket and a wake eventfd: it sends what is
 * queued when there is room, matches replies to requests by unique,
 * completes them, and fails with -EIO the requests whose deadline
 * (forward time + timeout) passed and, once the server is gone, all of
 * them.
 *
 * Pending requests sit on one list in arrival order. The timeout is the
 * same for all, so that is also deadline order: the head is the next to
 * expire. Requests are sent in arrival order, so the unsent ones are a
 * suffix of the list, starting at ->unsent. Sent requests that wait for a
 * reply are also in a hash table by unique.
 *
 * The list, the hash, ->unsent, ->nr_sent, ->dead and ->stopping are
 * under ->lock; completions are called without it (a completion may well
 * call forward() again).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/fs/virtual.h"
#include "lib/list.h"
#include "lib/warn.h"
#include "lib/worker.h"

/*
 * At most this many requests are at the server, unanswered, at once; the
 * others wait in order. The guest's rings bound how many there are in all.
 */
#define VIRTUAL_FS_MAX_SENT 256U
/* Buckets of the unique -> request table (a power of two). */
#define VIRTUAL_FS_HASH_SIZE 256U
/* Packets read per wakeup before deadlines are looked at again. */
#define VIRTUAL_FS_RECV_BATCH 64U
/* fuse_dev_do_write() takes errors in -511..-1 only (-ERESTARTSYS..). */
#define FUSE_ERRNO_MAX 511
/* The kernel doubles SO_SNDBUF; a packet fits in sndbuf - 32 bytes. */
#define VIRTUAL_FS_SNDBUF (FS_FORWARD_MAX + 4096U)

#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC  1000000000ULL

struct vreq {
	struct fs_forward_req *req;
	uint64_t deadline;     /* CLOCK_MONOTONIC, ns */
	struct list_head node; /* the pending list, then a done list */
	struct vreq *hnext;    /* the hash chain, while sent */
	bool no_reply;	       /* FORGET, BATCH_FORGET, INTERRUPT */
	bool sent;	       /* at the server (and in the hash) */
	int err;	       /* on the done list: what it completes with */
};

struct virtual_fs {
	struct fs_backend base;
	char *path;
	uint64_t timeout_ns;
	unsigned int timeout_ms;
	int sock;
	int wake; /* eventfd: the relay thread has something new to look at */
	pthread_t thread;
	bool started;
	bool lock_ok;
	pthread_mutex_t lock;

	/* Under lock. */
	struct list_head pending;
	struct vreq *unsent; /* the first on pending not sent, or NULL */
	struct vreq *hash[VIRTUAL_FS_HASH_SIZE];
	unsigned int nr_sent;
	bool dead;
	bool stopping;
	bool warned_msgsize;

	/* The relay thread's. */
	uint8_t *rbuf; /* FS_FORWARD_MAX: one reply */
	bool warned_invalid;
	bool warned_timeout;
	bool warned_start; /* the device thread's */
};

static struct virtual_fs *to_vfs(struct fs_backend *b)
{
	return (struct virtual_fs *)b;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static bool opcode_has_no_reply(uint32_t opcode)
{
	return opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET ||
	       opcode == FUSE_INTERRUPT;
}

/* Requests without a reply complete with NULL, 0 whatever became of them. */
static void finish(struct fs_forward_req *req, bool no_reply, int err)
{
	req->complete(req, NULL, no_reply ? 0 : err);
}

/* Completes and frees what is on done, the last pushed first. */
static void finish_list(struct list_head *done)
{
	while (!list_empty(done)) {
		struct vreq *e = list_first_entry(done, struct vreq, node);

		list_del(&e->node);
		finish(e->req, e->no_reply, e->err);
		free(e);
	}
}

/* e is on no list. */
static void push_done(struct list_head *done, struct vreq *e, int err)
{
	e->err = err;
	list_add(&e->node, done);
}

/* ---- the pending list and the hash, under lock ----------------------- */

static unsigned int hash_of(uint64_t unique)
{
	return (unsigned int)((unique * 0x9e3779b97f4a7c15ULL) >> 56) &
	       (VIRTUAL_FS_HASH_SIZE - 1);
}

static void hash_add(struct virtual_fs *v, struct vreq *e)
{
	struct vreq **p = &v->hash[hash_of(e->req->unique)];

	e->hnext = *p;
	*p = e;
	v->nr_sent++;
}

static void hash_del(struct virtual_fs *v, struct vreq *e)
{
	struct vreq **p = &v->hash[hash_of(e->req->unique)];

	while (*p && *p != e)
		p = &(*p)->hnext;
	if (*p) {
		*p = e->hnext;
		v->nr_sent--;
	}
}

static struct vreq *hash_find(struct virtual_fs *v, uint64_t unique)
{
	struct vreq *e = v->hash[hash_of(unique)];

	while (e && e->req->unique != unique)
		e = e->hnext;
	return e;
}

/* The request after e on the pending list, or NULL. */
static struct vreq *pending_next(struct virtual_fs *v, struct vreq *e)
{
	if (e->node.next == &v->pending)
		return NULL;
	return list_entry(e->node.next, struct vreq, node);
}

static struct vreq *pending_first(struct virtual_fs *v)
{
	if (list_empty(&v->pending))
		return NULL;
	return list_first_entry(&v->pending, struct vreq, node);
}

static void pending_add(struct virtual_fs *v, struct vreq *e)
{
	list_add_tail(&e->node, &v->pending);
	if (!v->unsent)
		v->unsent = e;
}

/* Takes e off the pending list (and the hash, if it was sent). */
static void pending_del(struct virtual_fs *v, struct vreq *e)
{
	if (v->unsent == e)
		v->unsent = pending_next(v, e);
	list_del(&e->node);
	if (e->sent)
		hash_del(v, e);
}

/* The server went away: everything pending fails. */
static void server_gone(struct virtual_fs *v, int err, struct list_head *done)
{
	struct vreq *e, *next;

	if (v->dead)
		return;
	v->dead = true;
	if (err)
		pr_err("%s: server on %s: %s: requests fail with EIO",
		       v->base.name, v->path, strerror(err));
	else
		pr_err("%s: server on %s closed the connection: EIO",
		       v->base.name, v->path);
	list_for_each_entry_safe(e, next, &v->pending, struct vreq, node)
	{
		list_del(&e->node);
		push_done(done, e, -EIO);
	}
	v->unsent = NULL;
	memset(v->hash, 0, sizeof(v->hash));
	v->nr_sent = 0;
}

/* Whether the first unsent request may go now, room in the socket given. */
static bool can_send(const struct virtual_fs *v)
{
	return !v->dead && v->unsent &&
	       (v->unsent->no_reply || v->nr_sent < VIRTUAL_FS_MAX_SENT);
}

/*
 * Sends queued requests in order until the socket is full (EAGAIN: the
 * relay thread waits for POLLOUT) or the cap is reached. SOCK_SEQPACKET
 * sends a packet whole or not at all.
 */
static void flush_sends(struct virtual_fs *v, struct list_head *done)
{
	while (can_send(v)) {
		struct vreq *e = v->unsent;
		ssize_t n = send(v->sock, e->req->msg, e->req->len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0 && errno == EMSGSIZE) {
			/* Larger than the socket's send buffer allows. */
			warn__once(&v->warned_msgsize, v->base.name, "",
				   "%zu-byte request > SO_SNDBUF: EIO",
				   e->req->len);
			pending_del(v, e);
			push_done(done, e, -EIO);
			continue;
		}
		if (n < 0) {
			server_gone(v, errno, done);
			return;
		}
		v->unsent = pending_next(v, e);
		if (e->no_reply) {
			pending_del(v, e);
			push_done(done, e, 0);
		} else {
			e->sent = true;
			hash_add(v, e);
		}
	}
}

/* Fails, with -EIO, the requests whose deadline has passed. */
static void expire(struct virtual_fs *v, uint64_t now, struct list_head *done)
{
	struct vreq *e;

	while ((e = pending_first(v)) && e->deadline <= now) {
		pending_del(v, e);
		if (!e->no_reply)
			warn__once(&v->warned_timeout, v->base.name, "",
				   "opcode %u unanswered after %u ms: EIO",
				   e->req->opcode, v->timeout_ms);
		push_done(done, e, -EIO);
	}
}

/* ---- the relay thread ------------------------------------------------- */

/* Logs the first bad packet of the backend; later ones are not. */
static void bad_reply(struct virtual_fs *v, const char *what,
		      unsigned long long value)
{
	warn__once(&v->warned_invalid, v->base.name, "",
		   "invalid reply from %s: %s (%llu)", v->path, what, value);
}

/* One packet of n bytes in rbuf (n may exceed the buffer: MSG_TRUNC). */
static void handle_packet(struct virtual_fs *v, size_t n)
{
	struct fuse_out_header oh;
	struct vreq *e;

	if (n > FS_FORWARD_MAX) {
		bad_reply(v, "longer than FS_FORWARD_MAX, dropped", n);
		return;
	}
	if (n < sizeof(oh)) {
		bad_reply(v, "shorter than a header, dropped", n);
		return;
	}
	memcpy(&oh, v->rbuf, sizeof(oh));
	if (oh.len != n) {
		bad_reply(v, "len is not the packet's, dropped", oh.len);
		return;
	}
	pthread_mutex_lock(&v->lock);
	e = hash_find(v, oh.unique);
	if (e)
		pending_del(v, e);
	pthread_mutex_unlock(&v->lock);
	if (!e) {
		/* A late reply (the request timed out), or nobody's. */
		bad_reply(v, "unknown unique, dropped", oh.unique);
		return;
	}
	/* The server did answer this one, wrongly: the guest gets EIO now. */
	if (oh.error > 0 || oh.error < -FUSE_ERRNO_MAX) {
		bad_reply(v, "error out of range: EIO for", oh.unique);
		finish(e->req, false, -EIO);
	} else if (oh.error && n != sizeof(oh)) {
		bad_reply(v, "error with a payload: EIO for", oh.unique);
		finish(e->req, false, -EIO);
	} else if (n > e->req->reply_room) {
		bad_reply(v, "longer than the guest's room: EIO for",
			  oh.unique);
		finish(e->req, false, -EIO);
	} else {
		e->req->complete(e->req, v->rbuf, (ssize_t)n);
	}
	free(e);
}

/* Reads what the socket holds, a batch at most. */
static void receive(struct virtual_fs *v)
{
	struct list_head done;
	unsigned int i;
	ssize_t n;
	int err = 0;

	list_init(&done);
	for (i = 0; i < VIRTUAL_FS_RECV_BATCH; i++) {
		n = recv(v->sock, v->rbuf, FS_FORWARD_MAX,
			 MSG_DONTWAIT | MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/*
			 * 0 is EOF (SOCK_SEQPACKET cannot tell an empty
			 * packet from it: the protocol has none).
			 */
			err = n < 0 ? errno : 0;
			break;
		}
		handle_packet(v, (size_t)n);
	}
	if (i == VIRTUAL_FS_RECV_BATCH)
		return;
	pthread_mutex_lock(&v->lock);
	server_gone(v, err, &done);
	pthread_mutex_unlock(&v->lock);
	finish_list(&done);
}

static int poll_timeout(const struct virtual_fs *v, uint64_t now)
{
	const struct vreq *first;
	uint64_t ms;

	if (list_empty(&v->pending))
		return -1;
	first = list_first_entry(&v->pending, struct vreq, node);
	if (first->deadline <= now)
		return 0;
	/* Rounded up: waking before the deadline would spin. */
	ms = (first->deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void *relay_thread(void *arg)
{
	struct virtual_fs *v = arg;
	struct pollfd pfd[2];
	uint64_t count;

	worker__block_signals();

	for (;;) {
		struct list_head done;
		bool completed;
		int timeout;

		list_init(&done);
		pthread_mutex_lock(&v->lock);
		if (v->stopping) {
			pthread_mutex_unlock(&v->lock);
			break;
		}
		flush_sends(v, &done);
		expire(v, now_ns(), &done);
		timeout = poll_timeout(v, now_ns());
		pfd[0] = (struct pollfd){ .fd = v->wake, .events = POLLIN };
		pfd[1] = (struct pollfd){
			.fd = v->dead ? -1 : v->sock,
			.events = POLLIN | (can_send(v) ? POLLOUT : 0),
		};
		pthread_mutex_unlock(&v->lock);
		completed = !list_empty(&done);
		finish_list(&done);
		if (completed)
			timeout = 0; /* completions take time: look again */

		if (poll(pfd, ARRAY_SIZE(pfd), timeout) < 0) {
			if (errno == EINTR)
				continue;
			/* Only EFAULT/EINVAL/ENOMEM: nothing to wait on. */
			pr_err("%s: poll: %s", v->base.name, strerror(errno));
			pthread_mutex_lock(&v->lock);
			server_gone(v, errno, &done);
			pthread_mutex_unlock(&v->lock);
			finish_list(&done);
			break;
		}
		if (pfd[0].revents & POLLIN) {
			if (read(v->wake, &count, sizeof(count)) < 0 &&
			    errno != EAGAIN)
				pr_debug("%s: wake: %s", v->base.name,
					 strerror(errno));
		}
		if (pfd[1].revents & (POLLIN | POLLERR | POLLHUP))
			receive(v);
	}
	return NULL;
}

static void wake_relay(struct virtual_fs *v)
{
	uint64_t one = 1;

	/* EAGAIN: the counter is full, the thread is being woken anyway. */
	if (write(v->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_debug("%s: wake: %s", v->base.name, strerror(errno));
}

/* ---- the ops ---------------------------------------------------------- */

static int start_relay(struct virtual_fs *v)
{
	int ret = pthread_create(&v->thread, NULL, relay_thread, v);

	if (ret) {
		if (!v->warned_start)
			pr_err("%s: relay thread: %s", v->base.name,
			       strerror(ret));
		v->warned_start = true;
		return -ret;
	}
	v->started = true;
	return 0;
}

static int virtual_forward(struct fs_backend *b, struct fs_forward_req *req)
{
	struct virtual_fs *v = to_vfs(b);
	bool no_reply = opcode_has_no_reply(req->opcode);
	struct list_head done;
	struct fuse_in_header ih;
	struct vreq *e;
	bool was_empty, wake;

	/*
	 * What the server reads must hold together: its header's len is
	 * the packet's, its unique the one the reply is matched by.
	 */
	if (req->len < sizeof(ih) || req->len > FS_FORWARD_MAX) {
		finish(req, no_reply, -EINVAL);
		return 0;
	}
	memcpy(&ih, req->msg, sizeof(ih));
	if (ih.len != req->len || ih.unique != req->unique) {
		finish(req, no_reply, -EINVAL);
		return 0;
	}
	if (!v->started && start_relay(v)) {
		finish(req, no_reply, -EIO);
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		finish(req, no_reply, -ENOMEM);
		return 0;
	}
	e->req = req;
	e->no_reply = no_reply;
	e->deadline = now_ns() + v->timeout_ns;

	pthread_mutex_lock(&v->lock);
	if (v->dead) {
		pthread_mutex_unlock(&v->lock);
		free(e);
		finish(req, no_reply, -EIO);
		return 0;
	}
	was_empty = list_empty(&v->pending);
	pending_add(v, e);
	list_init(&done);
	flush_sends(v, &done);
	/*
	 * The thread must see a new earliest deadline, a request left to
	 * send (POLLOUT) or a dead socket it should no longer poll.
	 */
	wake = was_empty || v->unsent || v->dead;
	pthread_mutex_unlock(&v->lock);
	if (wake)
		wake_relay(v);
	finish_list(&done);
	return 0;
}

static void virtual_destroy(struct fs_backend *b)
{
	struct virtual_fs *v = to_vfs(b);
	struct list_head done;
	struct vreq *e, *next;

	list_init(&done);
	if (v->started) {
		pthread_mutex_lock(&v->lock);
		v->stopping = true;
		pthread_mutex_unlock(&v->lock);
		wake_relay(v);
		pthread_join(v->thread, NULL);
	}
	/* The thread is gone: what is still pending fails here. */
	list_for_each_entry_safe(e, next, &v->pending, struct vreq, node)
	{
		list_del(&e->node);
		push_done(&done, e, -EIO);
	}
	finish_list(&done);
	if (v->sock >= 0)
		close(v->sock);
	if (v->wake >= 0)
		close(v->wake);
	if (v->lock_ok)
		pthread_mutex_destroy(&v->lock);
	free(v->rbuf);
	free(v->path);
	free((char *)v->base.name);
	free(v);
}

static const struct fs_backend_ops virtual_ops = {
	.forward = virtual_forward,
	.destroy = virtual_destroy,
};

static int connect_server(struct virtual_fs *v)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int sndbuf = VIRTUAL_FS_SNDBUF;
	int ret;

	if (v->path[0] != '/' || strlen(v->path) >= sizeof(sa.sun_path)) {
		pr_err("%s: socket %s: not an absolute path < %zu bytes",
		       v->base.name, v->path, sizeof(sa.sun_path));
		return -EINVAL;
	}
	memcpy(sa.sun_path, v->path, strlen(v->path));
	/*
	 * Nonblocking from the start: connect() to a listener whose
	 * backlog is full fails with EAGAIN instead of waiting for it.
	 */
	v->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
			 0);
	if (v->sock < 0) {
		ret = -errno;
		pr_err("%s: socket: %s", v->base.name, strerror(errno));
		return ret;
	}
	/*
	 * Room for the largest request (clamped to net.core.wmem_max; a
	 * request that does not fit then fails alone, with EIO).
	 */
	if (setsockopt(v->sock, SOL_SOCKET, SO_SNDBUF, &sndbuf,
		       sizeof(sndbuf)) < 0)
		pr_debug("%s: SO_SNDBUF: %s", v->base.name, strerror(errno));
	if (connect(v->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		pr_err("%s: cannot connect to the server's socket %s: %s",
		       v->base.name, v->path, strerror(errno));
		return ret;
	}
	return 0;
}

int virtual_fs__create(struct fs_backend **out,
		       const struct virtual_fs_params *p)
{
	struct virtual_fs *v;
	int ret;

	*out = NULL;
	if (!p->socket) {
		pr_err("%s: no socket", p->name ? p->name : "virtual");
		return -EINVAL;
	}
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->sock = -1;
	v->wake = -1;
	list_init(&v->pending);
	v->base.ops = &virtual_ops;
	v->base.name = strdup(p->name ? p->name : "virtual");
	v->path = strdup(p->socket);
	v->rbuf = malloc(FS_FORWARD_MAX);
	if (!v->base.name || !v->path || !v->rbuf) {
		ret = -ENOMEM;
		goto out_destroy;
	}
	v->timeout_ms =
		p->timeout_ms ? p->timeout_ms : VIRTUAL_FS_DEFAULT_TIMEOUT_MS;
	v->timeout_ns = (uint64_t)v->timeout_ms * NSEC_PER_MSEC;
	ret = -pthread_mutex_init(&v->lock, NULL);
	if (ret)
		goto out_destroy;
	v->lock_ok = true;
	/* Here, not in the relay thread: eventfd2 is not in the filter. */
	v->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->wake < 0) {
		ret = -errno;
		pr_err("%s: eventfd: %s", v->base.name, strerror(errno));
		goto out_destroy;
	}
	ret = connect_server(v);
	if (ret)
		goto out_destroy;
	*out = &v->base;
	return 0;

out_destroy:
	virtual_destroy(&v->base);
	return ret;
}
