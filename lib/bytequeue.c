// SPDX-License-Identifier: GPL-2.0
/* A growable FIFO of bytes (see bytequeue.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/bytequeue.h"

bool bytebudget__room(const struct bytebudget *b, size_t n)
{
	for (; b; b = b->parent)
		if (b->limit && (b->held > b->limit || n > b->limit - b->held))
			return false;
	return true;
}

int bytebudget__charge(struct bytebudget *b, size_t n)
{
	if (!bytebudget__room(b, n))
		return -ENOBUFS;
	for (; b; b = b->parent) {
		b->held += n;
		if (b->held > b->peak)
			b->peak = b->held;
	}
	return 0;
}

void bytebudget__credit(struct bytebudget *b, size_t n)
{
	for (; b; b = b->parent)
		b->held -= n < b->held ? n : b->held;
}

void bytequeue__free(struct bytequeue *q)
{
	struct bytebudget *budget = q->budget;

	free(q->data);
	bytebudget__credit(budget, q->cap);
	memset(q, 0, sizeof(*q));
	q->budget = budget;
}

int bytequeue__reserve(struct bytequeue *q, size_t more)
{
	size_t cap;
	uint8_t *p;

	if (q->head && q->head + q->len + more > q->cap) {
		memmove(q->data, q->data + q->head, q->len);
		q->head = 0;
	}
	if (q->len + more <= q->cap)
		return 0;
	cap = q->cap ? q->cap : 4096;
	while (cap < q->len + more)
		cap *= 2;
	if (bytebudget__charge(q->budget, cap - q->cap))
		return -ENOBUFS;
	p = realloc(q->data, cap);
	if (!p) {
		bytebudget__credit(q->budget, cap - q->cap);
		return -ENOMEM;
	}
	q->data = p;
	q->cap = cap;
	return 0;
}

int bytequeue__append(struct bytequeue *q, const void *p, size_t n)
{
	int ret;

	if (!n) /* an empty queue may have no buffer to copy nothing to */
		return 0;
	ret = bytequeue__reserve(q, n);
	if (ret)
		return ret;
	memcpy(bytequeue__space(q), p, n);
	q->len += n;
	return 0;
}

void bytequeue__consume(struct bytequeue *q, size_t n)
{
	q->head += n;
	q->len -= n;
	if (q->len)
		return;
	q->head = 0;
	/* A burst is over: give a big buffer back. */
	if (q->cap > BYTEQUEUE_KEEP_MAX)
		bytequeue__free(q);
}
