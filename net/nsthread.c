// SPDX-License-Identifier: GPL-2.0
/*
 * A thread in the VM's network namespace (nsthread.h): the one way the
 * net/ modules leave the vmm's own namespace, a thread at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "lib/errf.h"
#include "lib/resident.h"
#include "net/nsthread.h"

static int enter(struct nsthread *t)
{
	if (t->p.ns_fd == NSTHREAD_NEW) {
		if (unshare(CLONE_NEWNET))
			return errf(t->err, t->errlen, -errno,
				    "%s: a new network namespace: %s",
				    t->p.name, strerror(errno));
		return 0;
	}
	if (setns(t->p.ns_fd, CLONE_NEWNET))
		return errf(t->err, t->errlen, -errno, "%s: setns: %s",
			    t->p.name, strerror(errno));
	return 0;
}

static void *nsthread_main(void *arg)
{
	struct nsthread *t = arg;
	int ret;

	resident__trim_tls();
	ret = enter(t);
	if (!ret)
		ret = t->p.setup(t->p.arg);
	pthread_mutex_lock(&t->lock);
	t->ret = ret;
	t->ready = true;
	t->err = NULL; /* the caller's, no longer written */
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->lock);
	/* t->p is not touched again before the caller's nsthread__join. */
	if (!ret && t->p.serve)
		t->p.serve(t->p.arg);
	return NULL;
}

int nsthread__start(struct nsthread *t, const struct nsthread_params *p,
		    char *err, size_t errlen)
{
	int ret;

	*t = (struct nsthread){ .p = *p, .err = err, .errlen = errlen };
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cv, NULL);
	ret = -pthread_create(&t->thread, NULL, nsthread_main, t);
	if (ret) {
		pthread_cond_destroy(&t->cv);
		pthread_mutex_destroy(&t->lock);
		return errf(err, errlen, ret, "%s: a thread: %s", p->name,
			    strerror(-ret));
	}
	t->started = true;
	pthread_mutex_lock(&t->lock);
	while (!t->ready)
		pthread_cond_wait(&t->cv, &t->lock);
	ret = t->ret;
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void nsthread__join(struct nsthread *t)
{
	if (!t->started)
		return;
	pthread_join(t->thread, NULL);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->lock);
	t->started = false;
}

int nsthread__run(int ns_fd, const char *name, int (*fn)(void *arg), void *arg,
		  char *err, size_t errlen)
{
	struct nsthread t;
	int ret;

	ret = nsthread__start(
		&t,
		&(struct nsthread_params){
			.ns_fd = ns_fd, .name = name, .setup = fn, .arg = arg },
		err, errlen);
	nsthread__join(&t);
	return ret;
}
