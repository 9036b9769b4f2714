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

#endif
