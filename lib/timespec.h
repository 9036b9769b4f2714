/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_TIMESPEC_H
#define KILN_LIB_TIMESPEC_H

#include <time.h>

#define NSEC_PER_SEC  1000000000L
#define NSEC_PER_MSEC 1000000L

/* ts = now on clock + ms: a deadline for pthread_cond_timedwait(). */
static inline void timespec__deadline_in(struct timespec *ts, clockid_t clock,
					 unsigned int ms)
{
	clock_gettime(clock, ts);
	ts->tv_nsec += (long)(ms % 1000) * NSEC_PER_MSEC;
	ts->tv_sec += ms / 1000 + ts->tv_nsec / NSEC_PER_SEC;
	ts->tv_nsec %= NSEC_PER_SEC;
}

#endif
