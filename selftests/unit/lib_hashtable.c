// SPDX-License-Identifier: GPL-2.0
/*
 * lib/hashtable: add, find, delete and walk; duplicate keys; keys that
 * share a bucket; resizing up and down with everything still found.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib/hashtable.h"
#include "selftests/kselftest.h"

struct item {
	struct hlink link;
	unsigned int seen;
};

static struct item *find(const struct hashtable *t, uint64_t key)
{
	struct hlink *l = hashtable__first(t, key);

	return l ? hashtable__entry(l, struct item, link) : NULL;
}

TEST(add_find_delete)
{
	struct item a = { 0 }, b = { 0 };
	struct hashtable t;

	ASSERT_EQ(0, hashtable__init(&t, 4));
	EXPECT_EQ(16U, hashtable__buckets(&t));
	EXPECT_TRUE(find(&t, 1) == NULL);
	hashtable__add(&t, &a.link, 1);
	hashtable__add(&t, &b.link, UINT64_MAX);
	EXPECT_EQ(2U, t.count);
	EXPECT_TRUE(find(&t, 1) == &a);
	EXPECT_TRUE(find(&t, UINT64_MAX) == &b);
	EXPECT_TRUE(find(&t, 2) == NULL);
	hashtable__del(&t, &a.link);
	EXPECT_EQ(1U, t.count);
	EXPECT_TRUE(find(&t, 1) == NULL);
	EXPECT_TRUE(find(&t, UINT64_MAX) == &b);
	/* Deleting what the table does not hold changes nothing. */
	hashtable__del(&t, &a.link);
	EXPECT_EQ(1U, t.count);
	hashtable__exit(&t);
	EXPECT_TRUE(t.bucket == NULL);
	hashtable__exit(&t);
}

TEST(bad_sizes)
{
	struct hashtable t;

	EXPECT_EQ(-EINVAL, hashtable__init(&t, 0));
	EXPECT_EQ(-EINVAL, hashtable__init(&t, HASHTABLE_MAX_BITS + 1));
	EXPECT_TRUE(t.bucket == NULL);
	ASSERT_EQ(0, hashtable__init(&t, 1));
	EXPECT_EQ(-EINVAL, hashtable__resize(&t, 0));
	EXPECT_EQ(1U, t.bits);
	hashtable__exit(&t);
}

TEST(duplicate_keys_newest_first)
{
	struct item it[3] = { 0 }, other = { 0 };
	struct hashtable t;
	struct hlink *l;
	unsigned int i, n = 0;

	ASSERT_EQ(0, hashtable__init(&t, 1));
	hashtable__add(&t, &other.link, 8);
	for (i = 0; i < 3; i++)
		hashtable__add(&t, &it[i].link, 7);
	for (l = hashtable__first(&t, 7); l; l = hashtable__next(l)) {
		EXPECT_TRUE(l == &it[2 - n].link);
		n++;
	}
	EXPECT_EQ(3U, n);
	hashtable__del(&t, &it[1].link);
	n = 0;
	for (l = hashtable__first(&t, 7); l; l = hashtable__next(l))
		n++;
	EXPECT_EQ(2U, n);
	EXPECT_TRUE(find(&t, 8) == &other);
	hashtable__exit(&t);
}

/* Two buckets and many keys: every chain is shared by distinct keys. */
TEST(collisions)
{
	struct item it[64] = { 0 };
	struct hashtable t;
	unsigned int i;

	ASSERT_EQ(0, hashtable__init(&t, 1));
	for (i = 0; i < 64; i++)
		hashtable__add(&t, &it[i].link, (uint64_t)i << 40);
	for (i = 0; i < 64; i++)
		EXPECT_TRUE(find(&t, (uint64_t)i << 40) == &it[i]);
	for (i = 0; i < 64; i += 2)
		hashtable__del(&t, &it[i].link);
	for (i = 0; i < 64; i++)
		EXPECT_TRUE(find(&t, (uint64_t)i << 40) ==
			    (i % 2 ? &it[i] : NULL));
	EXPECT_EQ(32U, t.count);
	hashtable__exit(&t);
}

static unsigned int visit_and_delete(struct hashtable *t, struct hlink *l)
{
	hashtable__entry(l, struct item, link)->seen++;
	hashtable__del(t, l);
	return 1;
}

TEST(growth_and_walk)
{
	const unsigned int nr = 5000;
	struct item *it = calloc(nr, sizeof(*it));
	struct hashtable t;
	struct hlink *l, *n;
	unsigned int i, walked = 0;
	size_t b;

	ASSERT_TRUE(it != NULL);
	ASSERT_EQ(0, hashtable__init(&t, 2));
	for (i = 0; i < nr; i++) {
		hashtable__add(&t, &it[i].link, i);
		if (t.count >= 2 * hashtable__buckets(&t))
			ASSERT_EQ(0, hashtable__resize(&t, t.bits + 1));
	}
	EXPECT_EQ(12U, t.bits);
	for (i = 0; i < nr; i++)
		ASSERT_TRUE(find(&t, i) == &it[i]);
	/* Shrinking keeps every entry too. */
	ASSERT_EQ(0, hashtable__resize(&t, 3));
	for (i = 0; i < nr; i++)
		ASSERT_TRUE(find(&t, i) == &it[i]);
	/* A walk sees each entry once, and may delete as it goes. */
	hashtable__for_each_safe(&t, b, l, n) walked += visit_and_delete(&t, l);
	EXPECT_EQ(nr, walked);
	EXPECT_EQ(0U, t.count);
	for (i = 0; i < nr; i++)
		EXPECT_EQ(1U, it[i].seen);
	hashtable__exit(&t);
	free(it);
}

TEST_HARNESS_MAIN
