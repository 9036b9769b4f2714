/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_PROC_H
#define KILN_AGENT_PROC_H

#include "guest/agent/conn.h"

/*
 * PROC_START: runs the command of @req on @c and serves the rest of the
 * connection (stdin, signals, resizes, output, PROC_EXIT). Returns when
 * the connection is over; the caller then exits. A request without T_CWD
 * runs in @default_cwd (NULL: the agent's own directory).
 */
void proc__start(struct conn *c, const struct frame *req,
		 const char *default_cwd);

#endif
