/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_RUN_H
#define KILN_VM_RUN_H

/*
 * vmm/vm-run.c: running the VM vm__create built, and the lifecycle
 * transitions the control API asks for (Documentation/snapshots.md).
 */
#include <stddef.h>

#include "lib/compiler.h"

struct vm;
struct control_ops;

/*
 * Runs the guest to completion; returns the process exit code. ops: what
 * the control API may ask of the VM, given to it as it starts.
 */
int vm__run(struct vm *vm, const struct control_ops *ops);

/*
 * vm.pause, vm.resume. Called on the control API's thread, one at a
 * time. Each returns 0 or -errno with one line in err: -EALREADY (paused
 * twice, resumed while running), -ETIMEDOUT (a vCPU or a device did not
 * stop in time: the VM runs on), -ESHUTDOWN (the VM stops). Pause parks
 * the vCPUs first (no new kick or MMIO access after that), then pauses
 * each virtio device, which waits for its requests in flight; resume
 * goes the other way.
 */
#define VM_PAUSE_VCPU_MS   5000U /* for every vCPU to leave KVM_RUN */
#define VM_PAUSE_DEVICE_MS 5000U /* for each device's requests in flight */
int __must_check vm__pause(struct vm *vm, char *err, size_t len);
int __must_check vm__resume(struct vm *vm, char *err, size_t len);

#endif
