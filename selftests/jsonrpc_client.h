/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_JSONRPC_CLIENT_H
#define KILN_SELFTESTS_JSONRPC_CLIENT_H

/*
 * A small blocking client of the control API (Documentation/api.md) for
 * tests: JSON-RPC 2.0, one JSON text per line, on a Unix stream socket.
 * Requests go out as jansson values or raw bytes; answers come back one
 * message at a time, or the answer to one id (tc_wait: whatever else
 * came first is dropped, so a test that has several requests in flight
 * reads with tc_recv). Field look-ups for errors, results and base64.
 *
 * Header-only; needs jansson. The base64 here is the test's own, not
 * the server's (lib/base64.c), and as strict: what the server sends
 * must be canonical, padded and unbroken.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "selftests/kselftest.h"

/*
 * Default for any one answer. A sanitized API (SAN=1) is several times
 * slower, and under a loaded host it once took more than 10 s to answer
 * vm.facts behind 100 MB of a hostile agent's frames (api_hostile).
 */
#define TC_WAIT_MS (KILN_ASAN ? 60000 : 10000)

static inline uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* A connected stream socket to path: the fd, or -errno. */
static inline int unix_connect(const char *path, bool nonblock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	int fd;

	if (len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, len + 1);
	fd = socket(AF_UNIX,
		    SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0),
		    0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* ---- base64 (RFC 4648: "+/", "=" padding, no line breaks) ---------------- */

static const char tc_b64_alphabet[] __ksft_unused =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* n bytes as base64 in out (room for (n + 2) / 3 * 4 + 1). */
static inline void tc_b64_encode(const void *in, size_t n, char *out)
{
	const uint8_t *p = in;
	uint32_t v;
	size_t i, k;

	for (i = 0; i < n; i += 3) {
		k = n - i < 3 ? n - i : 3;
		v = (uint32_t)p[i] << 16;
		if (k > 1)
			v |= (uint32_t)p[i + 1] << 8;
		if (k > 2)
			v |= p[i + 2];
		*out++ = tc_b64_alphabet[v >> 18];
		*out++ = tc_b64_alphabet[(v >> 12) & 63];
		*out++ = k > 1 ? tc_b64_alphabet[(v >> 6) & 63] : '=';
		*out++ = k > 2 ? tc_b64_alphabet[v & 63] : '=';
	}
	*out = '\0';
}

/*
 * n characters into out (room for n / 4 * 3): the byte count, or
 * -EINVAL. Strict by re-encoding: only the one canonical spelling of
 * the bytes is accepted (padding required, zero pad bits, nothing else).
 */
static inline ssize_t tc_b64_decode(const char *in, size_t n, uint8_t *out)
{
	size_t i, j, len = 0;
	uint32_t v;
	char *again;
	bool ok;

	if (n % 4)
		return -EINVAL;
	for (i = 0; i < n; i += 4) {
		int pad = 0;

		for (v = 0, j = 0; j < 4; j++) {
			const char *c =
				in[i + j] ? strchr(tc_b64_alphabet, in[i + j]) :
					    NULL;

			if (in[i + j] == '=' && i + 4 == n && j >= 2) {
				pad++;
				v <<= 6;
				continue;
			}
			if (!c || pad)
				return -EINVAL;
			v = v << 6 | (uint32_t)(c - tc_b64_alphabet);
		}
		out[len++] = v >> 16;
		if (pad < 2)
			out[len++] = v >> 8;
		if (pad < 1)
			out[len++] = v;
	}
	again = malloc(n + 1);
	if (!again)
		return -ENOMEM;
	tc_b64_encode(out, len, again);
	ok = !memcmp(again, in, n);
	free(again);
	return ok ? (ssize_t)len : -EINVAL;
}

/* ---- the client ---------------------------------------------------------- */

struct tc {
	int fd;
	char *buf; /* received, not yet returned */
	size_t len, cap;
	int wait_ms; /* tc_wait and collect_stream: for one answer */
};

static inline int tc_open(struct tc *t, const char *path)
{
	memset(t, 0, sizeof(*t));
	t->wait_ms = TC_WAIT_MS;
	t->fd = unix_connect(path, false);
	return t->fd < 0 ? t->fd : 0;
}

static inline void tc_close(struct tc *t)
{
	if (t->fd >= 0)
		close(t->fd);
	free(t->buf);
	memset(t, 0, sizeof(*t));
	t->fd = -1;
}

static inline int tc_send_raw(struct tc *t, const void *p, size_t n)
{
	const char *c = p;
	ssize_t w;

	while (n) {
		w = send(t->fd, c, n, MSG_NOSIGNAL);
		if (w < 0)
			return -errno;
		c += w;
		n -= w;
	}
	return 0;
}

/* A request line from a JSON value (stolen). */
static inline int tc_send(struct tc *t, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	int ret;

	json_decref(msg);
	if (!s)
		return -ENOMEM;
	ret = tc_send_raw(t, s, strlen(s));
	ret = ret ?: tc_send_raw(t, "\n", 1);
	free(s);
	return ret;
}

/*
 * A request line (params stolen; NULL: {}) with n raw bytes after it, as
 * fs.write {stream, size: n} sends its body, appended to *buf (*len
 * bytes so far, realloc'ed): several go out in one send (tc_send_raw).
 */
static inline int tc_frame_body(char **buf, size_t *len, json_int_t id,
				const char *method, json_t *params,
				const void *body, size_t n)
{
	json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id",
				id, "method", method, "params",
				params ? params : json_object());
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	size_t sl = s ? strlen(s) : 0;
	char *nb = s ? realloc(*buf, *len + sl + 1 + n) : NULL;

	json_decref(msg);
	if (!nb) {
		free(s);
		return -ENOMEM;
	}
	memcpy(nb + *len, s, sl);
	nb[*len + sl] = '\n';
	if (n)
		memcpy(nb + *len + sl + 1, body, n);
	*buf = nb;
	*len += sl + 1 + n;
	free(s);
	return 0;
}

