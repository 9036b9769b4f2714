/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_AGENT_H
#define KILN_AGENT_AGENT_H

#include <sys/types.h>

/*
 * The guest agent (Documentation/agent-protocol.md): serves the protocol
 * of proto/agent.h on a listening stream socket, vsock in the
 * guest (init), a Unix socket on a host (kiln-agent-host, for the tests).
 * Each connection is served by a child process of its own.
 */

/* What the agent's host, init or kiln-agent-host, tells it. */
struct agent_config {
	/*
	 * Who gets SIGUSR2 for a POWEROFF request (init: 1); 0 refuses
	 * the request (the host build).
	 */
	pid_t poweroff_pid;
	/*
	 * The working directory of a PROC_START without T_CWD (the boot's
	 * --cwd); NULL: the agent's own.
	 */
	const char *default_cwd;
	/*
	 * The mount points init made on a read-only root (NULL-terminated;
	 * NULL: none), reported as facts.
	 */
	const char *const *made_points;
};

/*
 * Accepts connections on @listen_fd (bound and listening) until a fatal
 * error, which it returns as -errno; it never returns otherwise. Takes
 * over SIGCHLD and SIGPIPE of the calling process, which should do
 * nothing else: its children are the connections.
 */
int agent__serve(int listen_fd, const struct agent_config *cfg)
	__attribute__((warn_unused_result));

/*
 * One connection on @fd, as each child of agent__serve() serves it:
 * HELLO, the one request, its exchange. Returns when the connection is
 * over; @fd stays open (its owner closes it). selftests/fuzz/agent_conn.c
 * calls it directly.
 */
void agent__serve_connection(int fd, const struct agent_config *cfg);

#endif
