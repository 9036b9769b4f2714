/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_VM_PAUSE_H
#define KILN_VMM_VM_PAUSE_H

#include <stddef.h>

#include "lib/compiler.h"

struct vm;

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
