/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FAKEHOOK_H
#define KILN_SELFTESTS_FAKEHOOK_H

/*
 * The orchestrator's decision service as the policy hook's tests play it
 * (selftests/unit/hook.c, proxy.c): a Unix stream listener in a temporary
 * directory, the test accepting the vmm's connection and reading its
 * question lines and writing answers by hand, so each test says exactly
 * what the hook does and when. Every wait is bounded by FAKEHOOK_WAIT_MS;
 * none is a fixed sleep.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FAKEHOOK_WAIT_MS  10000 /* what should happen does, well within this */
#define FAKEHOOK_LINE_MAX 8192

struct fakehook {
	char dir[64];
	char path[96]; /* dir/hook.sock, within sun_path */
	int lsn, conn; /* -1: none */
};

/* A directory of its own; the socket made (listening) or not. */
static inline int fakehook__init(struct fakehook *h, bool listen_now)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	h->lsn = h->conn = -1;
	snprintf(h->dir, sizeof(h->dir), "/tmp/kiln-hook-XXXXXX");
	if (!mkdtemp(h->dir))
		return -errno;
	snprintf(h->path, sizeof(h->path), "%s/hook.sock", h->dir);
	if (!listen_now)
		return 0;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", h->path);
	h->lsn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (h->lsn < 0)
		return -errno;
	if (bind(h->lsn, (struct sockaddr *)&a, sizeof(a)) || listen(h->lsn, 8))
		return -errno;
	return 0;
}

static inline void fakehook__close(struct fakehook *h)
{
	if (h->conn >= 0)
		close(h->conn);
	if (h->lsn >= 0)
		close(h->lsn);
	h->conn = h->lsn = -1;
	if (h->path[0])
		unlink(h->path);
	if (h->dir[0])
		rmdir(h->dir);
}

static inline bool fakehook__wait(int fd, short events, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = events };

	return poll(&pfd, 1, ms) == 1;
}

/* The vmm's connection, once it made one: 0 or -errno. */
static inline int fakehook__accept(struct fakehook *h)
{
	if (!fakehook__wait(h->lsn, POLLIN, FAKEHOOK_WAIT_MS))
		return -ETIMEDOUT;
	if (h->conn >= 0)
		close(h->conn);
	h->conn = accept4(h->lsn, NULL, NULL, SOCK_CLOEXEC);
	return h->conn < 0 ? -errno : 0;
}

/*
 * One question line, its newline dropped, into buf (len bytes, NUL
 * terminated): its length, or -errno (-ETIMEDOUT, -EPIPE: closed).
 * Reads a byte at a time: what follows stays for the next call.
 */
static inline int fakehook__read_line(struct fakehook *h, char *buf, size_t len)
{
	size_t n = 0;
	ssize_t r;
	char c;

	while (n + 1 < len) {
		if (!fakehook__wait(h->conn, POLLIN, FAKEHOOK_WAIT_MS))
			return -ETIMEDOUT;
		r = recv(h->conn, &c, 1, 0);
		if (r < 0)
			return -errno;
		if (!r)
			return -EPIPE;
		if (c == '\n') {
			buf[n] = '\0';
			return (int)n;
		}
		buf[n++] = c;
	}
	return -EMSGSIZE;
}

/* Writes s whole: 0 or -errno. */
static inline int fakehook__send(struct fakehook *h, const char *s)
{
	size_t n = strlen(s), at = 0;
	ssize_t r;

	while (at < n) {
		r = send(h->conn, s + at, n - at, MSG_NOSIGNAL);
		if (r < 0)
			return -errno;
		at += r;
	}
	return 0;
}

/* {"id": ID, "verdict": VERDICT} (and "reason": REASON unless NULL). */
static inline int fakehook__answer(struct fakehook *h, long long id,
				   const char *verdict, const char *reason)
{
	char line[512];

	if (reason)
		snprintf(line, sizeof(line),
			 "{\"id\": %lld, \"verdict\": \"%s\", \"reason\": "
			 "\"%s\"}\n",
			 id, verdict, reason);
	else
		snprintf(line, sizeof(line),
			 "{\"id\": %lld, \"verdict\": \"%s\"}\n", id, verdict);
	return fakehook__send(h, line);
}

#endif
