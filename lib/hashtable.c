// SPDX-License-Identifier: GPL-2.0
/* The chained hash table of lib/hashtable.h. */
#include <errno.h>
#include <stdlib.h>

#include "lib/hashtable.h"

/* Knuth's multiplicative hash: the top bits of key * 2^64 / phi. */
static size_t bucket_of(unsigned int bits, uint64_t key)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
}

int hashtable__init(struct hashtable *t, unsigned int bits)
{
	t->bucket = NULL;
	t->bits = 0;
	t->count = 0;
	if (!bits || bits > HASHTABLE_MAX_BITS)
		return -EINVAL;
	t->bucket = calloc((size_t)1 << bits, sizeof(*t->bucket));
	if (!t->bucket)
		return -ENOMEM;
	t->bits = bits;
	return 0;
}

void hashtable__exit(struct hashtable *t)
{
	free(t->bucket);
	t->bucket = NULL;
	t->count = 0;
}

int hashtable__resize(struct hashtable *t, unsigned int bits)
{
	size_t n = hashtable__buckets(t), i, idx;
	struct hlink **nb, *l, *next;

	if (!bits || bits > HASHTABLE_MAX_BITS)
		return -EINVAL;
	nb = calloc((size_t)1 << bits, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		for (l = t->bucket[i]; l; l = next) {
			next = l->next;
			idx = bucket_of(bits, l->key);
			l->next = nb[idx];
			nb[idx] = l;
		}
	}
	free(t->bucket);
	t->bucket = nb;
	t->bits = bits;
	return 0;
}

void hashtable__add(struct hashtable *t, struct hlink *l, uint64_t key)
{
	struct hlink **b = &t->bucket[bucket_of(t->bits, key)];

	l->key = key;
	l->next = *b;
	*b = l;
	t->count++;
}

void hashtable__del(struct hashtable *t, struct hlink *l)
{
	struct hlink **p;

	for (p = &t->bucket[bucket_of(t->bits, l->key)]; *p; p = &(*p)->next) {
		if (*p == l) {
			*p = l->next;
			t->count--;
			return;
		}
	}
}

struct hlink *hashtable__first(const struct hashtable *t, uint64_t key)
{
	struct hlink *l = t->bucket[bucket_of(t->bits, key)];

	while (l && l->key != key)
		l = l->next;
	return l;
}

struct hlink *hashtable__next(const struct hlink *l)
{
	uint64_t key = l->key;

	for (l = l->next; l && l->key != key; l = l->next)
		;
	return (struct hlink *)l;
}
