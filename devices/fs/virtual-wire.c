// SPDX-License-Identifier: GPL-2.0
/*
 * The virtual backend's connection (virtual.c has the requests): the
 * connect that finds the server's socket type, the reconnection with the
 * replayed FUSE_INIT, sending in order (a stream's partial send finished
 * from ->out), and receiving: one packet per message on SOCK_SEQPACKET,
 * messages framed by their header's len on SOCK_STREAM, kept in one
 * FS_FORWARD_MAX buffer until whole.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "devices/fs/virtual-internal.h"
#include "lib/log.h"
#include "lib/warn.h"

const char *virtual_fs__type_name(int type)
{
	return type == SOCK_STREAM ? "SOCK_STREAM" : "SOCK_SEQPACKET";
}

/* Whether the relay thread should wait for room in the socket. */
bool virtual_fs__wants_out(const struct virtual_fs *v)
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
			virtual_fs__server_error(v, errno, done);
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
void virtual_fs__flush_sends(struct virtual_fs *v, struct list_head *done)
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
			virtual_fs__pending_del(v, e);
			push_done(done, e, -EIO);
			continue;
		}
		if (n < 0) {
			virtual_fs__server_error(v, errno, done);
			return;
		}
		if ((size_t)n < e->req->len) {
			/* A stream took a part: the rest is the backend's. */
			v->out_len = e->req->len - (size_t)n;
			v->out_off = 0;
			memcpy(v->out, (const uint8_t *)e->req->msg + n,
			       v->out_len);
		}
		v->unsent = virtual_fs__pending_next(v, e);
		if (e->no_reply) {
			virtual_fs__pending_del(v, e);
			push_done(done, e, 0);
		} else {
			e->sent = true;
			virtual_fs__hash_add(v, e);
		}
	}
}

/* Keeps the guest's FUSE_INIT for the next connection (under lock). */
void virtual_fs__keep_init(struct virtual_fs *v,
			   const struct fs_forward_req *req)
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
int virtual_fs__connect(struct virtual_fs *v)
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
void virtual_fs__reconnect(struct virtual_fs *v, uint64_t now,
			   struct list_head *done)
{
	struct fuse_in_header ih;
	int ret;

	ret = virtual_fs__connect(v);
	if (ret) {
		if (!v->warned_retry)
			pr_err("%s: cannot reconnect to %s: %s: requests fail "
			       "with EIO until it listens again",
			       v->base.name, v->path, strerror(-ret));
		v->warned_retry = true;
		v->retry_at = now + VIRTUAL_FS_RETRY_MS * NSEC_PER_MSEC;
		virtual_fs__fail_pending(v, -EIO, done);
		return;
	}
	pr_info("%s: reconnected to %s (%s)", v->base.name, v->path,
		virtual_fs__type_name(v->type));
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
	virtual_fs__server_gone(v, why, done);
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
		e = virtual_fs__hash_find(v, oh.unique);
		if (e)
			virtual_fs__pending_del(v, e);
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
void virtual_fs__receive(struct virtual_fs *v)
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
	virtual_fs__server_gone(v, why, &done);
	pthread_mutex_unlock(&v->lock);
	finish_list(&done);
}
