// SPDX-License-Identifier: GPL-2.0
/*
 * The soft descriptor limit raised for what a part will open (nofile.h).
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
