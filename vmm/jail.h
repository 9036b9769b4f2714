/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_JAIL_H
#define KILN_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/*
 * The jail (`vmm start --jail DIR --uid U --gid G`, Documentation/
 * security.md, "The jail"): the vmm in new mount, PID, IPC and UTS
 * namespaces, its root a tmpfs on DIR holding only what the VM needs
 * (bound in at fixed paths below JAIL_KILN_DIR, the configuration's paths
 * rewritten to them), /dev with kvm, net/tun, urandom and null, resource
 * limits and an optional cgroup v2; once the VM is built, uid U, gid G,
 * no capabilities and no_new_privs, before any seccomp filter and before
 * the guest's first instruction. Needs root.
 */

/* Where the VM's files are inside the jail. */
#define JAIL_KILN_DIR "/kiln"

struct jail_config {
	char *dir;    /* --jail: absolute, a directory; NULL: no jail */
	uint64_t uid; /* with uid_set: 1..JAIL_MAX_ID */
	uint64_t gid; /* with gid_set: 1..JAIL_MAX_ID */
	bool uid_set, gid_set;
	char *cgroup;	     /* cgroup v2 directory (made); NULL: none */
	char *cpu_max;	     /* its cpu.max: "max" or "QUOTA" [PERIOD] (us) */
	uint64_t memory_max; /* bytes, its memory.max; 0: not set */
	uint64_t rlimit_as;  /* bytes, RLIMIT_AS; 0: unchanged */
	uint64_t rlimit_nofile; /* RLIMIT_NOFILE; 0: unchanged */
	uint64_t rlimit_nproc;	/* RLIMIT_NPROC of uid; 0: unchanged */
};

/* (uid_t)-1 means "unchanged" to setresuid: one less. */
#define JAIL_MAX_ID 0xfffffffeULL

struct vm_config;
struct jail;

void jail__config_free(struct jail_config *j);
/*
 * The jail's settings against each other and the rest of the config
 * (config__validate calls it): no host access needed. err: "what: why".
 */
int __must_check jail__validate(const struct vm_config *c, char *err,
				size_t len);

/*
 * What goes into the jail, from c (validated): each host path resolved
 * (realpath) and given its place below JAIL_KILN_DIR, and c's paths
 * rewritten to those places. Reads the root image's descriptor (its
 * copy in the jail names the image at its new place). No mounts yet.
 */
int __must_check jail__plan(struct jail **out, struct vm_config *c, char *err,
			    size_t len);
void jail__destroy(struct jail *j);
/* How many host paths are bound in, for tests; the nth one's places. */
unsigned int jail__nr_binds(const struct jail *j);
const char *jail__bind_host(const struct jail *j, unsigned int n);
const char *jail__bind_inside(const struct jail *j, unsigned int n);

/* -EPERM, with err saying why, unless this process is root. */
int __must_check jail__check_root(const struct jail_config *c, char *err,
				  size_t len);
/*
 * A new PID namespace for the
 * children: the next fork (start --detach's, or jail__fork's) makes the
 * jail's PID 1, which runs the VM.
 */
int __must_check jail__unshare_pid(struct jail *j);
/*
 * Without --detach: forks; returns 0 in the child; the parent stays
 * outside, passes the host's signals on (SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT, SIGUSR2) and exits as the child does.
 */
int __must_check jail__fork(struct jail *j);

/*
 * For the one thread that keeps capabilities through jail__drop (the
 * egress proxy's netns thread: CAP_NET_RAW for its transparent
 * sockets, CAP_BPF for its maps; Documentation/security.md, "The
 * jail"). jail__keep_caps runs on that thread before the drop: its
 * bounding set loses every other capability, its permitted and
 * effective sets hold just caps and, for the drop's setresgid and
 * setresuid (which glibc runs on every thread), CAP_SETGID and
 * CAP_SETUID; PR_SET_KEEPCAPS keeps them when the drop reaches the
 * thread, and no_new_privs is set. jail__raise_kept_caps then leaves
 * exactly caps.
 * jail__raise_kept_caps runs on it after the drop, which cleared its
 * effective set: caps effective again, and checked.
 */
int __must_check jail__keep_caps(const int *caps, unsigned int n);
int __must_check jail__raise_kept_caps(const int *caps, unsigned int n);
/*
 * In PID 1: mount, IPC and UTS namespaces, the cgroup, the tmpfs root
 * with the binds and /dev, /proc, pivot_root, the rlimits. Said once.
 */
int __must_check jail__setup(struct jail *j);
/*
 * Once the VM is built: uid and gid (every thread), no supplementary
 * groups, no capabilities (bounding, ambient, permitted, effective,
 * inheritable), no_new_privs. Said once; the caller stops.
 */
int __must_check jail__drop(struct jail *j);

#endif
