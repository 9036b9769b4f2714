/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NET_H2_INTERNAL_H
#define KILN_NET_H2_INTERNAL_H

#include <stddef.h>

#include <nghttp2/nghttp2.h>

#include "lib/bytequeue.h"

/*
 * What both nghttp2 sessions of a connection allocate with (net/h2.c's
 * memory bound): each block charged to budget (malloc_usable_size(), the
 * same at its free), wiped when freed (upstream's session holds the
 * injected values: frames, HPACK). An allocation past the budget fails
 * and sets *err to -ENOBUFS (if it held no error yet): the connection
 * fails with it.
 */
struct h2_alloc {
	struct bytebudget budget;
	int *err;
	nghttp2_mem mem; /* for nghttp2_session_*_new3() */
};

/* A budget of limit bytes charged to parent too (NULL: none). */
void h2_alloc__init(struct h2_alloc *a, size_t limit, struct bytebudget *parent,
		    int *err);

#endif
