// SPDX-License-Identifier: GPL-2.0
/* The monitor's descriptor budget: see fdbudget.h. */
#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>

#include "lib/fdbudget.h"

#define FD_BUDGET_MIN 16U

/* Descriptors open in this process now (the directory's own included). */
static size_t fds_open(void)
{
	struct dirent *e;
	size_t n = 0;
	DIR *d = opendir("/proc/self/fd");

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

void fd_budget__set(struct fd_budget *b, size_t reserve)
{
	size_t used = fds_open() + reserve, max = FD_BUDGET_MIN;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		rl.rlim_cur = 1U << 20; /* the kernel's nr_open default */
	if (rl.rlim_cur > used + FD_BUDGET_MIN)
		max = rl.rlim_cur - used;
	/* What was taken before counts: held is not reset. */
	atomic_store(&b->max, max);
}

int fd_budget__take(struct fd_budget *b, size_t n)
{
	size_t max = atomic_load(&b->max);
	size_t held = atomic_load(&b->held);

	do {
		if (max && held + n > max)
			return -EMFILE;
	} while (!atomic_compare_exchange_weak(&b->held, &held, held + n));
	return 0;
}

void fd_budget__put(struct fd_budget *b, size_t n)
{
	size_t held = atomic_load(&b->held);

	/* A caller bug must not wrap it into a budget that refuses all. */
	while (!atomic_compare_exchange_weak(&b->held, &held,
					     held > n ? held - n : 0))
		;
}