/* params is stolen; NULL: {}. */
static inline int tc_request(struct tc *t, json_int_t id, const char *method,
			     json_t *params)
{
	return tc_send(t, json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0",
				    "id", id, "method", method, "params",
				    params ? params : json_object()));
}

/*
 * The next message, waiting at most timeout_ms; NULL on timeout, EOF
 * (*eof set) or junk.
 */
static inline json_t *tc_recv(struct tc *t, int timeout_ms, bool *eof)
{
	uint64_t end = ms_now() + timeout_ms;
	char *nl;
	json_t *msg;

	if (eof)
		*eof = false;
	for (;;) {
		struct pollfd p = { .fd = t->fd, .events = POLLIN };
		int64_t left = (int64_t)(end - ms_now());
		ssize_t n;

		nl = t->len ? memchr(t->buf, '\n', t->len) : NULL;
		if (nl) {
			msg = json_loadb(t->buf, nl - t->buf, 0, NULL);
			t->len -= nl + 1 - t->buf;
			memmove(t->buf, nl + 1, t->len);
			return msg;
		}
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return NULL;
		if (t->cap - t->len < 65536) {
			t->cap = t->cap ? t->cap * 2 : 1 << 20;
			t->buf = realloc(t->buf, t->cap);
			if (!t->buf)
				return NULL;
		}
		n = recv(t->fd, t->buf + t->len, 65536, 0);
		if (n <= 0) {
			if (eof)
				*eof = true;
			return NULL;
		}
		t->len += n;
	}
}

/*
 * Exactly n raw bytes after the last line tc_recv returned (a
 * notification's body: fs.chunk with size), waiting at most timeout_ms
 * in all; -ETIMEDOUT, or -EPIPE at EOF before all of them.
 */
static inline int tc_recv_body(struct tc *t, int timeout_ms, void *out,
			       size_t n)
{
	uint64_t end = ms_now() + timeout_ms;
	uint8_t *o = out;
	size_t take;

	for (;;) {
		struct pollfd p = { .fd = t->fd, .events = POLLIN };
		int64_t left = (int64_t)(end - ms_now());
		ssize_t got;

		take = t->len < n ? t->len : n;
		memcpy(o, t->buf, take);
		t->len -= take;
		memmove(t->buf, t->buf + take, t->len);
		o += take;
		n -= take;
		if (!n)
			return 0;
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return -ETIMEDOUT;
		got = recv(t->fd, o, n, 0);
		if (got <= 0)
			return -EPIPE;
		o += got;
		n -= got;
		if (!n)
			return 0;
	}
}

static inline bool msg_has_id(json_t *msg, json_int_t id)
{
	json_t *v = json_object_get(msg, "id");

	return json_is_integer(v) && json_integer_value(v) == id;
}

/* The answer to id; notifications and other answers before it are dropped. */
static inline json_t *tc_wait(struct tc *t, json_int_t id)
{
	uint64_t end = ms_now() + t->wait_ms;
	json_t *msg;

	while (ms_now() < end) {
		msg = tc_recv(t, end - ms_now(), NULL);
		if (!msg)
			return NULL;
		if (msg_has_id(msg, id))
			return msg;
		json_decref(msg);
	}
	return NULL;
}

