// SPDX-License-Identifier: GPL-2.0
/*
 * vm.pause and vm.resume (vm-pause.h; Documentation/snapshots.md): the
 * vCPUs parked, then each virtio device paused once its requests in
 * flight are done; resume the other way. Apart from the run loop, so a
 * snapshot (vmm/snapshot.c) pauses the VM without calling into it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "devices/virtio/device.h"
#include "lib/log.h"
#include "vmm/api.h"
#include "vmm/vcpu.h"
#include "vmm/vm-pause.h"
#include "vmm/vm-state.h"
#include "vmm/vm.h"

static void resume_devices(struct vm *vm, unsigned int upto)
{
	for (unsigned int i = 0; i < upto; i++)
		if (vm->virtio[i].dev &&
		    virtio_device__is_paused(vm->virtio[i].dev))
			virtio_device__resume(vm->virtio[i].dev);
}

int vm__pause(struct vm *vm, char *err, size_t len)
{
	unsigned int i;
	int ret;

	ret = vcpu__pause_all(vm, VM_PAUSE_VCPU_MS);
	if (ret) {
		snprintf(err, len, "%s",
			 ret == -EALREADY ? "the VM is paused already" :
			 ret == -ESHUTDOWN ?
					    "the VM is stopping" :
					    "a vCPU did not leave the guest in "
					    "time; the VM runs on");
		return ret;
	}
	for (i = 0; i < VIRTIO_MMIO_SLOTS; i++) {
		struct virtio_device *dev = vm->virtio[i].dev;

		if (!dev)
			continue;
		ret = virtio_device__pause(dev, VM_PAUSE_DEVICE_MS);
		if (ret) {
			snprintf(err, len,
				 "%s: its requests in flight did not complete "
				 "in %u ms (%s); the VM runs on",
				 dev->name, VM_PAUSE_DEVICE_MS, strerror(-ret));
			resume_devices(vm, i);
			if (vcpu__resume_all(vm))
				pr_debug("vm.pause: the vCPUs were not paused");
			return ret;
		}
	}
	api__event(vm->api, "paused", NULL);
	return 0;
}

int vm__resume(struct vm *vm, char *err, size_t len)
{
	if (vm_state__get(&vm->lc) != VM_STATE_PAUSED) {
		snprintf(err, len, "the VM is not paused");
		return -EALREADY;
	}
	resume_devices(vm, VIRTIO_MMIO_SLOTS);
	if (vcpu__resume_all(vm))
		return -EALREADY; /* only the API thread resumes */
	api__event(vm->api, "resumed", NULL);
	return 0;
}
