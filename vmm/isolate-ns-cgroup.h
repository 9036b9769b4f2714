/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_ISOLATE_NS_CGROUP_H
#define KILN_VMM_ISOLATE_NS_CGROUP_H

/*
 * The namespace sandbox's cgroup v2 (vmm/isolate-ns.h; Documentation/
 * security.md, "Namespace isolation: the weaker boundary"): made under
 * the v2 hierarchy's root, sized from the VM's --memory and --cpus, a
 * task limit of its own, frozen for vm.pause, killed as a whole and
 * removed at the end. Where no v2 hierarchy is writable, or a controller
 * cannot be had, the vmm says so once and the sandbox runs without.
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "vmm/config.h"

/* cpu.max's period: the kernel's default, 100 ms. */
#define NS_CPU_PERIOD_US 100000U
/*
 * pids.max: one task per NS_PIDS_BYTES_PER_TASK of --memory, the limit a
 * VM of that size gets from its own kernel (Linux sets threads-max to
 * RAM / (8 * THREAD_SIZE), THREAD_SIZE 16 KiB on x86-64), and never
 * under the kernel's own floor of NS_PIDS_MIN: 2048 for the default
 * 256 MiB.
 */
#define NS_PIDS_BYTES_PER_TASK (128ULL << 10)
#define NS_PIDS_MIN	       20U
/* vm.pause: how long every task of the sandbox has to stop (as a VM's). */
#define NS_FREEZE_MS	   5000U
#define NS_CGROUP_WARN_LEN 1024 /* the one line when a limit is missing */

/* What the sandbox's cgroup is given, from the VM's sizing. */
struct ns_cgroup_limits {
	uint64_t memory_max;	   /* bytes: --memory; memory.swap.max 0 */
	unsigned int cpu_quota_us; /* --cpus whole CPUs per period */
	unsigned int cpu_period_us;
	uint64_t pids_max; /* tasks */
};

struct ns_cgroup {
	char parent[PATH_MAX - 64]; /* the v2 hierarchy's root */
	char path[PATH_MAX];	    /* parent/kiln-ns-PID-N; "": none */
	int fd;			    /* its directory (CLONE_INTO_CGROUP); -1 */
	bool frozen;		    /* by vm.pause */
};

/* c's sizing as the cgroup's limits. */
void ns_cgroup__limits(const struct vm_config *c, struct ns_cgroup_limits *l);

/*
 * Into the cgroup dir, a child of parent: the memory, cpu and pids
 * controllers enabled in parent's cgroup.subtree_control (those its
 * cgroup.controllers offers), then memory.max (and memory.swap.max 0
 * where swap is accounted), cpu.max and pids.max. 0 when all three were
 * set; else how many were not, and warn holds one line naming each file
 * that failed and why.
 */
int ns_cgroup__apply(const char *parent, const char *dir,
		     const struct ns_cgroup_limits *l, char *warn, size_t len);

/* No cgroup yet (fd -1, path ""). */
void ns_cgroup__init(struct ns_cgroup *cg);
/*
 * A cgroup of its own under the v2 hierarchy's root, with c's limits.
 * None writable: said once, and the sandbox runs without (cg->path "");
 * a limit that cannot be set: said once, and it runs without that one.
 */
void ns_cgroup__make(struct ns_cgroup *cg, const struct vm_config *c);
/*
 * vm.pause (frozen) and vm.resume: cgroup.freeze, then the wait for
 * cgroup.events to say every task stopped (NS_FREEZE_MS; past it the
 * sandbox is thawed and runs on). 0, or -errno with one line in err:
 * -EALREADY paused already / not paused, -EOPNOTSUPP no cgroup or no
 * freezer, -ETIMEDOUT.
 */
int __must_check ns_cgroup__freeze(struct ns_cgroup *cg, bool frozen, char *err,
				   size_t len);
/* Every task in it killed (cgroup.kill), then the directory removed. */
void ns_cgroup__remove(struct ns_cgroup *cg);

#endif
