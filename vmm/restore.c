// SPDX-License-Identifier: GPL-2.0
/*
 * vmm start --restore DIR (Documentation/snapshots.md, "Restore"): the
 * VM is built through the same steps as a boot, with two of its own.
 * vm__restore_open runs before KVM is touched: the snapshot is verified
 * and matched against this monitor and this config, and its parts read.
 * The memory step then maps memory.raw MAP_PRIVATE (pages load on first
 * touch and stay shared page cache until written), the boot step loads
 * nothing, and vm__restore_state, once the vCPUs exist, sets every
 * vCPU's state, the irqchip, the PIT and the clock, and the devices'.
 * All of it runs before vm__run installs any seccomp filter.
 *
 * What a clone changes: the clock moves on by the time since the
 * snapshot (kvmclock through KVM_CLOCK_REALTIME, the TSC by as many
 * ticks), vsock connections are reset (the device tells the guest;
 * the agent's listener stays and the control API reconnects), and the
 * guest's CRNG gets a new seed through the agent before it counts as
 * ready (vmm/control.c draws it, vmm/api/reseed.c sends it).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "devices/block/disk.h"
#include "devices/block/store-cow.h"
#include "devices/console.h"
#include "devices/uart.h"
#include "devices/virtio/device.h"
#include "snapshot/load.h"
#include "snapshot/state.h"
#include "vmm/baseline-vm.h"
#include "vmm/restore.h"
#include "vmm/snapshot.h"
#include "vmm/vcpu.h"
#include "vmm/vm.h"

#define NSEC_PER_SEC 1000000000ULL
#define KHZ_PER_GHZ  1000000ULL /* ticks = ns * kHz / 10^6 */

/* ---- before KVM ---------------------------------------------------- */

/*
 * A persistent root: the state file the config names must be the one
 * the snapshot referred to, as it was then (path, size, pages digest).
 * The guest's page cache in the snapshot matches that content only.
 */
static int check_root_state(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	const json_t *ref =
		json_object_get(vm->restore->manifest, SNAP_ROOT_STATE);
	const char *path = json_string_value(json_object_get(ref, "path"));
	const char *want = json_string_value(json_object_get(ref, "sha256"));
	const json_t *bytes = json_object_get(ref, "bytes");
	char hex[SNAP_SHA256_HEX + 1], now[SNAP_SHA256_HEX + 8];
	uint64_t size = disk__layer_bytes(vm->disk);
	int ret;

	if (!path || !want || !json_is_integer(bytes)) {
		pr_err("--restore %s: %s: no %s {path, bytes, sha256}: the "
		       "snapshot has no persistent root's state file",
		       cfg->restore_dir, SNAP_MANIFEST, SNAP_ROOT_STATE);
		return -EINVAL;
	}
	if (strcmp(path, cfg->rootfs.state_path)) {
		pr_err("--restore %s: the snapshot's root state file is %s, "
		       "not %s",
		       cfg->restore_dir, path, cfg->rootfs.state_path);
		return -EINVAL;
	}
	ret = snap_file__pages_sha256(disk__layer_fd(vm->disk), hex);
	if (ret) {
		pr_err("--restore %s: state file %s: %s", cfg->restore_dir,
		       path, strerror(-ret));
		return ret;
	}
	snprintf(now, sizeof(now), "sha256:%s", hex);
	if ((uint64_t)json_integer_value(bytes) != size || strcmp(now, want)) {
		pr_err("--restore %s: state file %s changed since the "
		       "snapshot (now %" PRIu64 " bytes, %s; the snapshot "
		       "has %" JSON_INTEGER_FORMAT " bytes, %.80s): a "
		       "persistent root restores only onto the state file "
		       "as the snapshot left it",
		       cfg->restore_dir, path, size, now,
		       json_integer_value(bytes), want);
		return -EBADMSG;
	}
	return 0;
}

/*
 * A cow root: the block store the config names (connected by the disk
 * step, its hello's state token kept) must hold what it held when the
 * snapshot flushed to it, over the same base. A store that moved on
 * since would mix the guest's page cache with other disk contents.
 */
