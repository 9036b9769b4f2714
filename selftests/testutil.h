/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_TESTUTIL_H
#define KILN_SELFTESTS_TESTUTIL_H

/* Small helpers the unit tests share: a PRNG and capturing stderr. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#endif
