// SPDX-License-Identifier: GPL-2.0
/*
 * kiln-agent-host --unix PATH [--die-with-parent]: the guest agent as a
 * host program, serving the same protocol (agent__serve) on a Unix stream
 * socket instead of vsock. This is how selftests/unit/agent.c runs the
 * agent without a VM.
 *
 * It starts a session of its own, so that a test harness killing its
 * process group does not kill the connections in the middle of their
 * clean-up (each kills its command when its host end closes). With
 * --die-with-parent it ends (SIGTERM) when the process that started it
 * ends, so a test that is killed leaves no agent behind.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static int listen_unix(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, err;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	/* A stale socket from an earlier run; never anything else. */
	if (!lstat(path, &st) && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    listen(fd, 128)) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

static void __attribute__((noreturn)) usage(void)
{
	fprintf(stderr,
		"usage: kiln-agent-host --unix PATH [--die-with-parent]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	pid_t parent = getppid();
	int fd;

	if (argc < 3 || argc > 4 || strcmp(argv[1], "--unix"))
		usage();
	if (argc == 4) {
		if (strcmp(argv[3], "--die-with-parent"))
			usage();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		/* It may have gone before the prctl. */
		if (getppid() != parent)
			return 0;
	}
	setsid();
	fd = listen_unix(argv[2]);
	if (fd < 0) {
		fprintf(stderr, "kiln-agent-host: cannot listen on %s: %s\n",
			argv[2], strerror(-fd));
		return 1;
	}
	return agent__serve(fd, 0) ? 1 : 0;
}
