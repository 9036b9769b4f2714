/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_HASHTABLE_H
#define KILN_LIB_HASHTABLE_H

/*
 * A chained hash table of 64-bit keys with the links embedded in the
 * entries (the kernel's hlist with a key beside each link). Keys need not
 * be unique: hashtable__first() and hashtable__next() walk every entry
 * holding one key, newest first. Keys are spread by a multiplicative
 * (Fibonacci) hash, so counters and already-hashed values both do;
 * keys a guest picks must be hashed with a key first (lib/siphash.h).
 *
 * The table never resizes itself: its owner decides when (and whether
 * the memory may be spent) and calls hashtable__resize(). The table
 * allocates only its bucket array; entries belong to the caller.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

#define HASHTABLE_MAX_BITS 40U

struct hlink {
	struct hlink *next;
	uint64_t key;
};

struct hashtable {
	struct hlink **bucket; /* NULL before init and after exit */
	unsigned int bits;     /* 1 << bits buckets */
	size_t count;	       /* entries */
};

/* The entry holding link ptr, as the kernel's container_of(). */
#define hashtable__entry(ptr, type, member) \
	((type *)((char *)(ptr)-offsetof(type, member)))

static inline size_t hashtable__buckets(const struct hashtable *t)
{
	return (size_t)1 << t->bits;
}

/* An empty table of 1 << bits buckets (1 <= bits <= HASHTABLE_MAX_BITS). */
int __must_check hashtable__init(struct hashtable *t, unsigned int bits);
/* Frees the bucket array (not the entries); a zeroed table is fine. */
void hashtable__exit(struct hashtable *t);
/*
 * Rehashes into 1 << bits buckets. -ENOMEM or -EINVAL leave the table as
 * it was, so a failed resize only costs time.
 */
int hashtable__resize(struct hashtable *t, unsigned int bits);

void hashtable__add(struct hashtable *t, struct hlink *l, uint64_t key);
/* Unlinks l; an l the table does not hold is ignored. */
void hashtable__del(struct hashtable *t, struct hlink *l);
/* The newest entry with key, or NULL. */
struct hlink *hashtable__first(const struct hashtable *t, uint64_t key);
/* The next older entry with l's key, or NULL. */
struct hlink *hashtable__next(const struct hlink *l);

/*
 * Every entry, bucket by bucket (size_t i, struct hlink *l, *n); l may be
 * deleted (and freed) in the body, nothing else may change the table.
 */
#define hashtable__for_each_safe(t, i, l, n)                               \
	for ((i) = 0; (t)->bucket && (i) < hashtable__buckets(t); (i)++)   \
		for ((l) = (t)->bucket[i]; (l) && ((n) = (l)->next, true); \
		     (l) = (n))

#endif
