/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_FDBUDGET_H
#define KILN_LIB_FDBUDGET_H

/*
 * One budget of file descriptors for the whole monitor, shared by what a
 * guest or a client can make it open: the control API's clients and agent
 * connections, the vsock device's host connections and the bind mounts'
 * held files. Each takes before it opens and
 * gives back when it closes; an empty budget is a refusal the guest or
 * client sees (a reset, an error answer, ENFILE), never a monitor that
 * cannot make its next socketpair(). Documentation/design.md, "The
 * descriptor budget". Thread-safe: users run on different threads.
 *
 * A zeroed struct counts but refuses nothing, until fd_budget__set().
 * The budget hangs off struct vm; its users get a pointer (NULL: none).
 */

#include <stdatomic.h>
#include <stddef.h>

#include "lib/compiler.h"

struct fd_budget {
	atomic_size_t held; /* descriptors taken and not given back */
	atomic_size_t max;  /* 0: no limit yet */
};

/*
 * The budget from the soft RLIMIT_NOFILE as it is now: what is left
 * once the descriptors open now and reserve more (what the monitor
 * opens outside the budget: the proxy's and DNS's flows, which have
 * limits of their own) are set aside. At least 16.
 */
void fd_budget__set(struct fd_budget *b, size_t reserve);
/* 0, or -EMFILE when n more would pass the budget (nothing taken). */
int __must_check fd_budget__take(struct fd_budget *b, size_t n);
void fd_budget__put(struct fd_budget *b, size_t n);

#endif
