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

/*
 * Accepts connections on @listen_fd (bound and listening) until a fatal
 * error, which it returns as -errno; it never returns otherwise. Takes
 * over SIGCHLD and SIGPIPE of the calling process, which should do
 * nothing else: its children are the connections.
 */
/*
 * poweroff_pid: who gets SIGUSR2 for a POWEROFF request (init: 1); 0
 * refuses the request (the host build).
 */
int agent__serve(int listen_fd, pid_t poweroff_pid)
	__attribute__((warn_unused_result));

#endif
