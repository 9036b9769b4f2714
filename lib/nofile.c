// SPDX-License-Identifier: GPL-2.0
/*
 * The soft descriptor limit raised: to the hard one at start, and for
 * what a part will open (nofile.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "lib/log.h"
#include "lib/nofile.h"

void nofile__room(rlim_t more)
{
	struct rlimit rl;
	rlim_t want;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	want = rl.rlim_cur + more;
	if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max)
		want = rl.rlim_max;
	if (want > rl.rlim_cur) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			pr_debug("RLIMIT_NOFILE: %s", strerror(errno));
	}
}

void nofile__raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	if (setrlimit(RLIMIT_NOFILE,
		      &(struct rlimit){ rl.rlim_max, rl.rlim_max })) {
		pr_debug("RLIMIT_NOFILE: soft limit stays %llu: %s",
			 (unsigned long long)rl.rlim_cur, strerror(errno));
		return;
	}
	pr_debug("RLIMIT_NOFILE: soft limit %llu raised to the hard limit %llu",
		 (unsigned long long)rl.rlim_cur,
		 (unsigned long long)rl.rlim_max);
}
