/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SECCOMP_H
#define KILN_SECCOMP_H

#include <linux/filter.h>
#include <stdbool.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * One seccomp filter per thread type, each the syscalls that type needs
 * once the VM is built (the table in vmm/seccomp.c; why each is there is
 * written next to it). Each thread installs its own type's filter when
 * it starts (lib/thread-filter.h: this thread only, no TSYNC), before a
 * vCPU's first KVM_RUN; the main thread installs its own last, once
 * every other thread runs. A call the filter does not list ends the
 * process with a message naming it (SIGSYS is caught for that) and
 * status 125. Documentation/security.md, "seccomp and io_uring".
 */
enum seccomp_thread {
	/* vm__run's loop: signals, stdin, the halt probe's timer, tear-down */
	SECCOMP_THREAD_MAIN,
	SECCOMP_THREAD_VCPU,
	/* the event loops of virtio-blk, virtio-net and virtio-vsock */
	SECCOMP_THREAD_DEVICE,
	/* a virtio-fs event loop, and the threads its backend starts */
	SECCOMP_THREAD_FS,
	/* the control API (vmm/api/server.c) */
	SECCOMP_THREAD_API,
	/* the egress proxy's (net/proxy.c) and the resolver's (net/dns.c) */
	SECCOMP_THREAD_EGRESS,
	/* the egress proxy's netns thread (net/proxy-ns.c), once it serves */
	SECCOMP_THREAD_NETNS,
	SECCOMP_NR_THREADS,
};

/* What this VM has, which some thread types then need. */
struct seccomp_needs {
	/*
	 * virtio-fs bind mounts: the *at() family beneath the shared
	 * directories (devices/fs/passthrough.c), on the virtio-fs threads
	 * only.
	 */
	bool fs_bind;
	/*
	 * virtio-net: its activation, on the vCPU thread that writes
	 * DRIVER_OK, tells the tap the driver's offloads (TUNSETOFFLOAD).
	 * Everything else it does goes through its io_uring.
	 */
	bool net;
	/*
	 * The console log's rotation (vmm/console-log.c), on the thread that
	 * writes the UART's bytes (a vCPU's, or the main loop's):
	 * renameat(2) and openat2(2), each only with the log's directory
	 * descriptor, console_log_dirfd, as its directory.
	 */
	bool console_log;
	int console_log_dirfd;
	/*
	 * A control socket, so vm.snapshot (vmm/snapshot.c), which runs on
	 * the control API's thread, and on the API thread only: the
	 * read-only KVM_GET_* ioctls of the parked vCPUs' and the VM's
	 * state; mkdirat, fchmod, fstat, geteuid for its directory; openat
	 * with exactly the flags of a new file or a directory
	 * (SNAP_OPEN_NEW, SNAP_OPEN_DIR: O_EXCL and O_NOFOLLOW, so nothing
	 * is read, overwritten or followed; any other openat still fails
	 * with EACCES); pwrite64, ftruncate and fsync for the parts.
	 */
	bool snapshot;
	/*
	 * start --baseline-cache with a capture planned (vmm/baseline-vm.c):
	 * on the API thread, which writes it as vm.snapshot does, the one
	 * renameat2 that puts it in place in the cache.
	 */
	bool baseline;
	/*
	 * A cow root (devices/block/store-cow.c): on the device threads, the
	 * block store worker's pwrite64 of fetched blocks into the local
	 * layer.
	 */
	bool block_store;
	/*
	 * The thread types this VM runs, BIT(enum seccomp_thread) each: only
	 * their filters are compiled (each costs libseccomp's work before
	 * the first KVM_RUN). 0: every type. Another type's filter is an
	 * empty program, which the kernel refuses: a thread of a type left
	 * out fails to start, it never runs unfiltered.
	 */
	unsigned int threads;
};

/* The compiled programs, one per enum seccomp_thread. */
struct seccomp_filters;

/*
 * Compiles the filter of every thread type in needs->threads for a VM
 * with these needs (before any thread starts: libseccomp allocates) and
 * catches SIGSYS.
 */
int __must_check seccomp__build(struct seccomp_filters **out,
				const struct seccomp_needs *needs);
/* filters NULL (seccomp off): NULL, which lib/thread-filter.h skips. */
const struct sock_fprog *seccomp__filter(const struct seccomp_filters *filters,
					 enum seccomp_thread type);
void seccomp__destroy(struct seccomp_filters *filters);

/* Builds type's filter and installs it on the calling thread only. */
int __must_check seccomp__install(const struct seccomp_needs *needs,
				  enum seccomp_thread type);

#endif
