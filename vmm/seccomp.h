/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SECCOMP_H
#define KILN_SECCOMP_H

#include <stdbool.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * Once the VM is built, the monitor needs only a few dozen syscalls to run
 * it. Installed just before the first vCPU thread starts (and so inherited
 * by all of them); anything else ends the process with a message naming
 * the system call (SIGSYS is caught for that) and status 125.
 */
struct seccomp_needs {
	/*
	 * virtio-fs bind mounts: the *at() family beneath the shared
	 * directories (devices/fs/passthrough.c). Only then is any of it
	 * allowed; a VM without binds keeps the list above.
	 */
	bool fs_bind;
	/*
	 * virtio-net: its activation, on the vCPU thread that writes
	 * DRIVER_OK, tells the tap the driver's offloads (TUNSETOFFLOAD).
	 * Everything else it does goes through its io_uring.
	 */
	bool net;
	/*
	 * The egress proxy's thread (vmm/proxy.c): IPv4 TCP and UDP sockets
	 * upstream, SO_LINGER for its resets, SO_ERROR after a connect,
	 * getsockname for an accepted flow's original destination. Its
	 * netns thread predates the filter and is not under it.
	 */
	bool proxy;
	/*
	 * The VM's resolver's thread (vmm/dns.c): upstream IPv4 UDP and TCP
	 * sockets and SO_ERROR after a connect, which the proxy's rules
	 * allow already; nothing of its own. Its sockets in the VM netns
	 * are made before the filter.
	 */
	bool dns;
	/*
	 * The console log's rotation (vmm/console-log.c): renameat(2) and
	 * openat2(2), each only with the log's directory descriptor,
	 * console_log_dirfd, as its directory. fs_bind allows them anyway.
	 */
	bool console_log;
	int console_log_dirfd;
	/*
	 * vm.snapshot on the control API's thread (vmm/snapshot.c): the
	 * KVM_GET_* ioctls of the vCPU and VM state; mkdirat, fchmod,
	 * fstat, geteuid for its directory; openat with exactly the flags
	 * of a new file or a directory (SNAP_OPEN_NEW, SNAP_OPEN_DIR:
	 * O_EXCL and O_NOFOLLOW, so nothing is read, overwritten or
	 * followed; any other openat still fails with EACCES); pwrite64,
	 * ftruncate and fsync for the parts.
	 */
	bool snapshot;
};

int __must_check seccomp__install(const struct seccomp_needs *needs);

#endif
