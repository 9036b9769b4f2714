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
/* Reads per wakeup before deadlines are looked at again. */
#define VIRTUAL_FS_RECV_BATCH 64U
/* fuse_dev_do_write() takes errors in -511..-1 only (-ERESTARTSYS..). */
#define FUSE_ERRNO_MAX 511
/* The kernel doubles SO_SNDBUF; a packet fits in sndbuf - 32 bytes. */
#define VIRTUAL_FS_SNDBUF (FS_FORWARD_MAX + 4096U)
/* The guest's FUSE_INIT is kept for a new connection if it fits. */
#define VIRTUAL_FS_INIT_MAX 256U
/* The unique of the FUSE_INIT a new connection gets again. */
#define VIRTUAL_FS_REPLAY_UNIQUE 0ULL

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
	int wake; /* eventfd: the relay thread has something new to look at */
	pthread_t thread;
	bool started;
	bool lock_ok;
	pthread_mutex_t lock;

	/* Under lock. */
	int sock;
	int type; /* SOCK_SEQPACKET or SOCK_STREAM: the connection's */
	struct list_head pending;
	struct vreq *unsent; /* the first on pending not sent, or NULL */
	struct vreq *hash[VIRTUAL_FS_HASH_SIZE];
	unsigned int nr_sent;
	bool dead;	   /* no connection: the next request makes one */
	uint64_t retry_at; /* no new connection before (CLOCK_MONOTONIC) */
	bool replay_wait;  /* the replayed FUSE_INIT is unanswered */
	uint8_t *out;	   /* FS_FORWARD_MAX: bytes to send first */
	size_t out_len, out_off;
	uint8_t init[VIRTUAL_FS_INIT_MAX]; /* the guest's last FUSE_INIT */
	size_t init_len;		   /* 0: none kept */
	bool stopping;
	bool warned_msgsize;
	bool warned_retry; /* the failed reconnection, once per outage */

	/* The relay thread's. */
	uint8_t *rbuf; /* FS_FORWARD_MAX: one reply, or a stream's bytes */
	size_t rlen;   /* on a stream: bytes in rbuf, no whole message */
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

