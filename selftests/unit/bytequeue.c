// SPDX-License-Identifier: GPL-2.0
/* The byte queue: order, contiguity, compaction and giving memory back. */
#include <errno.h>
#include <string.h>

#include "lib/bytequeue.h"
#include "selftests/kselftest.h"

TEST(fifo_order_and_contiguous_peek)
{
	struct bytequeue q = { 0 };

	ASSERT_EQ(0, bytequeue__append(&q, "hello ", 6));
	ASSERT_EQ(0, bytequeue__append(&q, "world", 5));
	ASSERT_EQ(11U, q.len);
	EXPECT_EQ(0, memcmp(bytequeue__peek(&q), "hello world", 11));
	bytequeue__consume(&q, 6);
	EXPECT_EQ(5U, q.len);
	EXPECT_EQ(0, memcmp(bytequeue__peek(&q), "world", 5));
	bytequeue__consume(&q, 5);
	EXPECT_EQ(0U, q.len);
	EXPECT_EQ(0U, q.head);
	bytequeue__free(&q);
	EXPECT_TRUE(!q.data);
	EXPECT_EQ(0U, q.cap);
}

TEST(reserve_space_commit)
{
	struct bytequeue q = { 0 };

	ASSERT_EQ(0, bytequeue__append(&q, "ab", 2));
	ASSERT_EQ(0, bytequeue__reserve(&q, 100));
	ASSERT_GE(q.cap, q.head + q.len + 100);
	memcpy(bytequeue__space(&q), "cd", 2);
	bytequeue__commit(&q, 2);
	EXPECT_EQ(4U, q.len);
	EXPECT_EQ(0, memcmp(bytequeue__peek(&q), "abcd", 4));
	bytequeue__free(&q);
}

/* Consumed bytes at the head are reused before the buffer grows. */
TEST(compacts_before_growing)
{
	struct bytequeue q = { 0 };
	uint8_t buf[4096];
	size_t cap;

	memset(buf, 'x', sizeof(buf));
	ASSERT_EQ(0, bytequeue__append(&q, buf, sizeof(buf)));
	cap = q.cap;
	bytequeue__consume(&q, 4000);
	ASSERT_EQ(96U, q.len);
	ASSERT_EQ(0, bytequeue__append(&q, "tail", 4));
	EXPECT_EQ(cap, q.cap);
	EXPECT_EQ(0U, q.head);
	EXPECT_EQ(100U, q.len);
	EXPECT_EQ(0, memcmp(bytequeue__peek(&q) + 96, "tail", 4));
	bytequeue__free(&q);
}

/* Emptied, a big buffer is freed; a small one is kept for reuse. */
TEST(gives_big_buffers_back)
{
	static uint8_t big[BYTEQUEUE_KEEP_MAX + 1];
	struct bytequeue q = { 0 };

	ASSERT_EQ(0, bytequeue__append(&q, big, 10));
	bytequeue__consume(&q, 10);
	EXPECT_TRUE(q.data);
	EXPECT_EQ(4096U, q.cap);

	ASSERT_EQ(0, bytequeue__append(&q, big, sizeof(big)));
	EXPECT_LT(BYTEQUEUE_KEEP_MAX, q.cap);
	bytequeue__consume(&q, 1);
	EXPECT_TRUE(q.data);
	bytequeue__consume(&q, sizeof(big) - 1);
	EXPECT_TRUE(!q.data);
	EXPECT_EQ(0U, q.cap);
	EXPECT_EQ(0U, q.len);
}

/* A queue's buffer is charged up its budget's chain, all or nothing. */
TEST(budget_charges_the_chain_and_refuses_past_it)
{
	static uint8_t big[3 * 4096];
	struct bytebudget vm = { .limit = 3 * 4096 };
	struct bytebudget conn = { .limit = 2 * 4096, .parent = &vm };
	struct bytebudget other = { .parent = &vm };
	struct bytequeue q = { .budget = &conn }, r = { .budget = &other };

	ASSERT_EQ(0, bytequeue__append(&q, big, 10));
	EXPECT_EQ(4096U, conn.held);
	EXPECT_EQ(4096U, vm.held);
	/* 8192 fits the connection's, then 16384 would not. */
	ASSERT_EQ(0, bytequeue__append(&q, big, 4096));
	EXPECT_EQ(-ENOBUFS, bytequeue__append(&q, big, 2 * 4096));
	EXPECT_EQ(2 * 4096U, conn.held);
	EXPECT_EQ(4096U + 10, q.len); /* nothing taken */
	/* The VM's bound holds whoever else charges it. */
	ASSERT_EQ(0, bytequeue__append(&r, big, 10));
	EXPECT_EQ(-ENOBUFS, bytequeue__append(&r, big, 4096));
	EXPECT_EQ(3 * 4096U, vm.held);
	EXPECT_FALSE(bytebudget__room(&other, 1));
	/* Freed: given back everywhere, the budget kept. */
	bytequeue__free(&q);
	bytequeue__free(&r);
	EXPECT_EQ(0U, conn.held);
	EXPECT_EQ(0U, vm.held);
	EXPECT_EQ(3 * 4096U, vm.peak);
	EXPECT_TRUE(q.budget == &conn);
}

TEST_HARNESS_MAIN
