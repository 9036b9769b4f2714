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
 * - a jailed vmm (vmm/jail.c: its own PID namespace, no capabilities,
 *   another uid, not dumpable) cannot ptrace its own threads: the
 *   tracer waits for them for ever and the main thread spins in exit()
 *   with no guest time. The check is skipped for the whole process once
 *   the jail has dropped its privileges.
 *
 * Each is a no-op in a build without the sanitizers; a vmm run with
 * --no-seccomp and no jail, and every unit test, keeps the check.
 */
void leak_check__skip_thread(void);
void leak_check__skip_process(void);

#endif
