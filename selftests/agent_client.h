/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_AGENT_CLIENT_H
#define KILN_SELFTESTS_AGENT_CLIENT_H

/*
 * A small blocking client of the guest agent protocol
 * (proto/agent.h, Documentation/agent-protocol.md) for tests:
 * frames in and out of a connected stream socket, field look-ups in a
 * received message, and one whole PROC_START exchange that feeds stdin
 * while it reads output (as any host must, or a command that echoes its
 * input would stall both sides). Header-only; needs proto/tlv.o.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/tlv.h"

/* A received frame; data holds KILN_FRAME_MAX bytes, owned by the msg. */
struct agent_msg {
	uint16_t type;
	uint16_t flags;
	uint32_t len;
	uint8_t *data;
};

static inline int agent_msg__init(struct agent_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->data = malloc(KILN_FRAME_MAX);
	return m->data ? 0 : -ENOMEM;
}

static inline void agent_msg__free(struct agent_msg *m)
{
	free(m->data);
	m->data = NULL;
}

/* The first field @tag of a TLV list; false if absent or malformed. */
static inline bool agent_tlv__find(const uint8_t *p, size_t len, uint16_t want,
				   const uint8_t **val, uint32_t *vlen)
{
	struct kiln_tlv_iter it;
	uint16_t tag;

	kiln_tlv__iter(&it, p, len);
	while (kiln_tlv__next(&it, &tag, val, vlen) > 0)
		if (tag == want)
			return true;
	return false;
}

static inline bool agent_tlv__u64(const uint8_t *p, size_t len, uint16_t tag,
				  uint64_t *out)
{
	const uint8_t *val;
	uint32_t vlen;

	return agent_tlv__find(p, len, tag, &val, &vlen) &&
	       !kiln_tlv__u64(val, vlen, out);
}

/* A string field as a NUL-terminated copy in @out (cut to @size). */
static inline bool agent_tlv__str(const uint8_t *p, size_t len, uint16_t tag,
				  char *out, size_t size)
{
	const uint8_t *val;
	uint32_t vlen;

	if (!agent_tlv__find(p, len, tag, &val, &vlen))
		return false;
	if (vlen >= size)
		vlen = size - 1;
	memcpy(out, val, vlen);
	out[vlen] = '\0';
	return true;
}

static inline bool agent_msg__u64(const struct agent_msg *m, uint16_t tag,
				  uint64_t *out)
{
	return agent_tlv__u64(m->data, m->len, tag, out);
}

static inline bool agent_msg__str(const struct agent_msg *m, uint16_t tag,
				  char *out, size_t size)
{
	return agent_tlv__str(m->data, m->len, tag, out, size);
}

/* ---- the socket ---------------------------------------------------- */

static inline int agent_client__connect_unix(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr))) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

