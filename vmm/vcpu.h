/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VCPU_H
#define KILN_VCPU_H

/*
 * vCPUs (vmm/vcpu.c: the threads, their exits and parking; vmm/vcpu-state.c:
 * their registers for a snapshot and a restore). A vCPU never stops the VM:
 * it reports an exit through the lifecycle's exit event (vmm/vm-state.h)
 * and leaves the guest; the run loop does the rest.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

struct vm;
struct vcpu;
struct vcpu_stats;
struct snap_writer;

int __must_check vcpu__create(struct vm *vm, unsigned int id,
			      struct vcpu **out);
void vcpu__destroy(struct vcpu *v);
int __must_check vcpu__setup_kick(void);
/*
 * Its thread, under the vCPU seccomp filter from its start; it waits for
 * the VM to leave VM_STATE_CREATED before entering the guest.
 */
int __must_check vcpu__start(struct vcpu *v);
void vcpu__kick(struct vcpu *v);
/* Has this vCPU been found halted for good in round `round`? */
bool vcpu__dead_in(const struct vcpu *v, unsigned int round);
/*
 * Park every vCPU outside KVM_RUN, look at all of them at that one moment,
 * let them go. True only if every vCPU is halted with interrupts off: then
 * nothing in the guest can ever wake them. Waits at most timeout_ms for
 * the vCPUs to park (one blocked on the host counts as alive). Only from
 * BOOTING or RUNNING, which it goes back to (through PAUSING).
 */
bool vcpu__snapshot_all_dead(struct vm *vm, unsigned int timeout_ms);
/*
 * Did every vCPU thread use at most busy_ns of CPU (its guest's time
 * included) since the last call? The first call has nothing to compare
 * with and says no. Main loop only.
 */
bool vcpu__all_quiet(struct vm *vm, long long busy_ns);
/* Its exits by kind and its thread's CPU time (vm.metrics); any thread. */
void vcpu__stats(const struct vcpu *v, struct vcpu_stats *s);
/*
 * Ask every vCPU to log, from its own thread, where its guest is: mp
 * state, rip, rsp, rflags, cr3, and the kernel text addresses found on
 * its stack (a poor man's backtrace to read against the guest's System.map).
 */
void vcpu__report_all(struct vm *vm);
void vcpu__join(struct vcpu *v);
/*
 * vm.pause: park every vCPU outside KVM_RUN and keep it there (PAUSING,
 * then PAUSED). A vCPU parks only after KVM_RUN returned -EINTR, which
 * completes the MMIO or port I/O exit it was in first (api.rst,
 * "immediate_exit"): its state is then consistent for the KVM_GET_*
 * ioctls, from any thread. 0; -EALREADY when paused already; -ETIMEDOUT
 * when not every vCPU parked within timeout_ms (they all run again);
 * -ESHUTDOWN when the VM stops.
 */
int __must_check vcpu__pause_all(struct vm *vm, unsigned int timeout_ms);
/* Let them run again: 0, or -EALREADY when not paused. */
int vcpu__resume_all(struct vm *vm);

/*
 * vmm/vcpu-state.c. A parked vCPU's state for a snapshot (vmm/snapshot.c):
 * the vCPU sections of Documentation/snapshots.md, "State files", added
 * to w. 0 or -errno, with the ioctl that failed in *what.
 */
int __must_check vcpu__save(struct vcpu *v, struct snap_writer *w,
			    const char **what);
/*
 * A vCPU just created for a restore (vcpu__create skipped the boot
 * setup): the sections of its state file p set in the order KVM needs
 * (Documentation/snapshots.md, "Restore"), its TSC moved on by
 * tsc_advance ticks. Before any thread runs it. 0 or -errno, with the
 * ioctl or section that failed in *what.
 */
int __must_check vcpu__restore(struct vcpu *v, const void *p, size_t plen,
			       uint64_t tsc_advance, const char **what);

#endif
