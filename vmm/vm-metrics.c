// SPDX-License-Identifier: GPL-2.0
/*
 * The metrics of a running VM (vm.metrics, --metrics FILE): each counter
 * read where it is kept (the vCPUs, the virtio devices and their queues,
 * the disk, memory mounts, the API, /proc/self/status), without a lock;
 * the object's pieces are vmm/metrics.c's. Documented member by member
 * in Documentation/api.md, "vm.metrics".
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "vmm/api.h"
#include "vmm/metrics.h"
#include "vmm/trace-startup.h"
#include "vmm/vcpu.h"
#include "vmm/vm-metrics.h"
#include "vmm/vm.h"

static json_t *vcpus_json(struct vm *vm)
{
	json_t *a = json_array();

	pthread_mutex_lock(&vm->vcpus_lock);
	for (unsigned int i = 0; a && vm->vcpus && i < vm->nr_vcpus; i++) {
		struct vcpu_stats s;

		vcpu__stats(vm->vcpus[i], &s);
		json_array_append_new(a, metrics__vcpu_json(i, &s));
	}
	pthread_mutex_unlock(&vm->vcpus_lock);
	return a;
}

/* The root disk's writable layer: its dirty bytes against the cap. */
static json_t *rootfs_json(struct vm *vm)
{
	const struct rootfs_config *c = &vm->cfg->rootfs;
	json_t *o;

	if (!vm->disk)
		return json_null();
	o = metrics__usage_json(
		disk__dirty_bytes(vm->disk),
		c->mode == ROOTFS_READONLY ? 0 : c->max_dirty_bytes);
	if (o)
		json_object_set_new(
			o, "mode",
			json_string(config__rootfs_mode_name(c->mode)));
	return o;
}

static json_t *process_json(struct vm *vm)
{
	struct proc_mem m;

	if (vm->proc_status_fd < 0 ||
	    metrics__read_status(vm->proc_status_fd, &m))
		return json_null();
	return metrics__process_json(&m);
}

void vm__metrics_fill(struct vm *vm, json_t *o)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	json_object_set_new(o, "timestampMs",
			    json_integer((json_int_t)now.tv_sec * 1000 +
					 now.tv_nsec / 1000000));
	json_object_set_new(o, "vcpus", vcpus_json(vm));
	json_object_set_new(o, "devices", virtio_slots__metrics(vm->virtio));
	json_object_set_new(o, "rootfs", rootfs_json(vm));
	json_object_set_new(o, "process", process_json(vm));
	if (vm->trace)
		json_object_set_new(o, "startup",
				    startup_trace__json(vm->trace));
	if (vm->metrics_file)
		json_object_set_new(o, "metricsFile",
				    json_pack("{s:I, s:I}", "lines",
					      (json_int_t)metrics_file__lines(
						      vm->metrics_file),
					      "dropped",
					      (json_int_t)metrics_file__dropped(
						      vm->metrics_file)));
}

void vm__metrics_write(struct vm *vm)
{
	json_t *o;

	if (!vm->metrics_file)
		return;
	o = json_object();
	if (o) {
		json_object_set_new(o, "agent", api__metrics_agent(vm->api));
		vm__metrics_fill(vm, o);
	}
	/* A NULL object is written as a drop: counted, reported once. */
	metrics_file__write(vm->metrics_file, o);
	json_decref(o);
}

int vm_metrics__init(struct vm *vm)
{
	int ret;

	/*
	 * Opened now, read with pread once the filter forbids opening
	 * (vmm/seccomp.c); a monitor without it still has the rest.
	 */
	vm->proc_status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (vm->proc_status_fd < 0)
		pr_warn("/proc/self/status: %s; vm.metrics has no process "
			"member",
			strerror(errno));
	if (!vm->cfg->metrics_path)
		return 0;
	ret = metrics_file__open(&vm->metrics_file, vm->cfg->metrics_path);
	return ret;
}

void vm_metrics__exit(struct vm *vm)
{
	metrics_file__close(vm->metrics_file);
	vm->metrics_file = NULL;
	if (vm->proc_status_fd >= 0)
		close(vm->proc_status_fd);
	vm->proc_status_fd = -1;
}
