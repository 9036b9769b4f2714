// SPDX-License-Identifier: GPL-2.0
/*
 * lib/radix: insert, lookup, delete and the next-index walk; the tree
 * growing taller for large indices and giving its nodes back; a node
 * allocation that fails half-way leaving the tree as it was.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib/radix.h"
#include "selftests/kselftest.h"

/* Counts nodes, and fails once `fail_after` more have been handed out. */
struct budget {
	long nodes;
	long fail_after; /* < 0: never */
	unsigned int items_freed;
};

static int budget_alloc(void *ctx, size_t size, void **node)
{
	struct budget *b = ctx;

	if (!b->fail_after)
		return -ENOSPC;
	if (b->fail_after > 0)
		b->fail_after--;
	*node = calloc(1, size);
	if (!*node)
		return -ENOMEM;
	b->nodes++;
	return 0;
}

static void budget_free(void *ctx, void *node, size_t size)
{
	struct budget *b = ctx;

	free(node);
	b->nodes--;
}

static void item_free(void *ctx, void *item)
{
	struct budget *b = ctx;

	b->items_freed++;
}

/* A made-up, non-NULL item for index i. */
static void *item(uint64_t i)
{
	return (void *)(uintptr_t)(i * 16 + 8);
}

TEST(insert_lookup_delete)
{
	struct budget b = { .fail_after = -1 };
	const struct radix_alloc a = { budget_alloc, budget_free, &b };
	struct radix_tree t = { 0 };

	EXPECT_TRUE(radix__lookup(&t, 0) == NULL);
	EXPECT_EQ(RADIX_NONE, radix__next(&t, 0));
	ASSERT_EQ(0, radix__insert(&t, 5, item(5), &a));
	EXPECT_EQ(1L, b.nodes);
	EXPECT_TRUE(radix__lookup(&t, 5) == item(5));
	EXPECT_TRUE(radix__lookup(&t, 4) == NULL);
	EXPECT_TRUE(radix__lookup(&t, 5 + 64) == NULL);
	EXPECT_EQ(-EEXIST, radix__insert(&t, 5, item(6), &a));
	EXPECT_EQ(-EINVAL, radix__insert(&t, 6, NULL, &a));
	EXPECT_TRUE(radix__lookup(&t, 5) == item(5));
	EXPECT_TRUE(radix__delete(&t, 4, &a) == NULL);
	EXPECT_TRUE(radix__delete(&t, 5, &a) == item(5));
	EXPECT_TRUE(radix__lookup(&t, 5) == NULL);
	EXPECT_EQ(0L, b.nodes);
	EXPECT_TRUE(t.root == NULL);
}

TEST(growth_to_full_width)
{
	static const uint64_t idx[] = { 0,
					63,
					64,
					4095,
					4096,
					1ULL << 30,
					(1ULL << 51) + 7,
					1ULL << 60,
					UINT64_MAX - 1 };
	struct budget b = { .fail_after = -1 };
	const struct radix_alloc a = { budget_alloc, budget_free, &b };
	struct radix_tree t = { 0 };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(idx); i++) {
		ASSERT_EQ(0, radix__insert(&t, idx[i], item(i + 1), &a));
		ASSERT_TRUE(radix__lookup(&t, idx[i]) == item(i + 1));
	}
	EXPECT_EQ(11U, t.height);
	for (i = 0; i < ARRAY_SIZE(idx); i++)
		EXPECT_TRUE(radix__lookup(&t, idx[i]) == item(i + 1));
	EXPECT_TRUE(radix__lookup(&t, UINT64_MAX) == NULL);
	EXPECT_TRUE(radix__lookup(&t, 1ULL << 51) == NULL);
	/* The walk finds them in order. */
	EXPECT_EQ(0U, radix__next(&t, 0));
	EXPECT_EQ(63U, radix__next(&t, 1));
	EXPECT_EQ(4095U, radix__next(&t, 65));
	EXPECT_EQ((1ULL << 51) + 7, radix__next(&t, (1ULL << 30) + 1));
	EXPECT_EQ(UINT64_MAX - 1, radix__next(&t, (1ULL << 60) + 1));
	EXPECT_EQ(RADIX_NONE, radix__next(&t, UINT64_MAX));
	for (i = 0; i < ARRAY_SIZE(idx); i++)
		EXPECT_TRUE(radix__delete(&t, idx[i], &a) == item(i + 1));
	EXPECT_EQ(0L, b.nodes);
	EXPECT_EQ(0U, t.height);
}

TEST(dense_walk_and_delete)
{
	struct budget b = { .fail_after = -1 };
	const struct radix_alloc a = { budget_alloc, budget_free, &b };
	struct radix_tree t = { 0 };
	uint64_t i, n = 0;

	for (i = 0; i < 10000; i += 3)
		ASSERT_EQ(0, radix__insert(&t, i, item(i + 1), &a));
	for (i = radix__next(&t, 0); i != RADIX_NONE;
	     i = radix__next(&t, i + 1)) {
		EXPECT_EQ(0U, i % 3);
		EXPECT_TRUE(radix__lookup(&t, i) == item(i + 1));
		n++;
	}
	EXPECT_EQ(3334U, n);
	for (i = 0; i < 10000; i += 6)
		EXPECT_TRUE(radix__delete(&t, i, &a) == item(i + 1));
	EXPECT_EQ(3U, radix__next(&t, 0));
	EXPECT_EQ(9U, radix__next(&t, 4));
	radix__destroy(&t, &a, item_free);
	EXPECT_EQ(1667U, b.items_freed);
	EXPECT_EQ(0L, b.nodes);
	EXPECT_TRUE(t.root == NULL);
}

TEST(failed_insert_leaves_tree)
{
	struct budget b = { .fail_after = -1 };
	const struct radix_alloc a = { budget_alloc, budget_free, &b };
	struct radix_tree t = { 0 };
	long before;

	ASSERT_EQ(0, radix__insert(&t, 1ULL << 20, item(1), &a));
	before = b.nodes;
	/* The first new node below the root is given, the second is not. */
	b.fail_after = 1;
	EXPECT_EQ(-ENOSPC, radix__insert(&t, 7, item(2), &a));
	EXPECT_EQ(before, b.nodes);
	EXPECT_TRUE(radix__lookup(&t, 7) == NULL);
	EXPECT_TRUE(radix__lookup(&t, 1ULL << 20) == item(1));
	b.fail_after = -1;
	ASSERT_EQ(0, radix__insert(&t, 7, item(2), &a));
	radix__destroy(&t, &a, NULL);
	EXPECT_EQ(0L, b.nodes);
}

TEST(default_allocator)
{
	struct radix_tree t = { 0 };

	ASSERT_EQ(0, radix__insert(&t, 1000, item(1), NULL));
	EXPECT_TRUE(radix__lookup(&t, 1000) == item(1));
	EXPECT_TRUE(radix__delete(&t, 1000, NULL) == item(1));
	ASSERT_EQ(0, radix__insert(&t, 99, item(2), NULL));
	radix__destroy(&t, NULL, NULL);
	EXPECT_TRUE(t.root == NULL);
}

TEST_HARNESS_MAIN
