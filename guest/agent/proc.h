/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_PROC_H
#define KILN_AGENT_PROC_H

#include <sys/wait.h>

#include "guest/agent/conn.h"

/* Status when init or the agent itself, not the command, failed (env(1)'s). */
#define PROC_STATUS_INIT_FAILED 125

/*
 * The shell's exit code of a child's wait status @st: its exit status, or
 * 128 + the signal that ended it; PROC_STATUS_INIT_FAILED for a status
 * that is neither (a stopped child is never asked for).
 */
static inline int proc__exit_code(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return PROC_STATUS_INIT_FAILED;
}

/*
 * PROC_START: runs the command of @req on @c and serves the rest of the
 * connection (stdin, signals, resizes, output, PROC_EXIT). Returns when
 * the connection is over; the caller then exits. A request without T_CWD
 * runs in @default_cwd (NULL: the agent's own directory).
 */
void proc__start(struct conn *c, const struct frame *req,
		 const char *default_cwd);

#endif
