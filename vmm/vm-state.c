// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's lifecycle state and its exit event (vmm/vm-state.h). Every
 * transition is decided in vm_state__valid_transition and made by
 * vm_state__set_locked, which refuses the others: a flag or a sentinel
 * set somewhere else is not a state.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "vmm/vm-state.h"

int vm_state__init(struct vm_lifecycle *lc)
{
	pthread_condattr_t attr;

	memset(lc, 0, sizeof(*lc));
	lc->exit_fd = eventfd(0, EFD_CLOEXEC);
	if (lc->exit_fd < 0)
		return -errno;
	pthread_mutex_init(&lc->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&lc->cv, &attr);
	pthread_condattr_destroy(&attr);
	atomic_store(&lc->state, VM_STATE_CREATED);
	atomic_store(&lc->stop_reason, VM_STOP_NONE);
	return 0;
}

void vm_state__exit(struct vm_lifecycle *lc)
{
	if (lc->exit_fd < 0)
		return;
	pthread_cond_destroy(&lc->cv);
	pthread_mutex_destroy(&lc->lock);
	close(lc->exit_fd);
	lc->exit_fd = -1;
}

/*
 * CREATED: the build is done, a boot's registers or a snapshot's state
 * set. Releasing the vCPUs makes it BOOTING when a guest agent is to
 * answer, RUNNING otherwise; the agent's answer, BOOTING -> RUNNING.
 * A pause (vm.pause, or the main loop's look at halted vCPUs) is
 * PAUSING until every vCPU parked: then PAUSED for vm.pause, or back to
 * where it came from (the look done, or a pause that failed); a resume
 * goes back there too. Any state but STOPPED may stop; STOPPED is last.
 */
bool vm_state__valid_transition(enum vm_state from, enum vm_state to)
{
	switch (from) {
	case VM_STATE_CREATED:
		return to == VM_STATE_BOOTING || to == VM_STATE_RUNNING ||
		       to == VM_STATE_STOPPING;
	case VM_STATE_BOOTING:
		return to == VM_STATE_RUNNING || to == VM_STATE_PAUSING ||
		       to == VM_STATE_STOPPING;
	case VM_STATE_RUNNING:
		return to == VM_STATE_PAUSING || to == VM_STATE_STOPPING;
	case VM_STATE_PAUSING:
		return to == VM_STATE_PAUSED || to == VM_STATE_BOOTING ||
		       to == VM_STATE_RUNNING || to == VM_STATE_STOPPING;
	case VM_STATE_PAUSED:
		return to == VM_STATE_BOOTING || to == VM_STATE_RUNNING ||
		       to == VM_STATE_STOPPING;
	case VM_STATE_STOPPING:
		return to == VM_STATE_STOPPED;
	case VM_STATE_STOPPED:
	default:
		return false;
	}
}

const char *vm_state__name(enum vm_state s)
{
	static const char *const names[VM_STATE_NR] = {
		[VM_STATE_CREATED] = "created",
		[VM_STATE_BOOTING] = "booting",
		[VM_STATE_RUNNING] = "running",
		[VM_STATE_PAUSING] = "pausing",
		[VM_STATE_PAUSED] = "paused",
		[VM_STATE_STOPPING] = "stopping",
		[VM_STATE_STOPPED] = "stopped",
	};

	return (unsigned int)s < VM_STATE_NR ? names[s] : "?";
}

int vm_state__set_locked(struct vm_lifecycle *lc, enum vm_state to)
{
	enum vm_state from = vm_state__get(lc);

	if (!vm_state__valid_transition(from, to)) {
		if (!lc->refused)
			pr_err("VM state: %s -> %s is not a transition; "
			       "refused",
			       vm_state__name(from), vm_state__name(to));
		lc->refused = true;
		return -EINVAL;
	}
	atomic_store(&lc->state, to);
	pthread_cond_broadcast(&lc->cv);
	return 0;
}

int vm_state__set(struct vm_lifecycle *lc, enum vm_state to)
{
	int ret;

	pthread_mutex_lock(&lc->lock);
	ret = vm_state__set_locked(lc, to);
	pthread_mutex_unlock(&lc->lock);
	return ret;
}

bool vm_state__stopping(const struct vm_lifecycle *lc)
{
	enum vm_state s = vm_state__get(lc);

	return s == VM_STATE_STOPPING || s == VM_STATE_STOPPED;
}

bool vm_state__ending(const struct vm_lifecycle *lc)
{
	return atomic_load(&lc->stop_reason) != VM_STOP_NONE ||
	       vm_state__stopping(lc);
}

static bool booting_locked(const struct vm_lifecycle *lc)
{
	enum vm_state s = vm_state__get(lc);

	return s == VM_STATE_BOOTING ||
	       ((s == VM_STATE_PAUSING || s == VM_STATE_PAUSED) &&
		lc->resume_to == VM_STATE_BOOTING);
}

bool vm_state__booting(struct vm_lifecycle *lc)
{
	bool ret;

	pthread_mutex_lock(&lc->lock);
	ret = booting_locked(lc);
	pthread_mutex_unlock(&lc->lock);
	return ret;
}

static void report_locked(struct vm_lifecycle *lc, enum vm_stop_reason reason,
			  int status, const char *detail)
{
	if (atomic_load(&lc->stop_reason) != VM_STOP_NONE)
		return;
	lc->stop_status = status;
	lc->stop_detail = detail;
	atomic_store(&lc->stop_reason, reason);
}

static void wake_loop(struct vm_lifecycle *lc)
{
	uint64_t one = 1;

	if (write(lc->exit_fd, &one, sizeof(one)) < 0)
		pr_debug("exit_fd: %s", strerror(errno));
}

void vm_state__report_exit(struct vm_lifecycle *lc, enum vm_stop_reason reason,
			   int status, const char *detail)
{
	pthread_mutex_lock(&lc->lock);
	report_locked(lc, reason, status, detail);
	pthread_mutex_unlock(&lc->lock);
	wake_loop(lc);
}

bool vm_state__report_boot_timeout(struct vm_lifecycle *lc, const char *detail)
{
	bool booting;

	pthread_mutex_lock(&lc->lock);
	booting = booting_locked(lc) && !vm_state__ending(lc);
	if (booting)
		report_locked(lc, VM_STOP_ERROR, 0, detail);
	pthread_mutex_unlock(&lc->lock);
	if (booting)
		wake_loop(lc);
	return booting;
}

int vm_state__booted(struct vm_lifecycle *lc)
{
	int ret = 0;

	pthread_mutex_lock(&lc->lock);
	if (vm_state__ending(lc))
		ret = -ESHUTDOWN;
	else if (vm_state__get(lc) == VM_STATE_BOOTING)
		ret = vm_state__set_locked(lc, VM_STATE_RUNNING);
	else if (booting_locked(lc))
		lc->resume_to = VM_STATE_RUNNING;
	pthread_mutex_unlock(&lc->lock);
	return ret;
}

int vm_state__stop(struct vm_lifecycle *lc)
{
	int ret = 0;

	pthread_mutex_lock(&lc->lock);
	if (!vm_state__stopping(lc))
		ret = vm_state__set_locked(lc, VM_STATE_STOPPING);
	pthread_mutex_unlock(&lc->lock);
	return ret;
}
