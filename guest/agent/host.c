// SPDX-License-Identifier: GPL-2.0
/*
 * kiln-agent-host --unix PATH [--die-with-parent] [--cwd DIR]: the guest
 * agent as a host program, serving the same protocol (agent__serve) on a
 * Unix stream socket instead of vsock. This is how selftests/unit/agent.c
 * runs the agent without a VM. --cwd is the boot's default working
 * directory, as init passes it on.
 *
 * It starts a session of its own, so that a test harness killing its
 * process group does not kill the connections in the middle of their
 * clean-up (each kills its command when its host end closes). With
 * --die-with-parent it ends (SIGTERM) when the process that started it
 * ends, so a test that is killed leaves no agent behind.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
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
		"usage: kiln-agent-host --unix PATH [--die-with-parent] "
		"[--cwd DIR]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct agent_config cfg = { .poweroff_pid = 0 };
	bool die_with_parent = false;
	pid_t parent = getppid();
	const char *path = NULL;
	int fd, i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--unix") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "--cwd") && i + 1 < argc)
			cfg.default_cwd = argv[++i];
		else if (!strcmp(argv[i], "--die-with-parent"))
			die_with_parent = true;
		else
			usage();
	}
	if (!path)
		usage();
	if (die_with_parent) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		/* It may have gone before the prctl. */
		if (getppid() != parent)
			return 0;
	}
	setsid();
	fd = listen_unix(path);
	if (fd < 0) {
		fprintf(stderr, "kiln-agent-host: cannot listen on %s: %s\n",
			path, strerror(-fd));
		return 1;
	}
	return agent__serve(fd, &cfg) ? 1 : 0;
}
