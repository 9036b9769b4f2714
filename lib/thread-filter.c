// SPDX-License-Identifier: GPL-2.0
/* Threads that start under their own seccomp program (thread-filter.h). */
#include <errno.h>
#include <linux/seccomp.h>
#include <semaphore.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/leak-check.h"
#include "lib/resident.h"
#include "lib/thread-filter.h"

int thread_filter__install(const struct sock_fprog *prog)
{
	if (!prog)
		return 0;
	/* Per thread, like the filter: needed to filter without CAP_SYS_ADMIN. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	/* flags 0: this thread only, never TSYNC. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
		return -errno;
	/* The sanitizers' exit check would be killed by it (leak-check.h). */
	leak_check__skip_thread();
	return 0;
}

struct spawn {
	const struct sock_fprog *prog;
	void *(*fn)(void *);
	void *arg;
	sem_t installed;
	int ret;
};

static void *filtered_start(void *arg)
{
	struct spawn *s = arg;
	void *(*fn)(void *) = s->fn;
	void *fn_arg = s->arg;
	int ret;

	resident__trim_tls();
	ret = thread_filter__install(s->prog);

	s->ret = ret;
	/* s lives on the spawner's stack: not touched after the post. */
	sem_post(&s->installed);
	if (ret)
		return NULL;
	return fn(fn_arg);
}

int thread_filter__spawn(pthread_t *thread, const struct sock_fprog *prog,
			 void *(*fn)(void *), void *arg)
{
	struct spawn s = { .prog = prog, .fn = fn, .arg = arg };
	int ret;

	/* Without a program too: the start trims the thread's TLS. */
	if (sem_init(&s.installed, 0, 0))
		return -errno;
	ret = -pthread_create(thread, NULL, filtered_start, &s);
	if (!ret) {
		while (sem_wait(&s.installed) && errno == EINTR)
			;
		ret = s.ret;
		if (ret)
			pthread_join(*thread, NULL);
	}
	sem_destroy(&s.installed);
	return ret;
}
