/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_NOFILE_H
#define KILN_LIB_NOFILE_H

#include <sys/resource.h>

/*
 * Room for more descriptors: the soft RLIMIT_NOFILE raised by more,
 * within the hard limit (past it, socket() and accept4() fail and what
 * needed them is refused, never the process). Best effort: a failure is
 * a debug line.
 */
void nofile__room(rlim_t more);

/*
 * The soft RLIMIT_NOFILE up to the hard one, as systemd and Go's runtime
 * do at start: called before anything is sized from it (a bind mount's
 * descriptor budget is half the soft limit). Nothing here uses select(),
 * so high descriptors are fine. Best effort: said once at debug level,
 * a failure too; the limit stays as it was then.
 */
void nofile__raise(void);

#endif
