// SPDX-License-Identifier: GPL-2.0
/*
 * A block store's client (see store.h): connect, hello, then one request
 * and its answer at a time, each within the connection's deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/store.h"
#include "lib/timespec.h"

/* A whole frame of the largest size, both ways. */
#define STORE_BUF_BYTES (STORE_FRAME_HDR + STORE_MSG_MAX)

struct store {
	int fd;
	bool broken;
	bool claimed; /* the hello had the writer's claim */
	unsigned int timeout_ms;
	uint64_t nr_blocks;
	uint64_t stored;
	struct store_token token; /* the hello's; len 0: none given */
	uint8_t *buf;	   /* STORE_BUF_BYTES: the request, then its answer */
	uint32_t body_len; /* the last answer's, type byte included */
	struct store_write_buf w;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / NSEC_PER_MSEC;
}

/* The connection is given up: where its byte stream stands is unknown. */
static int broken(struct store *s, int ret)
{
	s->broken = true;
	return ret;
}

/* Waits for events until the deadline: 0, -ETIMEDOUT or -errno. */
static int wait_fd(struct store *s, short events, int64_t deadline)
{
	struct pollfd pfd = { .fd = s->fd, .events = events };

	for (;;) {
		int64_t left = deadline - now_ms();
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* One send (events POLLOUT) or receive (POLLIN) that never blocks. */
static ssize_t stream_once(const struct store *s, short events, uint8_t *p,
			   size_t len)
{
	if (events == POLLOUT)
		return send(s->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	return recv(s->fd, p, len, MSG_DONTWAIT);
}

/*
 * Moves len bytes through the socket by the deadline: sent when events is
 * POLLOUT, received into p when it is POLLIN. 0, -ECONNRESET for the
 * peer's end of stream (a receive of nothing), -ETIMEDOUT, -errno.
 */
static int stream_all(struct store *s, short events, uint8_t *p, size_t len,
		      int64_t deadline)
{
	while (len) {
		ssize_t n = stream_once(s, events, p, len);

		if (!n && events == POLLIN)
			return -ECONNRESET;
		if (n < 0) {
			int ret = -errno;

			if (ret == -EINTR)
				continue;
			if (ret != -EAGAIN)
				return ret;
			ret = wait_fd(s, events, deadline);
			if (ret)
				return ret;
			continue;
		}
		p += n;
		len -= n;
	}
	return 0;
}

static int io_err(struct store *s, int ret, const char *what, char *err,
		  size_t elen)
{
	if (ret == -ETIMEDOUT)
		snprintf(err, elen, "%s: no answer within %u ms", what,
			 s->timeout_ms);
	else if (ret == -ECONNRESET || ret == -EPIPE)
		snprintf(err, elen, "%s: the store closed the connection",
			 what);
	else
		snprintf(err, elen, "%s: %s", what, strerror(-ret));
	return broken(s, ret == -ETIMEDOUT ? -ETIMEDOUT : -EIO);
}

/*
 * Sends the len bytes of the request in s->buf and receives its answer
 * there: 0 and the payload (after the type byte) at s->buf +
 * STORE_FRAME_HDR + 1, s->body_len - 1 bytes of it.
 */
static int exchange(struct store *s, uint8_t type, size_t len, const char *what,
		    char *err, size_t elen)
{
	int64_t deadline = now_ms() + s->timeout_ms;
	char why[256];
	uint32_t n;
	int ret;

	if (s->broken) {
		snprintf(err, elen, "%s: the store's connection failed earlier",
			 what);
		return -EIO;
	}
	ret = stream_all(s, POLLOUT, s->buf, len, deadline);
	if (!ret)
		ret = stream_all(s, POLLIN, s->buf, STORE_FRAME_HDR, deadline);
	if (ret)
		return io_err(s, ret, what, err, elen);
	ret = store_proto__frame_len(s->buf, &n, why, sizeof(why));
	if (ret) {
		snprintf(err, elen, "%s: %s", what, why);
		return broken(s, -EIO);
	}
	ret = stream_all(s, POLLIN, s->buf + STORE_FRAME_HDR, n, deadline);
	if (ret)
		return io_err(s, ret, what, err, elen);
	s->body_len = n;
	ret = store_proto__check(type, s->buf + STORE_FRAME_HDR, n, why,
				 sizeof(why));
	if (ret) {
		snprintf(err, elen, "%s: %s", what, why);
		/* A refusal in the protocol leaves the stream where it was. */
		return ret == -EPROTO ? broken(s, -EIO) : ret;
	}
	return 0;
}

static const uint8_t *payload(const struct store *s)
{
	return s->buf + STORE_FRAME_HDR + 1;
}

static int bad_answer(struct store *s, const char *what, const char *why,
		      char *err, size_t elen)
{
	snprintf(err, elen, "%s: %s", what, why);
	return broken(s, -EIO);
}

static int hello(struct store *s, const struct store_params *p, char *err,
		 size_t elen)
{
	struct store_hello h = {
		.version = STORE_PROTO_VERSION,
		.block_size = STORE_BLOCK_SIZE,
		.nr_blocks = p->nr_blocks,
		.flags = p->claim ? STORE_HELLO_CLAIM : 0,
		.base = p->base,
	};
	struct store_hello_reply r;
	char why[256];
	int len, ret;

	len = store_proto__hello(s->buf, STORE_BUF_BYTES, &h);
	if (len < 0) {
		snprintf(err, elen,
			 "hello: base identity \"%s\" is not 1 to "
			 "%u bytes",
			 p->base ? p->base : "", STORE_BASE_MAX);
		return -EINVAL;
	}
	ret = exchange(s, STORE_HELLO, len, "hello", err, elen);
	if (ret)
		return ret;
	ret = store_proto__parse_hello(payload(s), s->body_len - 1, &r, why,
				       sizeof(why));
	if (ret)
		return bad_answer(s, "hello", why, err, elen);
	if (r.version != STORE_PROTO_VERSION) {
		snprintf(why, sizeof(why),
			 "protocol version %" PRIu32 " (this vmm speaks %u)",
			 r.version, STORE_PROTO_VERSION);
		return bad_answer(s, "hello", why, err, elen);
	}
	if (r.block_size != STORE_BLOCK_SIZE) {
		snprintf(why, sizeof(why),
			 "block size %" PRIu32 " (this vmm needs %u)",
			 r.block_size, STORE_BLOCK_SIZE);
		return bad_answer(s, "hello", why, err, elen);
	}
	if (r.stored > p->nr_blocks) {
		snprintf(why, sizeof(why),
			 "%" PRIu64 " blocks stored, the "
			 "base has %" PRIu64,
			 r.stored, p->nr_blocks);
		return bad_answer(s, "hello", why, err, elen);
	}
	s->stored = r.stored;
	s->token = r.token;
	s->claimed = p->claim;
	return 0;
}

int store__connect(struct store **out, const struct store_params *p, char *err,
		   size_t elen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct store *s;
	int ret;

	if (strlen(p->socket_path) >= sizeof(sa.sun_path)) {
		snprintf(err, elen, "store socket \"%s\": path too long",
			 p->socket_path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, p->socket_path);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->nr_blocks = p->nr_blocks;
	s->timeout_ms = p->timeout_ms ? p->timeout_ms : STORE_TIMEOUT_MS;
	s->buf = malloc(STORE_BUF_BYTES);
	if (!s->buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		snprintf(err, elen, "store socket \"%s\": %s", p->socket_path,
			 strerror(-ret));
		goto out_close;
	}
	ret = hello(s, p, err, elen);
	if (ret)
		goto out_close;
	*out = s;
	return 0;

out_close:
	store__close(s);
	return ret;
}

/*
 * A store lets the writer's claim go before it closes its end of the
 * connection ("Block stores" in Documentation/rootfs.md): half-close and
 * wait for that end, within the deadline, so whoever connects next (the
 * same machine booted again) finds the claim free, not still held while
 * the store notices this connection's end.
 */
static void release_claim(struct store *s)
{
	int64_t deadline = now_ms() + s->timeout_ms;
	uint8_t sink[256];

	if (shutdown(s->fd, SHUT_WR))
		return;
	for (;;) {
		ssize_t n = recv(s->fd, sink, sizeof(sink), MSG_DONTWAIT);

		if (!n)
			return;
		if (n > 0 || errno == EINTR)
			continue;
		if (errno != EAGAIN || wait_fd(s, POLLIN, deadline))
			return;
	}
}

void store__close(struct store *s)
{
	if (!s)
		return;
	if (s->fd >= 0 && s->claimed && !s->broken)
		release_claim(s);
	if (s->fd >= 0)
		close(s->fd);
	free(s->buf);
	free(s);
}

uint64_t store__stored(const struct store *s)
{
	return s->stored;
}

const struct store_token *store__hello_token(const struct store *s)
{
	return &s->token;
}

bool store__broken(const struct store *s)
{
	return s->broken;
}

int store__list(struct store *s, void (*fn)(void *arg, uint64_t block),
		void *arg, char *err, size_t elen)
{
	uint64_t cursor = 0, next, seen = 0;
	const uint8_t *blocks;
	char why[256];
	uint32_t n;
	int len, ret;

	while (cursor != UINT64_MAX) {
		len = store_proto__list(s->buf, STORE_BUF_BYTES, cursor,
					STORE_LIST_MAX);
		if (len < 0)
			return len;
		ret = exchange(s, STORE_LIST, len, "list", err, elen);
		if (ret)
			return ret;
		ret = store_proto__parse_list(payload(s), s->body_len - 1,
					      cursor, s->nr_blocks, &next,
					      &blocks, &n, why, sizeof(why));
		if (ret)
			return bad_answer(s, "list", why, err, elen);
		seen += n;
		if (seen > s->stored) {
			snprintf(why, sizeof(why),
				 "more blocks listed than the %" PRIu64
				 " hello said",
				 s->stored);
			return bad_answer(s, "list", why, err, elen);
		}
		for (uint32_t i = 0; i < n; i++)
			fn(arg, store_proto__u64(blocks + i * 8));
		cursor = next;
	}
	return 0;
}

int store__read(struct store *s, const struct store_range *r, unsigned int nr,
		uint8_t *out, char *err, size_t elen)
{
	const uint8_t *data;
	uint32_t count = 0;
	char why[256];
	int len, ret;

	for (unsigned int i = 0; i < nr; i++) {
		if (r[i].first >= s->nr_blocks ||
		    r[i].count > s->nr_blocks - r[i].first)
			return -EINVAL;
		count += r[i].count;
	}
	len = store_proto__read(s->buf, STORE_BUF_BYTES, r, nr);
	if (len < 0)
		return len;
	ret = exchange(s, STORE_READ, len, "read", err, elen);
	if (ret)
		return ret;
	ret = store_proto__parse_read(payload(s), s->body_len - 1, count,
				      STORE_BLOCK_SIZE, &data, why,
				      sizeof(why));
	if (ret)
		return bad_answer(s, "read", why, err, elen);
	memcpy(out, data, (size_t)count * STORE_BLOCK_SIZE);
	return 0;
}

void store__write_begin(struct store *s)
{
	store_proto__write_start(&s->w, s->buf, STORE_BUF_BYTES,
				 STORE_BLOCK_SIZE);
}

int store__write_add(struct store *s, uint64_t block, const uint8_t *data)
{
	if (block >= s->nr_blocks)
		return -EINVAL;
	return store_proto__write_add(&s->w, block, data);
}

unsigned int store__write_count(const struct store *s)
{
	return s->w.nr;
}

int store__write_send(struct store *s, char *err, size_t elen)
{
	char why[256];
	int len, ret;

	len = store_proto__write_end(&s->w);
	if (len < 0)
		return len;
	ret = exchange(s, STORE_WRITE, len, "write", err, elen);
	if (ret)
		return ret;
	ret = store_proto__parse_empty(payload(s), s->body_len - 1, "write",
				       why, sizeof(why));
	return ret ? bad_answer(s, "write", why, err, elen) : 0;
}

int store__flush(struct store *s, char *err, size_t elen)
{
	char why[256];
	int len, ret;

	len = store_proto__flush(s->buf, STORE_BUF_BYTES);
	if (len < 0)
		return len;
	ret = exchange(s, STORE_FLUSH, len, "flush", err, elen);
	if (ret)
		return ret;
	ret = store_proto__parse_empty(payload(s), s->body_len - 1, "flush",
				       why, sizeof(why));
	return ret ? bad_answer(s, "flush", why, err, elen) : 0;
}

int store__state(struct store *s, struct store_token *t, char *err, size_t elen)
{
	char why[256];
	int len, ret;

	if (!s->token.len) {
		snprintf(err, elen,
			 "state: the store gave no state token in its hello "
			 "(it does not support snapshots)");
		return -EOPNOTSUPP;
	}
	len = store_proto__state(s->buf, STORE_BUF_BYTES);
	if (len < 0)
		return len;
	ret = exchange(s, STORE_STATE, len, "state", err, elen);
	if (ret)
		return ret;
	ret = store_proto__parse_state(payload(s), s->body_len - 1, t, why,
				       sizeof(why));
	return ret ? bad_answer(s, "state", why, err, elen) : 0;
}