static int check_root_store(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	const json_t *ref =
		json_object_get(vm->restore->manifest, SNAP_ROOT_STORE);
	const char *base = json_string_value(json_object_get(ref, "base"));
	const char *hex = json_string_value(json_object_get(ref, "token"));
	const struct store_token *now = store_cow__hello_token(vm->store_cow);
	char now_hex[STORE_TOKEN_HEX];
	struct store_token want;

	if (!base || store_proto__token_parse(hex, &want)) {
		pr_err("--restore %s: %s: no %s {socket, base, token}: the "
		       "snapshot has no cow root's block store",
		       cfg->restore_dir, SNAP_MANIFEST, SNAP_ROOT_STORE);
		return -EINVAL;
	}
	if (strcmp(base, vm->rootfs.digest)) {
		pr_err("--restore %s: the snapshot's cow root is over base "
		       "%s, this one over %s",
		       cfg->restore_dir, base, vm->rootfs.digest);
		return -EINVAL;
	}
	store_proto__token_hex(now, now_hex);
	if (!store_proto__token_equal(now, &want)) {
		pr_err("--restore %s: block store %s: its state token is %s, "
		       "the snapshot's %s: %s (a cow root restores only onto "
		       "its store as the snapshot left it)",
		       cfg->restore_dir, cfg->rootfs.store_socket, now_hex, hex,
		       now->len ? "the store moved on since the snapshot" :
				  "the store gives no state token");
		return -EBADMSG;
	}
	return 0;
}

/*
 * The root disk's writable layer (Documentation/snapshots.md, "The root
 * disk"), the disk having been opened by the disk step: an ephemeral
 * one takes a copy of the snapshot's, a persistent one must be as the
 * snapshot left it. A read-only root has none.
 */
static int restore_root(struct vm *vm)
{
	char what[PATH_MAX + 64];

	if (!vm->disk || vm->cfg->rootfs.mode == ROOTFS_READONLY)
		return 0;
	if (vm->cfg->rootfs.mode == ROOTFS_PERSISTENT)
		return check_root_state(vm);
	if (vm->cfg->rootfs.mode == ROOTFS_COW)
		return check_root_store(vm);
	snprintf(what, sizeof(what), "%s: %s", vm->restore_dir,
		 SNAP_LAYER_FILE);
	return disk__load_layer(vm->disk, vm->restore->layer_fd, what);
}

/* A baseline's entry (vm__baseline_open set vm->restore): its layer. */
static int restore_baseline_root(struct vm *vm)
{
	int ret = restore_root(vm);

	if (!ret)
		return 0;
	vm__restore_close(vm);
	return vm__baseline_failed(vm, ret);
}

int vm__restore_open(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	char digest[VM_IDENTITY_DIGEST_LEN], err[CONFIG_ERR_LEN];
	struct snap_expect want = {
		.vmm = KILN_VERSION,
		.identity_digest = digest,
		.vcpus = vm->nr_vcpus,
		.memory_bytes = vm->ram_size,
	};
	json_t *identity = NULL;
	struct snap_load *l;
	int ret;

	if (!cfg->restore_dir)
		return vm->restore ? restore_baseline_root(vm) : 0;
	want.root_layer = vm->disk && cfg->rootfs.mode == ROOTFS_EPHEMERAL;
	ret = vm__snapshot_identity_digest(vm, digest, sizeof(digest),
					   &identity);
	if (ret) {
		pr_err("--restore %s: this config's identity: %s",
		       vm->restore_dir, strerror(-ret));
		return ret;
	}
	want.identity = identity;
	l = calloc(1, sizeof(*l));
	ret = l ? snap_load__open(l, vm->restore_dir, &want, err, sizeof(err)) :
		  -ENOMEM;
	json_decref(identity);
	if (!l)
		return ret;
	if (ret) {
		pr_err("--restore %s: %s", vm->restore_dir, err);
		free(l);
		return ret;
	}
	vm->restore = l;
	ret = restore_root(vm);
	if (ret) {
		vm__restore_close(vm);
		return ret;
	}
	return 0;
}

void vm__restore_close(struct vm *vm)
{
	if (!vm->restore)
		return;
	snap_load__close(vm->restore);
	free(vm->restore);
	vm->restore = NULL;
}

