/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_THREAD_FILTER_H
#define KILN_LIB_THREAD_FILTER_H

#include <linux/filter.h>
#include <pthread.h>

#include "lib/compiler.h"

/*
 * A thread under a seccomp program of its own. The program is a compiled
 * classic BPF filter (vmm/seccomp.c makes one per thread type); it is
 * installed on the calling thread only (no SECCOMP_FILTER_FLAG_TSYNC),
 * after PR_SET_NO_NEW_PRIVS, and stays for the thread's life and every
 * thread it creates. NULL: no filter (--no-seccomp, unit tests).
 */
int __must_check thread_filter__install(const struct sock_fprog *prog);

/*
 * pthread_create() for a thread that runs fn(arg) under prog: returns
 * once the new thread has installed prog, so fn never runs unfiltered.
 * If installing fails, the thread ends without calling fn, is joined, and
 * the error is returned.
 */
int __must_check thread_filter__spawn(pthread_t *thread,
				      const struct sock_fprog *prog,
				      void *(*fn)(void *), void *arg);

#endif
