/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_ISOLATE_NS_INTERNAL_H
#define KILN_VMM_ISOLATE_NS_INTERNAL_H

/*
 * Between isolate-ns.c (the host side: what is made before the clone,
 * the id maps, the control API, the wait, the clean-up) and
 * isolate-ns-root.c (the sandbox's side, from the clone to the exec of
 * its agent): callers see vmm/isolate-ns.h only.
 */
#include <limits.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "vmm/config.h"
#include "vmm/isolate-ns-cgroup.h"
#include "vmm/isolate-ns.h"
#include "vmm/mounts.h"
#include "vmm/rootfs.h"
#include "vmm/vm-net.h"

/* The agent's listening socket, as fd 3 of kiln-agent-ns. */
#define NS_AGENT_FD	3
#define NS_AGENT_BIN	"kiln-agent-ns"
#define NS_REPORT_MAX	512    /* the child's one line, when it fails */
#define NS_CHILD_FAILED 125    /* the child's status then */
#define NS_NET_IFNAME	"eth0" /* the veth's far end, as a VM's NIC */

struct ns_sandbox {
	const struct vm_config *cfg;
	struct rootfs_image img;
	char dir[PATH_MAX - 64]; /* the run directory (mkdtemp); "": none */
	char sock[PATH_MAX];	 /* dir/agent.sock: the agent's */
	char stage[PATH_MAX];	 /* dir/stage: where the root is assembled */
	char upper[PATH_MAX +
		   8];		 /* persistent: state/upper; "": in the tmpfs */
	char work[PATH_MAX + 8]; /* persistent: state/work */
	int listen_fd;		 /* the agent's socket, listening */
	int stage_fd; /* the child's: the stage, O_PATH, in its namespace */
	int agent_fd; /* kiln-agent-ns, opened before the switch */
	int root_fd;  /* the image's ext4, a detached mount */
	int bind_fd[MOUNTS_MAX]; /* --mount binds, detached clones; -1 */
	struct ns_fuse *fuse[MOUNTS_MAX]; /* FUSE-served mounts; NULL */
	int fuse_dev[MOUNTS_MAX]; /* the child's /dev/fuse for each; -1 */
	/*
	 * persistent: the state directory, a detached clone (id-mapped as
	 * the binds are), holding upper/ and work/; -1: in the tmpfs. A
	 * clone of its own, as overlayfs will not take a layer from the
	 * host's mounts seen from a user namespace (their children are
	 * locked).
	 */
	int state_fd;
	struct ns_cgroup cg; /* its cgroup v2: path "" when none */
	int pidfd;	     /* the sandbox's PID 1; -1: none */
	int go[2];	     /* host -> child: the id maps are written */
	int report[2];	     /* child -> host: why it failed; EOF: exec */
	pid_t pid;
	struct api *api;
	/*
	 * --net auto or netns:PATH: the VM's proxy, policy and resolver on
	 * a veth whose far end is the sandbox's eth0 (vmm/vm-net.h).
	 */
	struct vm_net net;
	int ready_fd;			     /* start --detach; -1: none */
	_Atomic long long shutdown_deadline; /* CLOCK_MONOTONIC s; 0: none */
};

/*
 * isolate-ns-fuse.c: a mount the kernel cannot make itself (virtual,
 * memory with seeded files, a bind with masked paths), served over
 * /dev/fuse by devices/fs/'s server and backend. Create before the
 * clone (the backend opens its host side; err gets one line, or stays
 * empty when the backend said why itself); start with the sandbox's
 * /dev/fuse descriptor (taken over); destroy after the sandbox ended
 * (NULL ok).
 */
struct ns_fuse;
bool ns_fuse__wanted(const struct mount_config *m);
int __must_check ns_fuse__create(struct ns_fuse **out,
				 const struct mount_config *m,
				 unsigned int index, char *err, size_t len);
int __must_check ns_fuse__start(struct ns_fuse *f, int fuse_fd);
void ns_fuse__destroy(struct ns_fuse *f);

/*
 * In the child of the clone, as its PID 1: waits for the go byte, then
 * assembles the root, switches to it, installs the filter and executes
 * the agent. Never returns: a failure is one line on report[1] and
 * status NS_CHILD_FAILED.
 */
void __attribute__((noreturn)) ns_child(struct ns_sandbox *sb);

#endif
