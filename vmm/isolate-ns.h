/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_ISOLATE_NS_H
#define KILN_VMM_ISOLATE_NS_H

/*
 * vmm run|start --isolation namespace (Documentation/design.md,
 * "Namespace isolation"; its boundary: Documentation/security.md): the
 * guest agent (kiln-agent-ns, guest/agent/ns.c) as PID 1 of new user,
 * mount, PID, network, IPC, UTS and cgroup namespaces on the host's
 * kernel, under a seccomp filter and a cgroup v2 when one is writable
 * (sized from --memory and --cpus: vmm/isolate-ns-cgroup.h),
 * its root the image's ext4 read-only (a loop device) under an overlay,
 * serving the same protocol on a Unix socket, and the same control API
 * (vmm/api.h) in front of it. For hosts without usable KVM.
 */
#include <stddef.h>

#include "lib/compiler.h"
#include "vmm/config.h"

/*
 * The sandbox's root is this host uid and gid, its ids 0 to
 * NS_ID_COUNT - 1 the host's NS_ID_BASE onwards; the image and --mount
 * binds are id-mapped to match (their root is the sandbox's).
 */
#define NS_ID_BASE  100000U
#define NS_ID_COUNT 65536U

/*
 * What --isolation namespace cannot take from c (a network, a cow root,
 * virtual mounts, a restore...), before anything is made: 0, or -EINVAL
 * with one line in err naming the option and why.
 */
int __must_check isolate_ns__check(const struct vm_config *c, char *err,
				   size_t len);

/*
 * Runs the sandbox until its command ends (run), or until vm.shutdown or
 * a signal (start); every failure reported here, once. ready_fd: start
 * --detach's pipe (vmm/control.h's bytes), or -1; parent_fd:
 * --die-with-parent's pidfd, or -1. Returns the exit code: the
 * command's status, 0 for a shutdown, 128 + N for signal N, or
 * VMM_EXIT_VMM_ERROR.
 */
int isolate_ns__run(const struct vm_config *c, int ready_fd, int parent_fd);

#endif
