/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_TESTUTIL_H
#define KILN_SELFTESTS_TESTUTIL_H

/*
 * Small helpers the unit tests share: a PRNG, capturing stderr, and a
 * file to read "for ever".
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "lib/compiler.h"

/*
 * Built with AddressSanitizer (SAN=1, Documentation/fuzzing.md): its
 * quarantine, redzones and shadow make a process's peak memory say
 * nothing about what the code itself holds; bounds on it are not checked.
 */
static inline bool testutil__asan(void)
{
	return KILN_ASAN;
}

/* xorshift64*: deterministic for a seed, good enough to shake a device. */
static inline uint64_t prng__next(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545f4914f6cdd1dULL;
}

struct stderr_capture {
	FILE *log;
	int saved;
};

static inline int stderr_capture__begin(struct stderr_capture *c)
{
	c->log = tmpfile();
	if (!c->log)
		return -errno;
	fflush(stderr);
	c->saved = dup(STDERR_FILENO);
	if (c->saved < 0 || dup2(fileno(c->log), STDERR_FILENO) < 0) {
		fclose(c->log);
		return -errno;
	}
	return 0;
}

/* Restores stderr, fills buf with what was written; returns its lines. */
static inline int stderr_capture__end(struct stderr_capture *c, char *buf,
				      size_t len)
{
	const char *p;
	int lines = 0;
	size_t n;

	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	rewind(c->log);
	n = fread(buf, 1, len - 1, c->log);
	buf[n] = '\0';
	fclose(c->log);
	for (p = buf; (p = strchr(p, '\n')); p++)
		lines++;
	return lines;
}

/*
 * dir/forever, a FIFO that only this process holds open for writing and
 * never writes: a command reading it (cat) runs until this process ends.
 * It stands for "for ever" where the code under test must not wait for
 * it, without leaving a process behind when a hanging test is killed.
 * The path goes to path (len bytes); 0 or -errno.
 */
static inline int forever_fifo(const char *dir, char *path, size_t len)
{
	if ((size_t)snprintf(path, len, "%s/forever", dir) >= len)
		return -ENAMETOOLONG;
	if (!access(path, F_OK))
		return 0;
	if (mkfifo(path, 0600))
		return -errno;
	/* Kept open (O_RDWR: no wait for a reader) until exit. */
	if (open(path, O_RDWR | O_CLOEXEC) < 0)
		return -errno;
	return 0;
}

/*
 * IPv6 off in this network namespace (for interfaces made from now on):
 * no router or neighbour solicitations, no MLD, so a test's capture of a
 * tap or veth sees only what the test sent. Best effort.
 */
static inline void test_quiet_ipv6(void)
{
	static const char *const paths[] = {
		"/proc/sys/net/ipv6/conf/all/disable_ipv6",
		"/proc/sys/net/ipv6/conf/default/disable_ipv6",
	};

	for (unsigned int i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		int fd = open(paths[i], O_WRONLY | O_CLOEXEC);

		if (fd < 0)
			continue;
		if (write(fd, "1", 1) != 1) {
			/* Nothing to do: it only keeps the captures quiet. */
		}
		close(fd);
	}
}

/*
 * A scratch directory for a snapshot: base mkdtemp'ed (0700) from
 * "/tmp/PREFIX-XXXXXX", dir its "snap" (not made: snap_dir__create's).
 */
struct snap_tmp {
	char base[64];
	char dir[96];
};

static inline bool snap_tmp__make(struct snap_tmp *t, const char *prefix)
{
	snprintf(t->base, sizeof(t->base), "/tmp/%s-XXXXXX", prefix);
	if (!mkdtemp(t->base))
		return false;
	snprintf(t->dir, sizeof(t->dir), "%s/snap", t->base);
	return true;
}

static inline void snap_tmp__clean(const struct snap_tmp *t)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->base);
	if (system(cmd))
		(void)0;
}

#endif
