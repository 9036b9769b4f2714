// SPDX-License-Identifier: GPL-2.0
/*
 * lib/nofile.c: the soft RLIMIT_NOFILE raised to the hard one at start,
 * and raised by a part's room within it. Each case runs in a child of its
 * own (the harness forks), so the limits it sets die with it.
 */
#include <errno.h>
#include <sys/resource.h>

#include "lib/nofile.h"
#include "selftests/kselftest.h"

/* soft under hard, both at most the hard limit the test runs under. */
static int set_limits(rlim_t soft, rlim_t hard)
{
	struct rlimit rl = { .rlim_cur = soft, .rlim_max = hard };

	return setrlimit(RLIMIT_NOFILE, &rl) ? -errno : 0;
}

static rlim_t soft_limit(void)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_NOFILE, &rl) ? 0 : rl.rlim_cur;
}

TEST(raise_lifts_soft_to_hard)
{
	struct rlimit rl;

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max < 512)
		SKIP(return, "RLIMIT_NOFILE hard limit below 512");
	ASSERT_EQ(0, set_limits(64, 512));
	nofile__raise();
	EXPECT_EQ(512U, soft_limit());
	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	EXPECT_EQ(512U, rl.rlim_max); /* the hard limit never moves */
	/* Already there: nothing changes. */
	nofile__raise();
	EXPECT_EQ(512U, soft_limit());
}

TEST(room_stays_within_the_hard_limit)
{
	struct rlimit rl;

	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max < 512)
		SKIP(return, "RLIMIT_NOFILE hard limit below 512");
	ASSERT_EQ(0, set_limits(64, 512));
	nofile__room(100);
	EXPECT_EQ(164U, soft_limit());
	nofile__room(1000);
	EXPECT_EQ(512U, soft_limit());
}

TEST_HARNESS_MAIN
