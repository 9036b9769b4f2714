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
};

int __must_check seccomp__install(const struct seccomp_needs *needs);

#endif