static const char *type_name(int type)
{
	return type == SOCK_STREAM ? "SOCK_STREAM" : "SOCK_SEQPACKET";
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

/* Every pending request fails with err. */
static void fail_pending(struct virtual_fs *v, int err, struct list_head *done)
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
static void server_gone(struct virtual_fs *v, const char *why,
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

static void server_error(struct virtual_fs *v, int err, struct list_head *done)
{
	char why[64];

	if (!err) {
		server_gone(v, "closed the connection", done);
		return;
	}
	snprintf(why, sizeof(why), "failed: %s", strerror(err));
	server_gone(v, why, done);
}

/* Bytes of ->out still to go (a stream's tail, a replayed FUSE_INIT). */
static bool out_pending(const struct virtual_fs *v)
{
	return v->out_off < v->out_len;
}

/* Whether the first unsent request may go now, room in the socket given. */
static bool can_send(const struct virtual_fs *v)
{
	return !v->dead && !out_pending(v) && v->unsent &&
	       (v->unsent->no_reply || v->nr_sent < VIRTUAL_FS_MAX_SENT);
}

/* Whether the relay thread should wait for room in the socket. */
static bool wants_out(const struct virtual_fs *v)
{
	return !v->dead && (out_pending(v) || can_send(v));
}

/* Sends what is left of ->out; false if it has not all gone yet. */
static bool flush_out(struct virtual_fs *v, struct list_head *done)
{
	while (out_pending(v)) {
		ssize_t n = send(v->sock, v->out + v->out_off,
				 v->out_len - v->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (n < 0) {
			server_error(v, errno, done);
			return false;
		}
		v->out_off += (size_t)n;
	}
	v->out_len = v->out_off = 0;
	return true;
}

/*
 * Sends queued requests in order until the socket is full (EAGAIN: the
 * relay thread waits for POLLOUT) or the cap is reached. SOCK_SEQPACKET
 * sends a packet whole or not at all; SOCK_STREAM may take a part, and
 * the rest then goes from ->out.
 */
static void flush_sends(struct virtual_fs *v, struct list_head *done)
{
	while (!v->dead && flush_out(v, done) && can_send(v)) {
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
			server_error(v, errno, done);
			return;
		}
		if ((size_t)n < e->req->len) {
			/* A stream took a part: the rest is the backend's. */
			v->out_len = e->req->len - (size_t)n;
			v->out_off = 0;
			memcpy(v->out, (const uint8_t *)e->req->msg + n,
			       v->out_len);
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

/* Keeps the guest's FUSE_INIT for the next connection (under lock). */
static void keep_init(struct virtual_fs *v, const struct fs_forward_req *req)
{
	if (req->opcode != FUSE_INIT || req->len > sizeof(v->init))
		return;
	memcpy(v->init, req->msg, req->len);
	v->init_len = req->len;
}

/* ---- connecting ------------------------------------------------------- */

/* A connected socket of the given type, or -errno (not logged). */
static int open_socket(const struct sockaddr_un *sa, int type)
{
	int sndbuf = VIRTUAL_FS_SNDBUF;
	int fd, ret;

	/*
	 * Nonblocking from the start: connect() to a listener whose
	 * backlog is full fails with EAGAIN instead of waiting for it.
	 */
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/*
	 * Room for the largest packet (clamped to net.core.wmem_max; a
	 * request that does not fit then fails alone, with EIO). A stream
	 * sends any message in parts.
	 */
	if (type == SOCK_SEQPACKET)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf,
				 sizeof(sndbuf));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Connects to the server, as SOCK_SEQPACKET or, if the server listens on
 * a SOCK_STREAM socket (connect() says EPROTOTYPE), as that: the
 * server's choice is the transport. Sets ->sock and ->type; -errno.
 */
static int connect_server(struct virtual_fs *v)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (v->path[0] != '/' || strlen(v->path) >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, v->path, strlen(v->path));
	v->type = SOCK_SEQPACKET;
	fd = open_socket(&sa, v->type);
	if (fd == -EPROTOTYPE) {
		v->type = SOCK_STREAM;
		fd = open_socket(&sa, v->type);
	}
	if (fd < 0)
		return fd;
	v->sock = fd;
	return 0;
}

/*
 * The relay thread, under lock, with requests waiting and no connection:
 * one attempt. On success the kept FUSE_INIT goes first, with unique 0
 * (the new server has not seen one; the guest will not send another). On
 * failure every pending request fails with EIO, and requests fail at once
 * until VIRTUAL_FS_RETRY_MS have passed.
 */
static void reconnect(struct virtual_fs *v, uint64_t now,
		      struct list_head *done)
{
	struct fuse_in_header ih;
	int ret;

	ret = connect_server(v);
	if (ret) {
		if (!v->warned_retry)
			pr_err("%s: cannot reconnect to %s: %s: requests fail "
			       "with EIO until it listens again",
			       v->base.name, v->path, strerror(-ret));
		v->warned_retry = true;
		v->retry_at = now + VIRTUAL_FS_RETRY_MS * NSEC_PER_MSEC;
		fail_pending(v, -EIO, done);
		return;
	}
	pr_info("%s: reconnected to %s (%s)", v->base.name, v->path,
		type_name(v->type));
	v->dead = false;
	v->warned_retry = false;
	v->rlen = 0;
	if (!v->init_len)
		return;
	memcpy(v->out, v->init, v->init_len);
	memcpy(&ih, v->out, sizeof(ih));
	ih.unique = VIRTUAL_FS_REPLAY_UNIQUE;
	memcpy(v->out, &ih, sizeof(ih));
	v->out_len = v->init_len;
	v->out_off = 0;
	v->replay_wait = true;
}

/* ---- the relay thread ------------------------------------------------- */

/* Logs the first bad packet of the backend; later ones are not. */
static void bad_reply(struct virtual_fs *v, const char *what,
		      unsigned long long value)
{
	warn__once(&v->warned_invalid, v->base.name, "",
		   "invalid reply from %s: %s (%llu)", v->path, what, value);
}

/*
 * The answer to the replayed FUSE_INIT (under lock): taken, not passed
 * on. A refusal ends the connection: the server will not serve the
 * session the guest has.
 */
static void replay_answered(struct virtual_fs *v,
			    const struct fuse_out_header *oh,
			    struct list_head *done)
{
	char why[80];

	v->replay_wait = false;
	if (!oh->error)
		return;
	snprintf(why, sizeof(why), "refused the replayed FUSE_INIT (%d)",
		 oh->error);
	server_gone(v, why, done);
}

/*
 * One message of n bytes at buf (n may exceed FS_FORWARD_MAX on a
 * SOCK_SEQPACKET: MSG_TRUNC; on a stream, n is the header's len). False
 * when it ended the connection.
 */
static bool handle_packet(struct virtual_fs *v, const uint8_t *buf, size_t n)
{
	struct fuse_out_header oh;
	struct list_head done;
	struct vreq *e = NULL;
	bool replay = false;

	if (n > FS_FORWARD_MAX) {
		bad_reply(v, "longer than FS_FORWARD_MAX, dropped", n);
		return true;
	}
	if (n < sizeof(oh)) {
		bad_reply(v, "shorter than a header, dropped", n);
		return true;
	}
	memcpy(&oh, buf, sizeof(oh));
	if (oh.len != n) {
		bad_reply(v, "len is not the packet's, dropped", oh.len);
		return true;
	}
	list_init(&done);
	pthread_mutex_lock(&v->lock);
	if (oh.unique == VIRTUAL_FS_REPLAY_UNIQUE && v->replay_wait) {
		replay = true;
		replay_answered(v, &oh, &done);
	} else {
		e = hash_find(v, oh.unique);
		if (e)
			pending_del(v, e);
	}
	pthread_mutex_unlock(&v->lock);
	if (replay) {
		finish_list(&done);
		return !oh.error;
	}
	if (!e) {
		/* A late reply (the request timed out), or nobody's. */
		bad_reply(v, "unknown unique, dropped", oh.unique);
		return true;
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
		e->req->complete(e->req, buf, (ssize_t)n);
	}
	free(e);
	return true;
}

/*
 * A stream's bytes in rbuf: handles every whole message, keeps a partial
 * one (moved to the front). A len that cannot be a reply's (shorter than
 * the header, longer than FS_FORWARD_MAX) leaves no way to find the next
 * message: -EPROTO, and *bad is that len. So rbuf never holds more than
 * one message's bytes, and it is full only when that message is whole.
 */
static int take_frames(struct virtual_fs *v, uint32_t *bad)
{
	struct fuse_out_header oh;
	size_t off = 0;
	int ret = 0;

	while (v->rlen - off >= sizeof(oh)) {
		memcpy(&oh, v->rbuf + off, sizeof(oh));
		if (oh.len < sizeof(oh) || oh.len > FS_FORWARD_MAX) {
			*bad = oh.len;
			return -EPROTO;
		}
		if (v->rlen - off < oh.len)
			break;
		if (!handle_packet(v, v->rbuf + off, oh.len)) {
			ret = -ECONNABORTED;
			break;
		}
		off += oh.len;
	}
	memmove(v->rbuf, v->rbuf + off, v->rlen - off);
	v->rlen -= off;
	return ret;
}

/*
 * One read: a packet, or a stream's bytes. 1 to read on, 0 when the
 * socket is empty, -1 when the connection ended (*why set).
 */
static int receive_one(struct virtual_fs *v, char *why, size_t len)
{
	uint32_t bad = 0;
	ssize_t n;
	int ret;

	if (v->type == SOCK_STREAM)
		n = recv(v->sock, v->rbuf + v->rlen, FS_FORWARD_MAX - v->rlen,
			 MSG_DONTWAIT);
	else
		n = recv(v->sock, v->rbuf, FS_FORWARD_MAX,
			 MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && errno == EINTR)
		return 1;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n < 0) {
		snprintf(why, len, "failed: %s", strerror(errno));
		return -1;
	}
	if (n == 0) {
		/*
		 * EOF (SOCK_SEQPACKET cannot tell an empty packet from it:
		 * the protocol has none).
		 */
		snprintf(why, len, "closed the connection");
		if (v->rlen)
			snprintf(why, len,
				 "closed the connection in a message (%zu "
				 "bytes of it came)",
				 v->rlen);
		return -1;
	}
	if (v->type != SOCK_STREAM) {
		if (!handle_packet(v, v->rbuf, (size_t)n))
			return 0; /* replay_answered() ended it */
		return 1;
	}
	v->rlen += (size_t)n;
	ret = take_frames(v, &bad);
	if (ret == -EPROTO) {
		snprintf(why, len,
			 "sent a reply len of %u (not %zu..%u): protocol "
			 "error, dropped",
			 bad, sizeof(struct fuse_out_header), FS_FORWARD_MAX);
		return -1;
	}
	return ret ? 0 : 1;
}

/* Reads what the socket holds, a batch at most. */
static void receive(struct virtual_fs *v)
{
	struct list_head done;
	char why[128];
	unsigned int i;
	int ret = 1;

	for (i = 0; i < VIRTUAL_FS_RECV_BATCH && ret > 0; i++)
		ret = receive_one(v, why, sizeof(why));
	if (ret >= 0)
		return;
	list_init(&done);
	pthread_mutex_lock(&v->lock);
	server_gone(v, why, &done);
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
		reconnect(v, now, done);
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
		tend_connection(v, now_ns(), &done);
		flush_sends(v, &done);
		expire(v, now_ns(), &done);
		timeout = poll_timeout(v, now_ns());
		pfd[0] = (struct pollfd){ .fd = v->wake, .events = POLLIN };
		pfd[1] = (struct pollfd){
			.fd = v->dead ? -1 : v->sock,
			.events = POLLIN | (wants_out(v) ? POLLOUT : 0),
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
			server_error(v, errno, &done);
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
	keep_init(v, req);
	was_empty = list_empty(&v->pending);
	pending_add(v, e);
	list_init(&done);
	flush_sends(v, &done);
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
	fail_pending(v, -EIO, &done);
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
	ret = connect_server(v);
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
		 type_name(v->type));
	*out = &v->base;
	return 0;

out_destroy:
	virtual_destroy(&v->base);
	return ret;
}