static inline int agent_client__write_all(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;
	ssize_t n;

	while (len) {
		n = send(fd, b, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		b += n;
		len -= n;
	}
	return 0;
}

/* 0, -ECONNRESET at end of file (also in the middle), or -errno. */
static inline int agent_client__read_all(int fd, void *p, size_t len)
{
	uint8_t *b = p;
	ssize_t n;

	while (len) {
		n = recv(fd, b, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		b += n;
		len -= n;
	}
	return 0;
}

static inline int agent_client__send(int fd, uint16_t type, uint16_t flags,
				     const void *p, size_t len)
{
	struct kiln_frame hdr;
	int ret;

	kiln_frame__pack(&hdr, type, flags, len);
	ret = agent_client__write_all(fd, &hdr, sizeof(hdr));
	if (!ret && len)
		ret = agent_client__write_all(fd, p, len);
	return ret;
}

static inline int agent_client__send_buf(int fd, uint16_t type,
					 const struct kiln_buf *b)
{
	return agent_client__send(fd, type, 0, b->data, b->len);
}

/* One frame into @m: 0, -ECONNRESET when the agent closed, -EPROTO. */
static inline int agent_client__recv(int fd, struct agent_msg *m)
{
	struct kiln_frame hdr;
	int ret;

	ret = agent_client__read_all(fd, &hdr, sizeof(hdr));
	if (ret)
		return ret;
	if (kiln_frame__unpack(&hdr, &m->type, &m->flags, &m->len))
		return -EPROTO;
	return agent_client__read_all(fd, m->data, m->len);
}

/* Reads HELLO and checks the version: 0, or negative. */
static inline int agent_client__hello(int fd)
{
	struct agent_msg m;
	uint64_t v = 0;
	int ret;

	ret = agent_msg__init(&m);
	if (!ret)
		ret = agent_client__recv(fd, &m);
	if (!ret && (m.type != KILN_MSG_HELLO ||
		     !agent_msg__u64(&m, KILN_T_VERSION, &v) ||
		     v != KILN_AGENT_VERSION))
		ret = -EPROTO;
	agent_msg__free(&m);
	return ret;
}

/* ---- a whole command ------------------------------------------------ */

struct agent_exec_opts {
	const char *const *argv; /* NULL-terminated */
	const char *const *envp; /* NULL: the agent's environment */
	uint64_t env_merge;	 /* sent as T_ENV_MERGE when not 0 */
	const void *raw_env;	 /* one more T_ENV of raw_env_len bytes */
	size_t raw_env_len;
	const char *cwd;
	const char *user; /* T_USER of user_len bytes (0: strlen) */
	size_t user_len;
	uint64_t timeout_ms;
	bool pty;
	uint16_t rows, cols;
	const void *in; /* stdin, sent in KILN_DATA_CHUNK frames, then EOF */
	size_t in_len;
	bool keep_stdin_open;	      /* send no stdin at all, not even EOF */
	const struct kiln_buf *extra; /* more fields, appended as they are */
};

struct agent_exec_result {
	int error; /* the ERROR's errno; 0 when the command ran */
	char errname[32];
	char err_cwd[256];  /* its T_CWD (the directory that failed), or "" */
	char err_user[256]; /* its T_USER (no such user), or "" */
	char message[256];  /* its T_MESSAGE, or "" */
	uint64_t pid;
	uint64_t exit_code;
	int64_t signal; /* -1: not killed by a signal */
	bool timed_out;
	uint8_t *out, *err; /* malloc'ed, NUL-terminated; free() them */
	size_t out_len, err_len;
};

static inline void agent_exec_result__free(struct agent_exec_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

static inline int agent_client__start(int fd, const struct agent_exec_opts *o)
{
	struct kiln_buf b;
	int ret = 0;

	kiln_buf__init(&b);
	for (const char *const *a = o->argv; a && *a && !ret; a++)
		ret = kiln_tlv__put_str(&b, KILN_T_ARG, *a);
	for (const char *const *e = o->envp; e && *e && !ret; e++)
		ret = kiln_tlv__put_str(&b, KILN_T_ENV, *e);
	if (!ret && o->raw_env)
		ret = kiln_tlv__put_bytes(&b, KILN_T_ENV, o->raw_env,
					  o->raw_env_len);
	if (!ret && o->env_merge)
		ret = kiln_tlv__put_u64(&b, KILN_T_ENV_MERGE, o->env_merge);
	if (!ret && o->cwd)
		ret = kiln_tlv__put_str(&b, KILN_T_CWD, o->cwd);
	if (!ret && o->user)
		ret = kiln_tlv__put_bytes(&b, KILN_T_USER, o->user,
					  o->user_len ?: strlen(o->user));
	if (!ret && o->timeout_ms)
		ret = kiln_tlv__put_u64(&b, KILN_T_TIMEOUT_MS, o->timeout_ms);
	if (!ret && o->pty)
		ret = kiln_tlv__put_u64(&b, KILN_T_PTY, 1);
	if (!ret && o->rows)
		ret = kiln_tlv__put_u64(&b, KILN_T_ROWS, o->rows);
	if (!ret && o->cols)
		ret = kiln_tlv__put_u64(&b, KILN_T_COLS, o->cols);
	if (!ret && o->extra) {
		/* As one field, then without that field's header. */
		size_t at = b.len;

		ret = kiln_tlv__put_bytes(&b, 0, o->extra->data, o->extra->len);
		if (!ret) {
			memmove(b.data + at,
				b.data + at + sizeof(struct kiln_tlv),
				o->extra->len);
			b.len -= sizeof(struct kiln_tlv);
		}
	}
	if (!ret)
		ret = agent_client__send_buf(fd, KILN_MSG_PROC_START, &b);
	kiln_buf__free(&b);
	return ret;
}

static inline int agent__append(uint8_t **buf, size_t *len, const void *p,
				size_t n)
{
	uint8_t *nb = realloc(*buf, *len + n + 1);

	if (!nb)
		return -ENOMEM;
	memcpy(nb + *len, p, n);
	*len += n;
	nb[*len] = '\0';
	*buf = nb;
	return 0;
}

/* stdin being sent: the current frame, header then payload. */
struct agent_stdin {
	const uint8_t *in;
	size_t left; /* payload bytes after the current frame */
	bool done;   /* the EOF frame is out (or stdin stays open) */
	struct kiln_frame hdr;
	const uint8_t *payload;
	size_t hdr_off, payload_len, payload_off;
	bool framed; /* hdr/payload hold a frame being sent */
};

/* Sends what the socket takes now, never blocking: 0 or -errno. */
static inline int agent_stdin__push(int fd, struct agent_stdin *s)
{
	size_t chunk;
	ssize_t n;

	while (!s->done) {
		if (!s->framed) {
			chunk = s->left < KILN_DATA_CHUNK ? s->left :
							    KILN_DATA_CHUNK;
			kiln_frame__pack(&s->hdr, KILN_MSG_PROC_STDIN,
					 chunk == s->left ? KILN_F_EOF : 0,
					 chunk);
			s->payload = s->in;
			s->payload_len = chunk;
			s->hdr_off = s->payload_off = 0;
			s->in += chunk;
			s->left -= chunk;
			s->framed = true;
		}
		if (s->hdr_off < sizeof(s->hdr))
			n = send(fd, (uint8_t *)&s->hdr + s->hdr_off,
				 sizeof(s->hdr) - s->hdr_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		else if (s->payload_off < s->payload_len)
			n = send(fd, s->payload + s->payload_off,
				 s->payload_len - s->payload_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		else
			n = 0;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		if (s->hdr_off < sizeof(s->hdr))
			s->hdr_off += n;
		else
			s->payload_off += n;
		if (s->hdr_off == sizeof(s->hdr) &&
		    s->payload_off == s->payload_len) {
			s->framed = false;
			/* The frame with EOF was the last. */
			if (le16toh(s->hdr.flags) & KILN_F_EOF)
				s->done = true;
		}
	}
	return 0;
}

/*
 * The messages after PROC_START on @fd until PROC_EXIT or ERROR, with
 * stdin from @o fed as the socket takes it, never blocking on a write
 * while output waits to be read. 0 with @r filled, or a negative
 * transport error.
 */
static inline int agent_client__finish(int fd, const struct agent_exec_opts *o,
				       struct agent_exec_result *r)
{
	struct agent_stdin s = { .in = o->in,
				 .left = o->in_len,
				 .done = o->keep_stdin_open };
	struct agent_msg m;
	int ret;

	ret = agent_msg__init(&m);
	if (ret)
		return ret;
	for (;;) {
		struct pollfd p = { .fd = fd,
				    .events = POLLIN | (s.done ? 0 : POLLOUT) };

		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		/* A failed write: the agent stopped reading; its answer tells. */
		if (p.revents & POLLOUT && agent_stdin__push(fd, &s))
			s.done = true;
		if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ret = agent_client__recv(fd, &m);
		if (ret)
			break;
		if (m.type == KILN_MSG_PROC_STARTED) {
			agent_msg__u64(&m, KILN_T_PID, &r->pid);
		} else if (m.type == KILN_MSG_PROC_STDOUT) {
			ret = agent__append(&r->out, &r->out_len, m.data,
					    m.len);
		} else if (m.type == KILN_MSG_PROC_STDERR) {
			ret = agent__append(&r->err, &r->err_len, m.data,
					    m.len);
		} else if (m.type == KILN_MSG_PROC_EXIT) {
			uint64_t sig, to = 0;

			agent_msg__u64(&m, KILN_T_EXIT_CODE, &r->exit_code);
			if (agent_msg__u64(&m, KILN_T_SIGNAL, &sig))
				r->signal = sig;
			agent_msg__u64(&m, KILN_T_TIMED_OUT, &to);
			r->timed_out = to;
			break;
		} else if (m.type == KILN_MSG_ERROR) {
			uint64_t e = EIO;

			agent_msg__u64(&m, KILN_T_ERRNO, &e);
			r->error = e;
			agent_msg__str(&m, KILN_T_ERRNAME, r->errname,
				       sizeof(r->errname));
			agent_msg__str(&m, KILN_T_CWD, r->err_cwd,
				       sizeof(r->err_cwd));
			agent_msg__str(&m, KILN_T_USER, r->err_user,
				       sizeof(r->err_user));
			agent_msg__str(&m, KILN_T_MESSAGE, r->message,
				       sizeof(r->message));
			break;
		} else {
			ret = -EPROTO;
		}
		if (ret)
			break;
	}
	agent_msg__free(&m);
	return ret;
}

/* Empty; the output buffers exist even then ("" compares fine). */
static inline int agent_exec_result__init(struct agent_exec_result *r)
{
	memset(r, 0, sizeof(*r));
	r->signal = -1;
	if (agent__append(&r->out, &r->out_len, "", 0) ||
	    agent__append(&r->err, &r->err_len, "", 0))
		return -ENOMEM;
	return 0;
}

/* PROC_START and everything after it. */
static inline int agent_client__exec(int fd, const struct agent_exec_opts *o,
				     struct agent_exec_result *r)
{
	int ret;

	ret = agent_exec_result__init(r);
	if (ret)
		return ret;
	ret = agent_client__start(fd, o);
	if (ret)
		return ret;
	return agent_client__finish(fd, o, r);
}

#endif
