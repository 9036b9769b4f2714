// SPDX-License-Identifier: GPL-2.0
/*
 * hostile-agent - a guest agent that answers as issue 15's item 1 found a
 * hostile one could, for selftests/kvm/control.c
 * (hostile_agent_is_bounded). Run as the guest's command with the real
 * agent off (kiln.agent=off), it listens where the agent does
 * (KILN_AGENT_PORT) and serves each connection in a child:
 *
 *   HELLO, as the protocol wants, then by request:
 *   FS_READDIR, FACTS  HOSTILE_FRAMES RESULT frames, each "more follows"
 *                      (T_MORE) with one entry (or fact) whose name (or
 *                      value) is HOSTILE_NAME bytes of 0xff, not UTF-8:
 *                      100 MB from the guest; then a last RESULT;
 *   POWEROFF           RESULT, then the command exits 0 (the VM ends);
 *   anything else      ERROR EPROTO.
 *
 * A host that hangs up ends the child. The protocol side is
 * selftests/hostile_agent.h's, shared with the API's unit test.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "proto/agent.h"
#include "proto/tlv.h"
#include "selftests/hostile_agent.h"

static void send_eproto(int fd)
{
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (kiln_tlv__put_u64(&b, KILN_T_ERRNO, EPROTO) ||
	    kiln_tlv__put_str(&b, KILN_T_ERRNAME, "EPROTO"))
		_exit(1);
	hostile_agent__send_frame(fd, KILN_MSG_ERROR, &b);
	kiln_buf__free(&b);
}

/* One connection; returns whether the command should end (POWEROFF). */
static bool serve(int fd)
{
	uint16_t type;
	int i;

	hostile_agent__send_hello(fd);
	type = hostile_agent__recv_request(fd);
	switch (type) {
	case KILN_MSG_FS_READDIR:
	case KILN_MSG_FACTS:
		for (i = 0; i < HOSTILE_FRAMES; i++)
			hostile_agent__send_huge(fd, type, true);
		hostile_agent__send_frame(fd, KILN_MSG_RESULT, NULL);
		return false;
	case KILN_MSG_POWEROFF:
		hostile_agent__send_frame(fd, KILN_MSG_RESULT, NULL);
		return true;
	default:
		send_eproto(fd);
		return false;
	}
}

/* Interrupts accept4 (no SA_RESTART), so a POWEROFF child is reaped. */
static void on_child(int sig)
{
	(void)sig;
}

int main(void)
{
	struct sigaction act = { .sa_handler = on_child };
	struct sockaddr_vm sa = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_ANY,
		.svm_port = KILN_AGENT_PORT,
	};
	int lfd, fd, status;
	pid_t pid;

	sigemptyset(&act.sa_mask);
	sigaction(SIGCHLD, &act, NULL);
	lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(lfd, 16)) {
		fprintf(stderr, "hostile-agent: vsock port %u: %s\n",
			KILN_AGENT_PORT, strerror(errno));
		return 1;
	}
	printf("hostile-agent: listening on vsock port %u\n", KILN_AGENT_PORT);
	fflush(stdout);
	for (;;) {
		while (waitpid(-1, &status, WNOHANG) > 0)
			if (WIFEXITED(status) && WEXITSTATUS(status) == 42)
				return 0;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pid = fork();
		if (pid == 0) {
			close(lfd);
			_exit(serve(fd) ? 42 : 0);
		}
		close(fd);
		if (pid < 0)
			return 1;
	}
}
