/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_AGENT_CONTAINER_H
#define KILN_AGENT_CONTAINER_H

/*
 * Containers in the guest (proto/agent.h, CONTAINER_*): a process tree
 * with its own root and namespaces. Each container is a cgroup v2
 * directory, CONTAINER_CGROUP/<id>, with two leaves: "holder" (the
 * holder process, which made the namespaces and the root, and the
 * container's init, pid 1 of its PID namespace, which the holder forked
 * and then only waits for) and "procs" (every process run in the
 * container). The directories are the registry the agent's connections
 * share; the holder's /proc/<pid>/ns/ and root are what a process joins.
 */
#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "guest/agent/conn.h"

/* CONTAINER_CREATE, _DELETE, _LIST; @in_vm false refuses (ENOTSUP)
 * once the request is checked: a host's cgroups are not the agent's. */
void container__handle(struct conn *c, const struct frame *req, bool in_vm);

/* What PROC_START asks of the process beyond the command itself. */
struct container_exec {
	char *id; /* T_CONTAINER; NULL: the guest's own namespaces */
	bool has_ids;
	uid_t uid;
	gid_t gid;
	gid_t *groups;
	size_t ngroups;
	struct container_rlimit {
		int resource;
		struct rlimit lim;
	} * rlimits;
	size_t nrlimits;
	bool no_new_privs;
	/* container__exec_prepare(): what the child joins; -1: nothing */
	int mnt_fd, uts_fd, ipc_fd, root_fd, procs_fd;
};

void container__exec_init(struct container_exec *x);
void container__exec_free(struct container_exec *x);
/*
 * One PROC_START field: 1 when it was one of these (taken), 0 when not,
 * -EINVAL or -EPROTO (*why set) when it is malformed.
 */
int container__exec_field(struct container_exec *x, uint16_t tag,
			  const uint8_t *val, uint32_t len, const char **why);
/*
 * Before the fork, in the connection's process: opens what the child
 * joins and enters the container's pid namespace for the children to
 * come. Sends the ERROR itself (ENOENT with T_CONTAINER: no such
 * container); 0 or a negative errno.
 */
int container__exec_prepare(struct conn *c, struct container_exec *x);
/*
 * A pty master from the devpts of the process's world: the container's
 * own instance (its /dev/ptmx) after container__exec_prepare(), else the
 * guest's. The fd (O_CLOEXEC) or a negative errno.
 */
int container__open_ptmx(const struct container_exec *x);
/*
 * In the child after the fork: the container (cgroup, namespaces, its
 * root as / and cwd), then the rlimits. -1 with errno set.
 */
int container__exec_enter(const struct container_exec *x);
/* In the child, last before exec: uid, gid, groups, no_new_privs. */
int container__exec_identity(const struct container_exec *x);

#endif
