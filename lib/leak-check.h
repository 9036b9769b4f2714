/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_LEAK_CHECK_H
#define KILN_LIB_LEAK_CHECK_H

/*
 * SAN=1 builds only (Documentation/fuzzing.md): where LeakSanitizer's
 * check at exit cannot run, skip it rather than let it end or hang the
 * process. The check stops the world from a process it clones (no
 * CLONE_THREAD) that ptraces every thread of the vmm:
 *
 * - a thread under a seccomp filter (lib/thread-filter.c) is killed by
 *   SIGSYS for the clone, so the process ends 125 instead of with its
 *   own status: the check is skipped when such a thread calls exit();
 * - a jailed vmm (vmm/jail.c) cannot: the relay left outside exits
 *   after the jail's PID 1 has, and its tracer starts in that PID
 *   namespace, whose init is gone (the tracer died a zombie and the
 *   relay spun in exit() for ever: kvm_jail timed out under SAN=1);
 *   PID 1 itself runs as another uid with no capabilities. The check is
 *   skipped for the whole process from the PID namespace on (both
 *   sides of the fork inherit it).
 *
 * Each is a no-op in a build without the sanitizers; a vmm run with
 * --no-seccomp and no jail, and every unit test, keeps the check.
 */
void leak_check__skip_thread(void);
void leak_check__skip_process(void);

#endif
