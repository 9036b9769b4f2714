// SPDX-License-Identifier: GPL-2.0
/*
 * The virtual backend: FUSE requests relayed, byte for byte, to a server
 * the orchestrator runs, over one Unix connection: SOCK_SEQPACKET (one
 * message per packet) or SOCK_STREAM (messages back to back, each framed
 * by its header's len); Documentation/virtual-fs.md is the protocol.
 *
 * forward() runs on the device thread and never waits: it records the
 * request and sends it with MSG_DONTWAIT, or leaves it queued, in order,
 * while the socket is full or VIRTUAL_FS_MAX_SENT requests are already
 * at the server. One relay thread per backend, started by the first
 * forward(), polls the socket and a wake eventfd: it sends what is
 * queued when there is room, matches replies to requests by unique,
 * completes them, and fails with -EIO the requests whose deadline
 * (forward time + timeout) passed and, once the server is gone, all of
 * them. A request that comes while the server is gone makes the relay
 * thread connect again (at most once per VIRTUAL_FS_RETRY_MS); the new
 * connection first gets the guest's FUSE_INIT again, with unique 0. The
 * requests a lost connection carried fail with EIO; those it had not
 * carried yet go to the next one.
 *
 * Pending requests sit on one list in arrival order. The timeout is the
 * same for all, so that is also deadline order: the head is the next to
 * expire. Requests are sent in arrival order, so the unsent ones are a
 * suffix of the list, starting at ->unsent. Sent requests that wait for a
 * reply are also in a hash table by unique.
 *
 * On a stream a request may go out in part: the rest is copied to ->out
 * (the backend's, so the request can complete, by a timeout, while its
 * tail still waits for room) and goes before anything else. The replayed
 * FUSE_INIT goes out from ->out too.
 *
 * The list, the hash, ->unsent, ->nr_sent, ->out, ->sock, ->dead and
 * ->stopping are under ->lock; completions are called without it (a
 * completion may well call forward() again). Only the relay thread closes
 * or replaces ->sock, and only it reads from it.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/fs/virtual-internal.h"
#include "lib/list.h"
#include "lib/resident.h"
#include "lib/warn.h"
#include "lib/worker.h"

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

/* ---- the pending list and the hash, under lock ----------------------- */

static unsigned int hash_of(uint64_t unique)
{
	return (unsigned int)((unique * 0x9e3779b97f4a7c15ULL) >> 56) &
	       (VIRTUAL_FS_HASH_SIZE - 1);
}

void virtual_fs__hash_add(struct virtual_fs *v, struct vreq *e)
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

struct vreq *virtual_fs__hash_find(struct virtual_fs *v, uint64_t unique)
{
	struct vreq *e = v->hash[hash_of(unique)];

	while (e && e->req->unique != unique)
		e = e->hnext;
	return e;
}

/* The request after e on the pending list, or NULL. */
struct vreq *virtual_fs__pending_next(struct virtual_fs *v, struct vreq *e)
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
void virtual_fs__pending_del(struct virtual_fs *v, struct vreq *e)
{
	if (v->unsent == e)
		v->unsent = virtual_fs__pending_next(v, e);
	list_del(&e->node);
	if (e->sent)
		hash_del(v, e);
}

/* Every pending request fails with err. */
void virtual_fs__fail_pending(struct virtual_fs *v, int err,
			      struct list_head *done)
{
	struct vreq *e, *next;

	list_for_each_entry_safe(e, next, &v->pending, struct vreq, node)
	{
		list_del(&e->node);
		push_done(done, e, err);
	}
	v->unsent = NULL;
	memset(v->hash, 0, sizeof(v->hash));
	v->nr_sent = 0;
}

/*
 * The requests the server was sent (the pending ones before ->unsent) fail
 * with err: it may have acted on them. The unsent ones stay queued.
 */
static void fail_sent(struct virtual_fs *v, int err, struct list_head *done)
{
	struct vreq *e;

	while ((e = pending_first(v)) && e != v->unsent) {
		list_del(&e->node);
		push_done(done, e, err);
	}
	memset(v->hash, 0, sizeof(v->hash));
	v->nr_sent = 0;
}

/*
 * The connection is over (why says how, for the one line logged): the
 * requests it carried fail with EIO; those not sent yet wait for the next
 * connection, which the relay thread makes at once. The socket stays open
 * until the relay thread closes it.
 */
void virtual_fs__server_gone(struct virtual_fs *v, const char *why,
			     struct list_head *done)
{
	if (v->dead)
		return;
	v->dead = true;
	v->replay_wait = false;
	v->out_len = v->out_off = 0;
	v->retry_at = 0;
	pr_err("%s: server on %s %s: requests it was sent fail with EIO, "
	       "the next ones reconnect",
	       v->base.name, v->path, why);
	fail_sent(v, -EIO, done);
}

void virtual_fs__server_error(struct virtual_fs *v, int err,
			      struct list_head *done)
{
	char why[64];

	if (!err) {
		virtual_fs__server_gone(v, "closed the connection", done);
		return;
	}
	snprintf(why, sizeof(why), "failed: %s", strerror(err));
	virtual_fs__server_gone(v, why, done);
}

