/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_SPAWN_H
#define KILN_SELFTESTS_SPAWN_H

/*
 * Run a program the way a user would and keep what it printed: stdout and
 * stderr captured separately (bounded), stdin from /dev/null or a file.
 * ARGS() writes an argv in place; spawn__vmm_path() names the vmm under
 * test.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_OUT_MAX (64 * 1024)

/* A NULL-terminated argv: ARGS("vmm", "run", "--kernel", k). */
#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

struct spawn_result {
	int status;		 /* exit status, or 128 + signal */
	char out[SPAWN_OUT_MAX]; /* NUL-terminated, truncated if long */
	char err[SPAWN_OUT_MAX];
	size_t out_len, err_len;
};

static inline void spawn__drain(int fd, char *buf, size_t *len, bool *open)
{
	char tmp[4096];
	ssize_t n = read(fd, tmp, sizeof(tmp));
	size_t room = SPAWN_OUT_MAX - 1 - *len;

	if (n <= 0) {
		if (n == 0 || errno != EINTR)
			*open = false;
		return;
	}
	if ((size_t)n > room)
		n = room;
	memcpy(buf + *len, tmp, n);
	*len += n;
	buf[*len] = 0;
}

/* The vmm binary the tests run: $KILN_VMM, else build/vmm. */
static inline const char *spawn__vmm_path(void)
{
	const char *p = getenv("KILN_VMM");

	return p ? p : "build/vmm";
}

/* argv[0] is the program; stdin_path NULL means /dev/null. */
static inline int spawn__run(const char *const argv[], const char *stdin_path,
			     struct spawn_result *r)
{
	int out[2], err[2], status;
	bool out_open = true, err_open = true;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);

		dup2(in, 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	while (out_open || err_open) {
		struct pollfd p[2] = {
			{ .fd = out_open ? out[0] : -1, .events = POLLIN },
			{ .fd = err_open ? err[0] : -1, .events = POLLIN },
		};

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			spawn__drain(out[0], r->out, &r->out_len, &out_open);
		if (p[1].revents)
			spawn__drain(err[0], r->err, &r->err_len, &err_open);
	}
	close(out[0]);
	close(err[0]);
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) :
					128 + WTERMSIG(status);
	return 0;
}

static inline int spawn__count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

#endif