static inline json_t *tc_call(struct tc *t, json_int_t id, const char *method,
			      json_t *params)
{
	if (tc_request(t, id, method, params))
		return NULL;
	return tc_wait(t, id);
}

/* {"path": path}: fs.stat, fs.readDir, fs.readFile, fs.mkdir, fs.remove. */
static inline json_t *fs_call(struct tc *t, json_int_t id, const char *method,
			      const char *path)
{
	return tc_call(t, id, method, json_pack("{s:s}", "path", path));
}

/* error.code; 0 when the message is no error. */
static inline json_int_t err_code(json_t *msg)
{
	return json_integer_value(
		json_object_get(json_object_get(msg, "error"), "code"));
}

/* error.data.errno ("ENOENT"...), or NULL. */
static inline const char *err_errno(json_t *msg)
{
	return json_string_value(json_object_get(
		json_object_get(json_object_get(msg, "error"), "data"),
		"errno"));
}

static inline json_t *result(json_t *msg)
{
	return json_object_get(msg, "result");
}

static inline json_int_t res_int(json_t *msg, const char *key)
{
	return json_integer_value(json_object_get(result(msg), key));
}

/* A base64 field as a NUL-terminated string (malloc'ed); NULL if bad. */
static inline char *b64_str(json_t *obj, const char *key, size_t *len)
{
	json_t *v = json_object_get(obj, key);
	char *out;
	ssize_t n;

	if (!json_is_string(v))
		return NULL;
	out = malloc(json_string_length(v) / 4 * 3 + 1);
	if (!out)
		return NULL;
	n = tc_b64_decode(json_string_value(v), json_string_length(v),
			  (uint8_t *)out);
	if (n < 0) {
		free(out);
		return NULL;
	}
	out[n] = '\0';
	if (len)
		*len = n;
	return out;
}

/* n bytes as a base64 JSON string (new reference). */
static inline json_t *b64_json(const void *p, size_t n)
{
	char *s = malloc((n + 2) / 3 * 4 + 1);
	json_t *j;

	if (!s)
		return NULL;
	tc_b64_encode(p, n, s);
	j = json_string(s);
	free(s);
	return j;
}

/*
 * stream.* of one stream until its exit (the exit params) or until stdout
 * has until in it (NULL); stdout in out. Other messages are dropped.
 */
static inline json_t *collect_stream(struct tc *t, json_int_t stream, char *out,
				     size_t cap, const char *until)
{
	uint64_t end = ms_now() + t->wait_ms;
	size_t len = 0, n;
	json_t *m, *p;
	const char *method;
	char *d;

	out[0] = '\0';
	while (ms_now() < end) {
		m = tc_recv(t, end - ms_now(), NULL);
		if (!m)
			return NULL;
		method = json_string_value(json_object_get(m, "method"));
		p = json_object_get(m, "params");
		if (!method || json_integer_value(json_object_get(
				       p, "stream")) != stream) {
			json_decref(m);
			continue;
		}
		if (!strcmp(method, "stream.exit")) {
			json_incref(p);
			json_decref(m);
			return p;
		}
		if (!strcmp(method, "stream.stdout")) {
			d = b64_str(p, "data", &n);
			if (d && len + n < cap) {
				memcpy(out + len, d, n);
				len += n;
				out[len] = '\0';
			}
			free(d);
		}
		json_decref(m);
		if (until && strstr(out, until))
			return NULL;
	}
	return NULL;
}

/* Still serving at path: vm.status answers and a command runs. */
#define EXPECT_SERVING(path)                                                 \
	do {                                                                 \
		struct tc __t;                                               \
		json_t *__m;                                                 \
		ASSERT_EQ(0, tc_open(&__t, path));                           \
		__m = tc_call(&__t, 900, "vm.status", NULL);                 \
		ASSERT_TRUE(__m != NULL);                                    \
		EXPECT_STREQ("running", json_string_value(json_object_get(   \
						result(__m), "state")));     \
		json_decref(__m);                                            \
		__m = tc_call(&__t, 901, "exec",                             \
			      json_pack("{s:[s, s, s]}", "argv", "sh", "-c", \
					"exit 5"));                          \
		ASSERT_TRUE(__m != NULL);                                    \
		EXPECT_EQ(5, res_int(__m, "exitCode"));                      \
		json_decref(__m);                                            \
		tc_close(&__t);                                              \
	} while (0)

#endif
