/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_NSTHREAD_H
#define KILN_NSTHREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/compiler.h"

/*
 * A thread of its own in the VM's network namespace (setns(), or
 * unshare() for a new one), so that the caller never leaves its own: the
 * net/ modules make their sockets, taps and programs there through it.
 *
 *	ret = nsthread__run(ns_fd, "dns", fn, arg, err, sizeof(err));
 *
 * runs fn(arg) there and ends the thread: fn's return. A thread that stays
 * (the proxy's, net/proxy-ns.c) is started with a serve function too:
 *
 *	ret = nsthread__start(&t, &params, err, sizeof(err));
 *	...                          serve(arg) runs on, until told to end
 *	nsthread__join(&t);          after serve was told to return
 *
 * Needs CAP_SYS_ADMIN (setns, unshare).
 */

#define NSTHREAD_NEW (-1) /* ns_fd: a new network namespace (unshare) */

struct nsthread_params {
	int ns_fd; /* the namespace to enter, borrowed; or NSTHREAD_NEW */
	const char *name; /* for the messages: "name: setns: why" */
	/* In the namespace; its return is nsthread__start()'s. */
	int (*setup)(void *arg);
	/* Then, if setup returned 0, until it returns; NULL: none. */
	void (*serve)(void *arg);
	void *arg;
};

/* Embedded by its owner, zeroed (the owner is calloc'd) or started. */
struct nsthread {
	struct nsthread_params p;
	pthread_t thread;
	bool started; /* joined by nsthread__join */
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool ready; /* setup returned (or the namespace was not entered) */
	int ret;
	char *err;
	size_t errlen;
};

/*
 * Starts the thread and waits until setup returned: 0 (serve runs on),
 * or -errno with "what: why" in err (from here, or from setup; the thread
 * is ending then). Either way, t->started says whether to join it.
 */
int __must_check nsthread__start(struct nsthread *t,
				 const struct nsthread_params *p, char *err,
				 size_t errlen);
/* Waits for the thread to end, if it was started; again: nothing. */
void nsthread__join(struct nsthread *t);

/* fn(arg) on a thread in ns_fd's namespace (or a new one), then joined. */
int __must_check nsthread__run(int ns_fd, const char *name,
			       int (*fn)(void *arg), void *arg, char *err,
			       size_t errlen);

#endif
