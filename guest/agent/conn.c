// SPDX-License-Identifier: GPL-2.0
/* Frames in and out of one agent connection (see conn.h). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "guest/agent/conn.h"

int conn__init(struct conn *c, int fd)
{
	c->fd = fd;
	c->have = 0;
	c->in = malloc(KILN_FRAME_MAX);
	return c->in ? 0 : -ENOMEM;
}

void conn__destroy(struct conn *c)
{
	free(c->in);
	c->in = NULL;
}

/* Waits until @fd is ready for @events, or has hung up (then I/O tells). */
static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int conn__recv_some(struct conn *c, struct frame *f)
{
	uint16_t type, flags;
	size_t want, got;
	uint32_t len;
	ssize_t n;
	void *dst;

	for (;;) {
		if (c->have < sizeof(c->hdr)) {
			dst = (uint8_t *)&c->hdr + c->have;
			want = sizeof(c->hdr) - c->have;
		} else {
			if (kiln_frame__unpack(&c->hdr, &type, &flags, &len))
				return -EMSGSIZE;
			got = c->have - sizeof(c->hdr);
			if (got == len) {
				c->have = 0;
				*f = (struct frame){ .type = type,
						     .flags = flags,
						     .len = len,
						     .data = c->in };
				return 1;
			}
			dst = c->in + got;
			want = len - got;
		}
		/* MSG_DONTWAIT whatever the socket's mode: conn__recv waits. */
		n = recv(c->fd, dst, want, MSG_DONTWAIT);
		if (n > 0) {
			c->have += n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
}

int conn__recv(struct conn *c, struct frame *f)
{
	int ret;

	while (!(ret = conn__recv_some(c, f))) {
		ret = wait_fd(c->fd, POLLIN);
		if (ret)
			return ret;
	}
	return ret < 0 ? ret : 0;
}

int conn__send(struct conn *c, uint16_t type, uint16_t flags, const void *p,
	       size_t len)
{
	struct kiln_frame hdr;
	struct iovec iov[2] = {
		{ .iov_base = &hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)p, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	ssize_t n;
	int ret;

	if (len > KILN_FRAME_MAX)
		return -EMSGSIZE;
	kiln_frame__pack(&hdr, type, flags, len);
	while (msg.msg_iovlen) {
		/* MSG_NOSIGNAL: a host that went away is -EPIPE, not SIGPIPE. */
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			/* vsock credit (or a full socket buffer): wait. */
			ret = wait_fd(c->fd, POLLOUT);
			if (ret)
				return ret;
			continue;
		}
		while (msg.msg_iovlen && (size_t)n >= msg.msg_iov->iov_len) {
			n -= msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen) {
			msg.msg_iov->iov_base =
				(uint8_t *)msg.msg_iov->iov_base + n;
			msg.msg_iov->iov_len -= n;
		}
	}
	return 0;
}

int conn__send_buf(struct conn *c, uint16_t type, const struct kiln_buf *b)
{
	return conn__send(c, type, 0, b->data, b->len);
}

int conn__ok(struct conn *c)
{
	return conn__send(c, KILN_MSG_RESULT, 0, NULL, 0);
}

int conn__error_payload(struct kiln_buf *b, int err, const char *msg)
{
	int ret;

	ret = kiln_tlv__put_u64(b, KILN_T_ERRNO, err);
	if (!ret)
		ret = kiln_tlv__put_str(b, KILN_T_ERRNAME,
					kiln_errno__name(err));
	if (!ret && msg)
		ret = kiln_tlv__put_str(b, KILN_T_MESSAGE, msg);
	return ret;
}

int conn__error(struct conn *c, int err, const char *fmt, ...)
{
	struct kiln_buf b;
	char msg[512];
	va_list ap;
	int ret;

	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
	}
	kiln_buf__init(&b);
	ret = conn__error_payload(&b, err, fmt ? msg : NULL);
	if (!ret)
		ret = conn__send_buf(c, KILN_MSG_ERROR, &b);
	kiln_buf__free(&b);
	return ret;
}
