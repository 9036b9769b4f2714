// SPDX-License-Identifier: GPL-2.0
/* Device and service threads: start, stop through an eventfd, join. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/worker.h"

void worker__init(struct worker *w)
{
	*w = (struct worker){ .stop_fd = -1 };
}

int worker__open(struct worker *w)
{
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return w->stop_fd < 0 ? -errno : 0;
}

int worker__start(struct worker *w, const struct sock_fprog *filter,
		  void *(*loop)(void *), void *arg)
{
	int ret = thread_filter__spawn(&w->thread, filter, loop, arg);

	if (ret)
		return ret;
	w->started = true;
	return 0;
}

void worker__exit(struct worker *w, const char *name)
{
	if (w->started) {
		worker__wake(w->stop_fd, name, "stop");
		pthread_join(w->thread, NULL);
		w->started = false;
	}
	if (w->stop_fd >= 0)
		close(w->stop_fd);
	w->stop_fd = -1;
}

void worker__block_signals(void)
{
	sigset_t all;

	sigfillset(&all);
	/* Not SIGSYS: the seccomp trap must reach its handler and say why. */
	sigdelset(&all, SIGSYS);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
}

void worker__wake(int fd, const char *name, const char *what)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0)
		pr_debug("%s: %s: %s", name, what, strerror(errno));
}