/* Fails, with -EIO, the requests whose deadline has passed. */
static void expire(struct virtual_fs *v, uint64_t now, struct list_head *done)
{
	struct vreq *e;

	while ((e = pending_first(v)) && e->deadline <= now) {
		virtual_fs__pending_del(v, e);
		if (!e->no_reply)
			warn__once(&v->warned_timeout, v->base.name, "",
				   "opcode %u unanswered after %u ms: EIO",
				   e->req->opcode, v->timeout_ms);
		push_done(done, e, -EIO);
	}
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

/*
 * Under lock, at the top of each round: a connection that ended is
 * closed here, where nothing polls it; a request waiting without one
 * makes a new one.
 */
static void tend_connection(struct virtual_fs *v, uint64_t now,
			    struct list_head *done)
{
	if (!v->dead)
		return;
	if (v->sock >= 0) {
		close(v->sock);
		v->sock = -1;
	}
	if (v->unsent && now >= v->retry_at)
		virtual_fs__reconnect(v, now, done);
}

static void *relay_thread(void *arg)
{
	struct virtual_fs *v = arg;
	struct pollfd pfd[2];
	uint64_t count;

	resident__trim_tls();
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
		tend_connection(v, now_ns(), &done);
		virtual_fs__flush_sends(v, &done);
		expire(v, now_ns(), &done);
		timeout = poll_timeout(v, now_ns());
		pfd[0] = (struct pollfd){ .fd = v->wake, .events = POLLIN };
		pfd[1] = (struct pollfd){
			.fd = v->dead ? -1 : v->sock,
			.events = POLLIN |
				  (virtual_fs__wants_out(v) ? POLLOUT : 0),
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
			virtual_fs__server_error(v, errno, &done);
			v->stopping = true; /* forward() fails at once */
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
			virtual_fs__receive(v);
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

/*
 * What the server reads must hold together: the header's len is the
 * message's, its unique the one the reply is matched by, and not the
 * replayed FUSE_INIT's.
 */
static bool request_ok(const struct fs_forward_req *req)
{
	struct fuse_in_header ih;

	if (req->len < sizeof(ih) || req->len > FS_FORWARD_MAX)
		return false;
	memcpy(&ih, req->msg, sizeof(ih));
	return ih.len == req->len && ih.unique == req->unique &&
	       ih.unique != VIRTUAL_FS_REPLAY_UNIQUE;
}

static int virtual_forward(struct fs_backend *b, struct fs_forward_req *req)
{
	struct virtual_fs *v = to_vfs(b);
	bool no_reply = opcode_has_no_reply(req->opcode);
	struct list_head done;
	struct vreq *e;
	uint64_t now;
	bool was_empty, wake;

	if (!request_ok(req)) {
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
	now = now_ns();
	e->req = req;
	e->no_reply = no_reply;
	e->deadline = now + v->timeout_ns;

	pthread_mutex_lock(&v->lock);
	/* No server, and the last attempt at one was just now: EIO. */
	if (v->stopping || (v->dead && now < v->retry_at)) {
		pthread_mutex_unlock(&v->lock);
		free(e);
		finish(req, no_reply, -EIO);
		return 0;
	}
	virtual_fs__keep_init(v, req);
	was_empty = list_empty(&v->pending);
	pending_add(v, e);
	list_init(&done);
	virtual_fs__flush_sends(v, &done);
	/*
	 * The thread must see a new earliest deadline, something left to
	 * send (POLLOUT) or a dead socket it should close and replace.
	 */
	wake = was_empty || v->unsent || out_pending(v) || v->dead;
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

	list_init(&done);
	if (v->started) {
		pthread_mutex_lock(&v->lock);
		v->stopping = true;
		pthread_mutex_unlock(&v->lock);
		wake_relay(v);
		pthread_join(v->thread, NULL);
	}
	/* The thread is gone: what is still pending fails here. */
	virtual_fs__fail_pending(v, -EIO, &done);
	finish_list(&done);
	if (v->sock >= 0)
		close(v->sock);
	if (v->wake >= 0)
		close(v->wake);
	if (v->lock_ok)
		pthread_mutex_destroy(&v->lock);
	free(v->rbuf);
	free(v->out);
	free(v->path);
	free((char *)v->base.name);
	free(v);
}

static const struct fs_backend_ops virtual_ops = {
	.forward = virtual_forward,
	.destroy = virtual_destroy,
};

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
	v->out = malloc(FS_FORWARD_MAX);
	if (!v->base.name || !v->path || !v->rbuf || !v->out) {
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
	ret = virtual_fs__connect(v);
	if (ret == -EINVAL)
		pr_err("%s: socket %s: not an absolute path < %zu bytes",
		       v->base.name, v->path,
		       sizeof(((struct sockaddr_un *)0)->sun_path));
	else if (ret)
		pr_err("%s: cannot connect to the server's socket %s: %s",
		       v->base.name, v->path, strerror(-ret));
	if (ret)
		goto out_destroy;
	pr_debug("%s: connected to %s (%s)", v->base.name, v->path,
		 virtual_fs__type_name(v->type));
	*out = &v->base;
	return 0;

out_destroy:
	virtual_destroy(&v->base);
	return ret;
}
