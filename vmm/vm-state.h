/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_STATE_H
#define KILN_VM_STATE_H

/*
 * The VM's lifecycle (Documentation/design.md, "Lifecycle"): one state,
 * every transition decided by vm_state__valid_transition, and the exit
 * event through which vCPUs, devices and the control API report why the
 * VM should stop. The run loop (vmm/vm-run.c) reads that event and owns
 * the move to STOPPING; nobody else stops the VM. No KVM here: the unit
 * test (selftests/unit/vm_state.c) links it alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "lib/compiler.h"

enum vm_state {
	VM_STATE_CREATED, /* built (booted or restored); no vCPU in the guest */
	VM_STATE_BOOTING, /* vCPUs run; the guest agent has not answered */
	VM_STATE_RUNNING, /* vCPUs run; the agent answered, or there is none */
	VM_STATE_PAUSING, /* vCPUs told to park (vm.pause or a halt look) */
	VM_STATE_PAUSED,  /* vm.pause: every vCPU parked until vm.resume */
	VM_STATE_STOPPING, /* vCPUs leave the guest, the run loop ends */
	VM_STATE_STOPPED,  /* every vCPU thread joined */
	VM_STATE_NR,
};

enum vm_stop_reason {
	VM_STOP_NONE,
	VM_STOP_GUEST_EXIT,  /* status reported through the exit device */
	VM_STOP_GUEST_RESET, /* reset or triple fault, no status */
	VM_STOP_GUEST_HALT,  /* every vCPU halted for good: power off */
	VM_STOP_ERROR,	     /* KVM or the monitor failed */
	VM_STOP_SIGNAL,	     /* the host asked us to stop */
	VM_STOP_SHUTDOWN,    /* vm.shutdown, and the guest did not power off */
};

struct vm_lifecycle {
	pthread_mutex_t lock; /* the state and everything marked "lock" */
	pthread_cond_t cv;    /* CLOCK_MONOTONIC: a state change, a park */
	atomic_int state;     /* enum vm_state: set under lock, read anywhere */
	/* PAUSING, PAUSED: BOOTING or RUNNING, where a resume goes (lock). */
	enum vm_state resume_to;
	bool refused; /* an invalid transition was logged (lock) */

	/*
	 * The exit event: the first reason reported (lock; read atomically
	 * by vCPUs, which then do not enter the guest again) and exit_fd
	 * written, which the run loop reads.
	 */
	int exit_fd;
	atomic_int stop_reason; /* enum vm_stop_reason */
	int stop_status;	/* status or signal number */
	const char *stop_detail;

	/*
	 * Parking every vCPU (vmm/vcpu.c): the generation of the latest
	 * request to park, for vCPUs to know which one they parked for,
	 * and how many parked in it (lock).
	 */
	atomic_uint pause_gen;
	unsigned int paused;	  /* vCPUs parked in this pause */
	unsigned int paused_dead; /* of them, halted with IF clear */

	/* vm.shutdown: CLOCK_MONOTONIC s to power off by; 0: none. */
	atomic_llong shutdown_deadline;
};

/* The exit event's eventfd, the lock and its condition. 0 or -errno. */
int __must_check vm_state__init(struct vm_lifecycle *lc);
void vm_state__exit(struct vm_lifecycle *lc);

/* Every transition the VM may make, and only those. */
bool vm_state__valid_transition(enum vm_state from, enum vm_state to);
const char *vm_state__name(enum vm_state s);

static inline enum vm_state vm_state__get(const struct vm_lifecycle *lc)
{
	return (enum vm_state)atomic_load(&lc->state);
}

/*
 * The one setter: 0, or -EINVAL for a transition the table does not
 * allow (the state is left, and the first refusal logged). Wakes every
 * waiter on cv. _locked: with lc->lock held.
 */
int __must_check vm_state__set_locked(struct vm_lifecycle *lc,
				      enum vm_state to);
int __must_check vm_state__set(struct vm_lifecycle *lc, enum vm_state to);

/* STOPPING or STOPPED. */
bool vm_state__stopping(const struct vm_lifecycle *lc);
/* Stopping, or an exit reported: no vCPU enters the guest again. */
bool vm_state__ending(const struct vm_lifecycle *lc);
/* BOOTING, or parked on the way from it: the agent has not answered. */
bool vm_state__booting(struct vm_lifecycle *lc);

/*
 * Any thread: the VM should stop, for this reason (the first reported
 * wins); the run loop is woken through exit_fd. No lock but lc's.
 */
void vm_state__report_exit(struct vm_lifecycle *lc, enum vm_stop_reason reason,
			   int status, const char *detail);
/*
 * --ready-timeout-ms: reports the exit only while the VM is booting, in
 * one step with vm_state__booted: true when it did.
 */
bool vm_state__report_boot_timeout(struct vm_lifecycle *lc, const char *detail);
/*
 * The guest agent answered: BOOTING -> RUNNING (or where a pause from
 * BOOTING resumes to). 0, or -ESHUTDOWN: the VM stops already.
 */
int __must_check vm_state__booted(struct vm_lifecycle *lc);
/* The run loop: -> STOPPING, once (0 when stopping already). */
int vm_state__stop(struct vm_lifecycle *lc);

#endif
