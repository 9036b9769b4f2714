// SPDX-License-Identifier: GPL-2.0
/*
 * The radix tree of lib/radix.h. A tree of height h has h levels of nodes;
 * level 0 holds the items, level l > 0 the nodes below, and the slot at
 * level l is bits [6l, 6l + 6) of the index. Eleven levels cover all 64
 * bits; the tree grows a level on top when an index needs it and never
 * shrinks but to empty.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "lib/radix.h"

#define RADIX_BITS	 6U
#define RADIX_FANOUT	 (1U << RADIX_BITS)
#define RADIX_MASK	 (RADIX_FANOUT - 1)
#define RADIX_MAX_HEIGHT 11U /* 11 * 6 >= 64 */

struct radix_node {
	void *slot[RADIX_FANOUT]; /* child nodes, or items at level 0 */
	unsigned int count;	  /* slots in use */
};

size_t radix__node_size(void)
{
	return sizeof(struct radix_node);
}

static int node_new(const struct radix_alloc *a, struct radix_node **out)
{
	void *n;
	int err;

	if (!a) {
		*out = calloc(1, sizeof(**out));
		return *out ? 0 : -ENOMEM;
	}
	err = a->node_alloc(a->ctx, sizeof(**out), &n);
	if (err)
		return err;
	*out = n;
	return 0;
}

static void node_free(const struct radix_alloc *a, struct radix_node *n)
{
	if (a)
		a->node_free(a->ctx, n, sizeof(*n));
	else
		free(n);
}

static unsigned int height_for(uint64_t idx)
{
	unsigned int h = 1;

	while (h < RADIX_MAX_HEIGHT && (idx >> (RADIX_BITS * h)))
		h++;
	return h;
}

static bool covers(const struct radix_tree *t, uint64_t idx)
{
	return t->height && (t->height >= RADIX_MAX_HEIGHT ||
			     !(idx >> (RADIX_BITS * t->height)));
}

static unsigned int slot_of(uint64_t idx, unsigned int level)
{
	return (idx >> (RADIX_BITS * level)) & RADIX_MASK;
}

void *radix__lookup(const struct radix_tree *t, uint64_t idx)
{
	struct radix_node *n = t->root;
	unsigned int level;

	if (!covers(t, idx))
		return NULL;
	for (level = t->height - 1; n; level--) {
		if (!level)
			return n->slot[slot_of(idx, 0)];
		n = n->slot[slot_of(idx, level)];
	}
	return NULL;
}

/*
 * Walks down as far as idx's path exists, takes the item out if there is
 * one, then frees the nodes the path leaves empty from the bottom up: so
 * the same walk undoes an insert that failed half-way.
 */
void *radix__delete(struct radix_tree *t, uint64_t idx,
		    const struct radix_alloc *a)
{
	struct radix_node *path[RADIX_MAX_HEIGHT], *n = t->root;
	unsigned int level, low;
	void *item = NULL;

	if (!covers(t, idx))
		return NULL;
	low = t->height - 1;
	for (level = t->height - 1;; level--) {
		path[level] = n;
		low = level;
		if (!level)
			break;
		n = n->slot[slot_of(idx, level)];
		if (!n)
			break;
	}
	if (!low && path[0]->slot[slot_of(idx, 0)]) {
		item = path[0]->slot[slot_of(idx, 0)];
		path[0]->slot[slot_of(idx, 0)] = NULL;
		path[0]->count--;
	}
	for (level = low; level < t->height && !path[level]->count; level++) {
		node_free(a, path[level]);
		if (level == t->height - 1) {
			t->root = NULL;
			t->height = 0;
			break;
		}
		path[level + 1]->slot[slot_of(idx, level + 1)] = NULL;
		path[level + 1]->count--;
	}
	return item;
}

int radix__insert(struct radix_tree *t, uint64_t idx, void *item,
		  const struct radix_alloc *a)
{
	unsigned int need = height_for(idx), level;
	struct radix_node *n, *child;
	int err;

	if (!item)
		return -EINVAL;
	if (radix__lookup(t, idx))
		return -EEXIST;
	if (!t->root) {
		err = node_new(a, &n);
		if (err)
			return err;
		t->root = n;
		t->height = need;
	}
	/* A taller tree: the old root becomes slot 0 of a new one. */
	while (t->height < need) {
		err = node_new(a, &n);
		if (err)
			return err;
		n->slot[0] = t->root;
		n->count = 1;
		t->root = n;
		t->height++;
	}
	n = t->root;
	for (level = t->height - 1; level; level--) {
		child = n->slot[slot_of(idx, level)];
		if (!child) {
			err = node_new(a, &child);
			if (err) {
				radix__delete(t, idx, a);
				return err;
			}
			n->slot[slot_of(idx, level)] = child;
			n->count++;
		}
		n = child;
	}
	n->slot[slot_of(idx, 0)] = item;
	n->count++;
	return 0;
}

/* Below n (at level, covering from base), the first index >= from. */
static bool next_in(const struct radix_node *n, unsigned int level,
		    uint64_t base, uint64_t from, uint64_t *found)
{
	unsigned int shift = RADIX_BITS * level, i;
	uint64_t child_base;

	i = from > base ? (unsigned int)((from - base) >> shift) : 0;
	for (; i < RADIX_FANOUT; i++) {
		if (!n->slot[i])
			continue;
		child_base = base + ((uint64_t)i << shift);
		if (!level) {
			*found = child_base;
			return true;
		}
		if (next_in(n->slot[i], level - 1, child_base,
			    from > child_base ? from : child_base, found))
			return true;
	}
	return false;
}

uint64_t radix__next(const struct radix_tree *t, uint64_t from)
{
	uint64_t found;

	if (!covers(t, from))
		return RADIX_NONE;
	if (next_in(t->root, t->height - 1, 0, from, &found))
		return found;
	return RADIX_NONE;
}

static void free_in(struct radix_node *n, unsigned int level,
		    const struct radix_alloc *a,
		    void (*item_free)(void *ctx, void *item))
{
	unsigned int i;

	for (i = 0; i < RADIX_FANOUT; i++) {
		if (!n->slot[i])
			continue;
		if (level)
			free_in(n->slot[i], level - 1, a, item_free);
		else if (item_free)
			item_free(a ? a->ctx : NULL, n->slot[i]);
	}
	node_free(a, n);
}

void radix__destroy(struct radix_tree *t, const struct radix_alloc *a,
		    void (*item_free)(void *ctx, void *item))
{
	if (t->root)
		free_in(t->root, t->height - 1, a, item_free);
	t->root = NULL;
	t->height = 0;
}
