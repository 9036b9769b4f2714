/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CONTROL_H
#define KILN_CONTROL_H

/*
 * vmm/control.c: the control socket (--control-socket), the JSON-RPC API
 * (vmm/api.h) wired to the VM. It calls nothing of the run loop or the
 * builder: what the API may ask of the VM comes in control_ops, given at
 * control__start, and a stop is reported through the lifecycle's exit
 * event (vmm/vm-state.h).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/compiler.h"

struct vm;

/*
 * start --detach: what the VM process writes to its waiting parent
 * (main.c): the agent answered (a baseline capture may follow); ready.
 */
#define VM_AGENT_BYTE 'a'
#define VM_READY_BYTE 'r'

/*
 * The VM's actions the API asks for, each on the API's thread, one at a
 * time; each returns 0 or -errno with one line in err.
 */
struct control_ops {
	/* vm.pause, vm.resume (vmm/vm-run.h). */
	int (*pause)(struct vm *vm, char *err, size_t len);
	int (*resume)(struct vm *vm, char *err, size_t len);
	/* vm.snapshot (vmm/snapshot.h). */
	int (*snapshot)(struct vm *vm, const char *dir, bool resume, char *err,
			size_t len);
	/* net.setPolicy (vmm/vm.h). */
	int (*set_net_policy)(struct vm *vm, json_t *policy, char *err,
			      size_t len);
	/*
	 * --baseline-cache: the agent answered, or (a VM with mounts) has
	 * detached them (err 0) or could not (-errno, why): the capture
	 * (vmm/baseline-vm.h, vm__baseline_capture_detached).
	 */
	void (*capture)(struct vm *vm, int err, const char *why);
};

/* A build step (vmm/vm.c) and its undo. */
int __must_check control__init(struct vm *vm);
void control__exit(struct vm *vm);
/* Its thread, under the API filter; ops stay valid while the VM runs. */
int __must_check control__start(struct vm *vm, const struct control_ops *ops);
/*
 * The vCPUs are joined: vm.event guest-panic or triple-fault when a
 * vCPU saw one, then shutdown with the reason and the exit code.
 */
void control__stopped(struct vm *vm, int exit_code);

#endif