/* ---- the clock ----------------------------------------------------- */

/*
 * The snapshot's clock, and how far the guest's TSC moves on: the real
 * time since it was read, in ticks of the guest's TSC rate (vcpu0's).
 * Without KVM_CLOCK_REALTIME in the saved flags, nothing moves.
 */
static int saved_clock(struct vm *vm, struct kvm_clock_data *clock,
		       uint64_t *tsc_advance)
{
	const struct snap_load *l = vm->restore;
	struct timespec now;
	const void *d;
	uint64_t now_ns;
	uint32_t khz;
	int ret;

	*tsc_advance = 0;
	ret = snap_state__find(l->vm_state.p, l->vm_state.len, SNAP_KIND_VM,
			       SNAP_VM_CLOCK, sizeof(*clock), &d);
	if (ret)
		return ret;
	memcpy(clock, d, sizeof(*clock));
	if (!(clock->flags & KVM_CLOCK_REALTIME) ||
	    clock_gettime(CLOCK_REALTIME, &now))
		return 0;
	now_ns = (uint64_t)now.tv_sec * NSEC_PER_SEC + (uint64_t)now.tv_nsec;
	if (now_ns <= clock->realtime ||
	    snap_state__find(l->vcpu_state[0].p, l->vcpu_state[0].len,
			     SNAP_KIND_VCPU, SNAP_VCPU_TSC_KHZ, sizeof(khz),
			     &d))
		return 0;
	memcpy(&khz, d, sizeof(khz));
	*tsc_advance =
		(uint64_t)((unsigned __int128)(now_ns - clock->realtime) * khz /
			   KHZ_PER_GHZ);
	return 0;
}

/* ---- the VM -------------------------------------------------------- */

static int restore_vm_state(struct vm *vm, const struct kvm_clock_data *saved,
			    const char **what)
{
	static const struct {
		uint32_t chip;
		uint32_t tag;
	} chips[] = {
		{ KVM_IRQCHIP_PIC_MASTER, SNAP_VM_PIC_MASTER },
		{ KVM_IRQCHIP_PIC_SLAVE, SNAP_VM_PIC_SLAVE },
		{ KVM_IRQCHIP_IOAPIC, SNAP_VM_IOAPIC },
	};
	const struct snap_blob *b = &vm->restore->vm_state;
	struct kvm_clock_data clock;
	struct kvm_pit_state2 pit;
	struct uart_regs uart;
	struct kvm_irqchip c;
	const void *d;
	int ret;

	for (unsigned int i = 0; i < ARRAY_SIZE(chips); i++) {
		*what = "an irqchip section";
		ret = snap_state__find(b->p, b->len, SNAP_KIND_VM, chips[i].tag,
				       sizeof(c), &d);
		if (ret)
			return ret;
		memcpy(&c, d, sizeof(c));
		if (c.chip_id != chips[i].chip)
			return -EINVAL;
		*what = "KVM_SET_IRQCHIP";
		if (ioctl(vm->vm_fd, KVM_SET_IRQCHIP, &c) < 0)
			return -errno;
	}
	*what = "the PIT section";
	ret = snap_state__find(b->p, b->len, SNAP_KIND_VM, SNAP_VM_PIT2,
			       sizeof(pit), &d);
	if (ret)
		return ret;
	memcpy(&pit, d, sizeof(pit));
	*what = "KVM_SET_PIT2";
	if (ioctl(vm->vm_fd, KVM_SET_PIT2, &pit) < 0)
		return -errno;
	/* The UART's registers: a snapshot without them leaves the reset's. */
	if (!snap_state__find(b->p, b->len, SNAP_KIND_VM, SNAP_VM_UART,
			      sizeof(uart), &d)) {
		memcpy(&uart, d, sizeof(uart));
		uart__load(vm->uart, &uart);
	}
	/*
	 * Last (api.rst 4.30, KVM_SET_CLOCK): with KVM_CLOCK_REALTIME, KVM
	 * adds the real time elapsed since the saved realtime, so the
	 * guest's kvmclock (its monotonic and wall clocks) resumes at the
	 * time it is now; the other flags are only KVM_GET_CLOCK's.
	 */
	clock = (struct kvm_clock_data){
		.clock = saved->clock,
		.flags = saved->flags & KVM_CLOCK_REALTIME,
		.realtime = saved->realtime,
	};
	*what = "KVM_SET_CLOCK";
	if (ioctl(vm->vm_fd, KVM_SET_CLOCK, &clock) < 0)
		return -errno;
	return 0;
}

