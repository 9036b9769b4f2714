/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_RADIX_H
#define KILN_LIB_RADIX_H

/*
 * A radix tree from 64-bit indices to non-NULL pointers, 64 slots a
 * node, only as tall as the largest index needs: a sparse set of items
 * costs only the nodes on their paths. Meant for dense-ish indices such
 * as a file's page numbers.
 *
 * Nodes come from the caller's allocator (struct radix_alloc) so an owner
 * can charge them to a budget; NULL means calloc() and free(). Items
 * belong to the caller.
 */

#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

#define RADIX_NONE UINT64_MAX /* radix__next(): no item at or above */

/* A zeroed struct radix_tree is an empty tree. */
struct radix_tree {
	void *root;	     /* NULL when empty */
	unsigned int height; /* levels; indices below 2^(6 * height) */
};

struct radix_alloc {
	/* Sets *node to size zeroed bytes: 0, or -errno (nothing taken). */
	int (*node_alloc)(void *ctx, size_t size, void **node);
	void (*node_free)(void *ctx, void *node, size_t size);
	void *ctx;
};

/* Bytes one node takes (what node_alloc is asked for). */
size_t radix__node_size(void);

/* The item at idx, or NULL. */
void *radix__lookup(const struct radix_tree *t, uint64_t idx);
/*
 * Puts item (not NULL) at idx: 0, -EEXIST when idx holds one, -EINVAL for
 * a NULL item, or node_alloc's error, after which the tree is as before.
 */
int __must_check radix__insert(struct radix_tree *t, uint64_t idx, void *item,
			       const struct radix_alloc *a);
/* Takes the item at idx out (answers it, or NULL) and frees empty nodes. */
void *radix__delete(struct radix_tree *t, uint64_t idx,
		    const struct radix_alloc *a);
/* The smallest index >= from holding an item, or RADIX_NONE. */
uint64_t radix__next(const struct radix_tree *t, uint64_t from);
/* Frees every node, handing each item to item_free(a->ctx, item) first. */
void radix__destroy(struct radix_tree *t, const struct radix_alloc *a,
		    void (*item_free)(void *ctx, void *item));

#endif
