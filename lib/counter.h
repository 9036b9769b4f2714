/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_COUNTER_H
#define KILN_LIB_COUNTER_H

#include <stdint.h>

/*
 * Monotonic counters for vm.metrics (Documentation/api.md): written by
 * one thread at a time (the owner's, or whoever holds the owner's lock),
 * read by any thread. A relaxed load and store, not a locked
 * read-modify-write: the hot path pays one plain add; a reader sees each
 * counter whole (64-bit aligned), maybe a moment behind, and never sees
 * it go back.
 */
static inline void counter__add(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

static inline uint64_t counter__get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

#endif
