/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_WORKER_H
#define KILN_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/thread-filter.h"

/*
 * A device's (or service's) own thread, told to stop through an eventfd
 * its loop waits on, never cancelled or signalled. The owner embeds it:
 *
 *	worker__init(&d->worker);           in create, before anything fails
 *	worker__open(&d->worker);           the stop eventfd
 *	worker__start(&d->worker, filter, loop, d); once everything is set up
 *	worker__exit(&d->worker, name);     in destroy: stop, join, close
 *
 * The loop calls worker__block_signals() first, waits for stop_fd to be
 * readable (stop_buf is there for an io_uring read into) and returns.
 */
struct worker {
	pthread_t thread;
	int stop_fd;
	uint64_t stop_buf;
	bool started;
};

void worker__init(struct worker *w);
int worker__open(struct worker *w);
/* loop runs under filter from its first instruction (NULL: none). */
int worker__start(struct worker *w, const struct sock_fprog *filter,
		  void *(*loop)(void *), void *arg);
/* Stops and joins the thread if it was started; closes the eventfd. */
void worker__exit(struct worker *w, const char *name);

/* On the thread: every signal blocked but SIGSYS (the seccomp trap). */
void worker__block_signals(void);

/* Adds one to eventfd @fd; a failure (never expected) is a debug line. */
void worker__wake(int fd, const char *name, const char *what);

#endif