/* ---- the devices --------------------------------------------------- */

/* Each attached device from its entry, and every entry's device there. */
static int restore_devices(struct vm *vm)
{
	const json_t *arr = vm->restore->devices;
	bool seen[VIRTIO_MMIO_SLOTS] = { false };
	char err[CONFIG_ERR_LEN];
	const json_t *e;
	size_t i;
	int ret;

	json_array_foreach(arr, i, e)
	{
		json_int_t slot =
			json_integer_value(json_object_get(e, "slot"));
		const char *name =
			json_string_value(json_object_get(e, "name"));
		struct virtio_device *dev;

		if (slot < 0 || slot >= VIRTIO_MMIO_SLOTS || !name ||
		    !vm->virtio[slot].dev || seen[slot] ||
		    strcmp(name, vm->virtio[slot].name)) {
			pr_err("--restore %s: devices.json: entry %zu (%s in "
			       "slot %lld) is not a device of this VM",
			       vm->restore_dir, i, name ? name : "?",
			       (long long)slot);
			return -EINVAL;
		}
		seen[slot] = true;
		dev = vm->virtio[slot].dev;
		ret = virtio_device__restore(dev, e, err, sizeof(err));
		if (ret) {
			pr_err("--restore %s: devices.json: %s",
			       vm->restore_dir, err);
			return ret;
		}
	}
	for (i = 0; i < VIRTIO_MMIO_SLOTS; i++)
		if (vm->virtio[i].dev && !seen[i]) {
			pr_err("--restore %s: devices.json: no state for %s",
			       vm->restore_dir, vm->virtio[i].name);
			return -EINVAL;
		}
	return 0;
}

/* ---- the step ------------------------------------------------------ */

static int restore_state(struct vm *vm)
{
	const struct snap_load *l = vm->restore;
	struct kvm_clock_data clock;
	uint64_t tsc_advance;
	const char *what = "restoring";
	int ret;

	if (!l)
		return 0;
	ret = saved_clock(vm, &clock, &tsc_advance);
	if (ret) {
		pr_err("--restore %s: vm.state: the clock section: %s",
		       vm->restore_dir, strerror(-ret));
		return ret;
	}
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		ret = vcpu__restore(vm->vcpus[i], l->vcpu_state[i].p,
				    l->vcpu_state[i].len, tsc_advance, &what);
		if (ret) {
			pr_err("--restore %s: vcpu%u.state: %s: %s",
			       vm->restore_dir, i, what, strerror(-ret));
			return ret;
		}
	}
	ret = restore_vm_state(vm, &clock, &what);
	if (ret) {
		pr_err("--restore %s: vm.state: %s: %s", vm->restore_dir, what,
		       strerror(-ret));
		return ret;
	}
	/* After the irqchip: the devices' interrupts land in its state. */
	ret = restore_devices(vm);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++)
		if (vm->virtio[i].dev)
			virtio_device__restore_irq(vm->virtio[i].dev);
	/* The guest's init said it was ready before the snapshot. */
	console__guest_ready(vm->console);
	pr_info("restored %s (%u vCPUs, %llu MiB; the clock moved on %llu "
		"TSC ticks)",
		vm->restore_dir, vm->nr_vcpus,
		(unsigned long long)(vm->ram_size >> 20),
		(unsigned long long)tsc_advance);
	/* The state files are set; the memory file stays mapped. */
	return 0;
}

int vm__restore_state(struct vm *vm)
{
	int ret = restore_state(vm);

	/* From a baseline: discard it and boot cold (vmm/baseline-vm.c). */
	if (ret && vm__baseline_restoring(vm))
		return vm__baseline_failed(vm, ret);
	return ret;
}
