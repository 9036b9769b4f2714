// SPDX-License-Identifier: GPL-2.0
/* The descriptor budget: takes within it, refusals past it, from rlimit. */
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>

#include "lib/fdbudget.h"
#include "selftests/kselftest.h"

TEST(unset_counts_but_refuses_nothing)
{
	struct fd_budget b = { 0 };

	ASSERT_EQ(0, fd_budget__take(&b, 100000));
	EXPECT_EQ(100000U, atomic_load(&b.held));
	fd_budget__put(&b, 100000);
	EXPECT_EQ(0U, atomic_load(&b.held));
}

TEST(refuses_past_the_budget_and_gives_back)
{
	struct fd_budget b = { 0 };
	struct rlimit rl;
	size_t max, i;

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	rl.rlim_cur = 200;
	if (rl.rlim_max < rl.rlim_cur)
		SKIP(return, "RLIMIT_NOFILE hard limit below 200");
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	fd_budget__set(&b, 50);
	max = atomic_load(&b.max);
	/* 200, less the open ones, less the 50 reserved. */
	EXPECT_GT(150U, max);
	EXPECT_LT(100U, max);
	for (i = 0; i < max; i++)
		ASSERT_EQ(0, fd_budget__take(&b, 1));
	EXPECT_EQ(-EMFILE, fd_budget__take(&b, 1));
	EXPECT_EQ(max, atomic_load(&b.held));
	fd_budget__put(&b, 2);
	EXPECT_EQ(-EMFILE, fd_budget__take(&b, 3));
	EXPECT_EQ(0, fd_budget__take(&b, 2));
	/* More given back than held: clamped, never wrapped. */
	fd_budget__put(&b, max + 10);
	EXPECT_EQ(0U, atomic_load(&b.held));
}

TEST(taken_before_set_still_counts)
{
	struct fd_budget b = { 0 };
	size_t max;

	ASSERT_EQ(0, fd_budget__take(&b, 10));
	fd_budget__set(&b, 0);
	max = atomic_load(&b.max);
	ASSERT_LE(16U, max);
	EXPECT_EQ(-EMFILE, fd_budget__take(&b, max - 9));
	EXPECT_EQ(0, fd_budget__take(&b, max - 10));
}

static void *taker(void *arg)
{
	struct fd_budget *b = arg;
	int i;

	for (i = 0; i < 100000; i++)
		if (!fd_budget__take(b, 1))
			fd_budget__put(b, 1);
	return NULL;
}

/* Users on four threads: the count ends where it started. */
TEST(threads_share_it)
{
	struct fd_budget b = { 0 };
	pthread_t t[4];
	int i;

	fd_budget__set(&b, 0);
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, pthread_create(&t[i], NULL, taker, &b));
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	EXPECT_EQ(0U, atomic_load(&b.held));
}

TEST_HARNESS_MAIN
