/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_BYTEQUEUE_H
#define KILN_LIB_BYTEQUEUE_H

/*
 * A growable FIFO of bytes: appended at the tail, consumed from the head,
 * for a nonblocking socket's unsent or partly parsed bytes. The queued
 * bytes are always contiguous (bytequeue__peek), so a whole line or frame
 * can be parsed in place. A zeroed struct is an empty queue.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/* Emptied, a queue whose buffer grew beyond this gives it back. */
#define BYTEQUEUE_KEEP_MAX (256U << 10)

/*
 * A bound on the bytes some owner holds (a connection's, a VM's), in
 * a chain: a charge is taken from each budget up to the top, all or
 * nothing, and fails with -ENOBUFS where one would pass its limit.
 * peak is the most ever held, for the tests and the status. One thread
 * owns a chain: no locking. A zeroed struct has no limit.
 */
struct bytebudget {
	size_t held;
	size_t peak;
	size_t limit; /* bytes; 0: unbounded */
	struct bytebudget *parent;
};

/* 0, or -ENOBUFS (nothing charged). NULL is unbounded. */
int __must_check bytebudget__charge(struct bytebudget *b, size_t n);
/* Gives back n bytes charged before, along the chain. */
void bytebudget__credit(struct bytebudget *b, size_t n);
/* Whether n more bytes would fit everywhere up the chain. */
bool bytebudget__room(const struct bytebudget *b, size_t n);

struct bytequeue {
	uint8_t *data;
	size_t head; /* first byte still queued */
	size_t len;  /* bytes queued */
	size_t cap;
	/* Its buffer's bytes are charged here; NULL: to nobody. */
	struct bytebudget *budget;
};

/* Frees the buffer; the queue is empty and usable again (same budget). */
void bytequeue__free(struct bytequeue *q);
/*
 * Room for `more` bytes after the queued ones: 0, -ENOMEM, or -ENOBUFS
 * (its budget would pass its limit).
 */
int __must_check bytequeue__reserve(struct bytequeue *q, size_t more);
/* Appends n bytes (all or nothing): 0, -ENOMEM or -ENOBUFS. */
int __must_check bytequeue__append(struct bytequeue *q, const void *p,
				   size_t n);
/* Drops the first n queued bytes (n <= len). */
void bytequeue__consume(struct bytequeue *q, size_t n);

/*
 * The first queued byte. A queue that never held anything has no buffer:
 * NULL then (NULL plus an offset, even 0, is undefined behaviour).
 */
static inline uint8_t *bytequeue__peek(const struct bytequeue *q)
{
	return q->data ? q->data + q->head : NULL;
}

/* Where bytes reserved with bytequeue__reserve go, e.g. for recv(). */
static inline uint8_t *bytequeue__space(const struct bytequeue *q)
{
	return q->data ? q->data + q->head + q->len : NULL;
}

/* n bytes written at bytequeue__space are now queued. */
static inline void bytequeue__commit(struct bytequeue *q, size_t n)
{
	q->len += n;
}

#endif
