// SPDX-License-Identifier: GPL-2.0
/* The h2 sessions' allocator: charged to a budget, wiped (h2-internal.h). */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "net/h2-internal.h"

static void *mem_charged(struct h2_alloc *a, void *p)
{
	if (p && bytebudget__charge(&a->budget, malloc_usable_size(p))) {
		free(p);
		if (!*a->err)
			*a->err = -ENOBUFS;
		return NULL;
	}
	return p;
}

static void *mem_malloc(size_t size, void *ud)
{
	return mem_charged(ud, malloc(size));
}

static void mem_free(void *p, void *ud)
{
	struct h2_alloc *a = ud;

	if (!p)
		return;
	bytebudget__credit(&a->budget, malloc_usable_size(p));
	explicit_bzero(p, malloc_usable_size(p));
	free(p);
}

static void *mem_calloc(size_t n, size_t size, void *ud)
{
	return mem_charged(ud, calloc(n, size));
}

static void *mem_realloc(void *p, size_t size, void *ud)
{
	size_t old = p ? malloc_usable_size(p) : 0;
	void *q;

	if (!size) {
		mem_free(p, ud);
		return NULL;
	}
	q = mem_malloc(size, ud);
	if (!q)
		return NULL;
	if (p) {
		memcpy(q, p, old < size ? old : size);
		mem_free(p, ud);
	}
	return q;
}

void h2_alloc__init(struct h2_alloc *a, size_t limit, struct bytebudget *parent,
		    int *err)
{
	a->budget = (struct bytebudget){ .limit = limit, .parent = parent };
	a->err = err;
	a->mem = (nghttp2_mem){ .mem_user_data = a,
				.malloc = mem_malloc,
				.free = mem_free,
				.calloc = mem_calloc,
				.realloc = mem_realloc };
}
