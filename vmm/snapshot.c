// SPDX-License-Identifier: GPL-2.0
/*
 * vm.snapshot (Documentation/snapshots.md), on a VM vm.pause paused
 * (vmm/vm-run.c) or paused for it. A snapshot of a paused VM reads
 * every device's state first (a device without a save hook refuses the
 * snapshot before anything is written), then each vCPU's and the VM's
 * KVM state, then writes them, guest memory, the root disk's writable
 * layer (or a reference to a persistent one) and the manifest into an
 * owner-only directory (snapshot/file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/block/store-cow.h"
#include "devices/uart.h"
#include "devices/virtio/device.h"
#include "snapshot/file.h"
#include "snapshot/state.h"
#include "snapshot/verified.h"
#include "vmm/api.h"
#include "vmm/snapshot.h"
#include "vmm/vcpu.h"
#include "vmm/vm-pause.h"
#include "vmm/vm-state.h"
#include "vmm/vm.h"

#define SNAP_NAME_LEN 32 /* "vcpu255.state" */

/* ---- what the snapshot holds -------------------------------------- */

/* Every attached device's state, or the first that cannot be saved. */
static int save_devices(struct vm *vm, json_t **out, char *err, size_t len)
{
	json_t *arr = json_array();
	int ret = 0;

	if (!arr)
		return -ENOMEM;
	for (unsigned int i = 0; !ret && i < VIRTIO_MMIO_SLOTS; i++) {
		struct virtio_device *dev = vm->virtio[i].dev;
		char why[VIRTIO_SAVE_WHY_LEN];
		json_t *st = NULL;

		if (!dev)
			continue;
		ret = virtio_device__save(dev, &st, why, sizeof(why));
		if (ret == -EOPNOTSUPP)
			snprintf(err, len,
				 "%s: this device cannot be saved yet (it has "
				 "no save hook)",
				 dev->name);
		else if (ret)
			snprintf(err, len, "%s: saving its state: %s",
				 dev->name, why[0] ? why : strerror(-ret));
		if (!ret) {
			json_object_set_new(st, "slot", json_integer(i));
			if (json_array_append_new(arr, st))
				ret = -ENOMEM;
		}
	}
	if (ret) {
		json_decref(arr);
		return ret;
	}
	*out = arr;
	return 0;
}

static int save_vm_state(struct vm *vm, struct snap_writer *w,
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
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
	struct uart_regs uart;

	for (unsigned int i = 0; i < 3; i++) {
		struct kvm_irqchip c = { .chip_id = chips[i].chip };

		if (ioctl(vm->vm_fd, KVM_GET_IRQCHIP, &c) < 0) {
			*what = "KVM_GET_IRQCHIP";
			return -errno;
		}
		snap_writer__add(w, chips[i].tag, &c, sizeof(c));
	}
	memset(&pit, 0, sizeof(pit));
	if (ioctl(vm->vm_fd, KVM_GET_PIT2, &pit) < 0) {
		*what = "KVM_GET_PIT2";
		return -errno;
	}
	snap_writer__add(w, SNAP_VM_PIT2, &pit, sizeof(pit));
	uart__save(vm->uart, &uart);
	snap_writer__add(w, SNAP_VM_UART, &uart, sizeof(uart));
	/* Last: the guest's clock at the moment the rest was read. */
	memset(&clock, 0, sizeof(clock));
	if (ioctl(vm->vm_fd, KVM_GET_CLOCK, &clock) < 0) {
		*what = "KVM_GET_CLOCK";
		return -errno;
	}
	snap_writer__add(w, SNAP_VM_CLOCK, &clock, sizeof(clock));
	*what = "saving";
	return w->err;
}

static int add_digest(json_t *o, const char *key, const void *p, size_t n)
{
	char hex[SNAP_SHA256_HEX + 1], val[SNAP_SHA256_HEX + 8];
	int ret = sha256__hex(p, n, hex);

	if (ret)
		return ret;
	snprintf(val, sizeof(val), "sha256:%s", hex);
	return json_object_set_new(o, key, json_string(val)) ? -ENOMEM : 0;
}

/* The verification cache's name for a boot file's digest (a memo). */
#define BOOT_FILE_MEMO "file-sha256"

/*
 * The digest of a boot file, from the descriptor kept since the boot,
 * into hex once: the verification cache's memo for the file as it is,
 * or a hash, noted in the cache when may_note (before any seccomp
 * filter: the restore and baseline lookups; a snapshot under the API
 * filter only reads it).
 */
static int boot_file_hex(int fd, char hex[SNAP_SHA256_HEX + 1], bool may_note)
{
	struct stat st;
	int ret;

	if (hex[0])
		return 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (verified__recall(&st, BOOT_FILE_MEMO, hex, SNAP_SHA256_HEX + 1) &&
	    strlen(hex) == SNAP_SHA256_HEX)
		return 0;
	ret = snap_file__sha256(fd, hex);
	if (ret) {
		hex[0] = '\0';
		return ret;
	}
	if (may_note)
		verified__note(fd, &st, BOOT_FILE_MEMO, hex, "a boot file");
	return 0;
}

/* The file's digest as key (see boot_file_hex). */
static int file_digest(json_t *o, const char *key, int fd,
		       char hex[SNAP_SHA256_HEX + 1], bool may_note)
{
	char val[SNAP_SHA256_HEX + 8];
	int ret;

	if (fd < 0)
		return 0;
	ret = boot_file_hex(fd, hex, may_note);
	if (ret)
		return ret;
	snprintf(val, sizeof(val), "sha256:%s", hex);
	return json_object_set_new(o, key, json_string(val)) ? -ENOMEM : 0;
}

/*
 * What a restore must find the same (Documentation/snapshots.md,
 * "Identity"): what the guest was booted from (the kernel, the initrd
 * with the archive the monitor appended, the command line), its shape
 * (vCPUs, memory, devices by slot, mounts, network) and this monitor's
 * version. The digest is of its compact JSON with sorted keys.
 */
static int identity(struct vm *vm, bool may_note, json_t **out)
{
	const struct vm_config *c = vm->cfg;
	json_t *o, *devs, *mounts;
	char val[SNAP_SHA256_HEX + 8];
	int ret;

	o = json_pack("{s:s, s:I, s:I, s:s, s:i}", "vmm", KILN_VERSION, "cpus",
		      (json_int_t)c->nr_cpus, "memoryMiB",
		      (json_int_t)c->mem_mib, "cmdline",
		      vm->snap_cmdline ? vm->snap_cmdline : "", "net",
		      (int)c->net.mode);
	devs = json_array();
	mounts = json_array();
	if (!o || !devs || !mounts) {
		ret = -ENOMEM;
		goto out_fail;
	}
	ret = file_digest(o, "kernel", vm->snap_kernel_fd, vm->snap_kernel_hex,
			  may_note);
	if (!ret)
		ret = file_digest(o, "initrd", vm->snap_initrd_fd,
				  vm->snap_initrd_hex, may_note);
	if (!ret && vm->snap_appended[0]) {
		snprintf(val, sizeof(val), "sha256:%s", vm->snap_appended);
		json_object_set_new(o, "initrdAppended", json_string(val));
	}
	if (ret)
		goto out_fail;
	if (c->rootfs.descriptor)
		json_object_set_new(o, "rootfs",
				    json_pack("{s:s, s:s, s:i}", "image",
					      vm->rootfs.name, "digest",
					      vm->rootfs.digest, "mode",
					      (int)c->rootfs.mode));
	for (unsigned int i = 0; i < VIRTIO_MMIO_SLOTS; i++)
		if (vm->virtio[i].name[0])
			json_array_append_new(devs,
					      json_pack("{s:I, s:s}", "slot",
							(json_int_t)i, "name",
							vm->virtio[i].name));
	for (unsigned int i = 0; i < c->mounts.nr; i++)
		json_array_append_new(
			mounts, json_pack("{s:s, s:i}", "guestPath",
					  c->mounts.m[i].guest_path, "type",
					  (int)c->mounts.m[i].type));
	json_object_set_new(o, "devices", devs);
	json_object_set_new(o, "mounts", mounts);
	*out = o;
	return 0;

out_fail:
	json_decref(mounts);
	json_decref(devs);
	json_decref(o);
	return ret;
}

int vm__snapshot_keep_boot(struct vm *vm)
{
	char hex[SNAP_SHA256_HEX + 1];
	int ret;

	if (!vm->cfg->control_socket)
		return 0;
	vm->snap_kernel_fd =
		open(vm->cfg->kernel_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (vm->snap_kernel_fd < 0)
		return -errno;
	if (vm->initrd_fd >= 0) {
		vm->snap_initrd_fd = fcntl(vm->initrd_fd, F_DUPFD_CLOEXEC, 0);
		if (vm->snap_initrd_fd < 0)
			return -errno;
	}
	vm->snap_cmdline = strdup(vm->cmdline ? vm->cmdline : "");
	if (!vm->snap_cmdline)
		return -ENOMEM;
	if (vm->argv_cpio_len) {
		ret = sha256__hex(vm->argv_cpio, vm->argv_cpio_len, hex);
		if (ret)
			return ret;
		snprintf(vm->snap_appended, sizeof(vm->snap_appended), "%s",
			 hex);
	}
	return 0;
}

void vm__snapshot_drop_boot(struct vm *vm)
{
	if (vm->snap_kernel_fd >= 0)
		close(vm->snap_kernel_fd);
	if (vm->snap_initrd_fd >= 0)
		close(vm->snap_initrd_fd);
	vm->snap_kernel_fd = vm->snap_initrd_fd = -1;
	vm->snap_kernel_hex[0] = vm->snap_initrd_hex[0] = '\0';
	free(vm->snap_cmdline);
	vm->snap_cmdline = NULL;
}

/* The manifest's fields besides format and parts. */
static int manifest_fields(struct vm *vm, bool may_note, json_t **out)
{
	json_t *id = NULL, *m;
	char *text;
	int ret;

	ret = identity(vm, may_note, &id);
	if (ret)
		return ret;
	text = json_dumps(id, JSON_COMPACT | JSON_SORT_KEYS);
	m = json_pack("{s:s, s:I, s:I, s:I, s:o}", "vmm", KILN_VERSION,
		      "created", (json_int_t)time(NULL), "vcpus",
		      (json_int_t)vm->nr_vcpus, "memoryBytes",
		      (json_int_t)vm->ram_size, "identity", id);
	ret = !text || !m ? -ENOMEM :
			    add_digest(m, "identityDigest", text, strlen(text));
	free(text);
	if (ret) {
		json_decref(m);
		return ret;
	}
	*out = m;
	return 0;
}

int vm__snapshot_identity_digest(struct vm *vm, char *out, size_t len,
				 json_t **identity)
{
	json_t *m = NULL;
	int ret;

	/* Called before any seccomp filter (restore-check, baseline). */
	ret = manifest_fields(vm, true, &m);
	if (ret)
		return ret;
	snprintf(out, len, "%s",
		 json_string_value(json_object_get(m, "identityDigest")));
	if (identity)
		*identity = json_incref(json_object_get(m, "identity"));
	json_decref(m);
	return 0;
}

/* ---- writing ------------------------------------------------------ */

static int write_state(struct snap_dir *d, const char *file, const char *kind,
		       struct snap_writer *w, char *err, size_t len)
{
	return snap_dir__write_part(d, file, kind, w->buf, w->len, err, len);
}

static int write_vcpus(struct vm *vm, struct snap_dir *d, char *err, size_t len)
{
	char name[SNAP_NAME_LEN];
	int ret = 0;

	for (unsigned int i = 0; !ret && i < vm->nr_vcpus; i++) {
		const char *what = "saving";
		struct snap_writer w;

		snap_writer__init(&w, SNAP_KIND_VCPU);
		ret = vcpu__save(vm->vcpus[i], &w, &what);
		if (ret)
			snprintf(err, len, "vcpu%u: %s: %s", i, what,
				 strerror(-ret));
		snprintf(name, sizeof(name), "vcpu%u.state", i);
		if (!ret)
			ret = write_state(d, name, "vcpu", &w, err, len);
		snap_writer__release(&w);
	}
	return ret;
}

/*
 * A cow root (Documentation/snapshots.md, "The root disk"): its changes
 * are its block store's, so the snapshot flushes every dirty block to it
 * (as the guest's FLUSH would, waiting for the acknowledgement) and asks
 * the store's state token, before anything is written. The paused block
 * device has no job in flight. A store that gives no token refuses it.
 */
static int settle_root_store(struct vm *vm, struct store_token *t, char *err,
			     size_t len)
{
	char why[512];
	int ret;

	t->len = 0;
	if (!vm->store_cow || vm->cfg->rootfs.mode != ROOTFS_COW)
		return 0;
	ret = store_cow__settle(vm->store_cow, t, why, sizeof(why));
	if (ret)
		snprintf(err, len, "the cow root's store %s: %s",
			 vm->cfg->rootfs.store_socket, why);
	return ret;
}

/* The store a cow root's snapshot holds to: {socket, base, token}. */
static int write_root_store(struct vm *vm, const struct store_token *t,
			    json_t *fields)
{
	char hex[STORE_TOKEN_HEX];
	json_t *ref;

	store_proto__token_hex(t, hex);
	ref = json_pack("{s:s, s:s, s:s}", "socket",
			vm->cfg->rootfs.store_socket, "base", vm->rootfs.digest,
			"token", hex);
	if (!ref || json_object_set_new(fields, SNAP_ROOT_STORE, ref))
		return -ENOMEM;
	return 0;
}

/*
 * The root disk's writable layer (Documentation/snapshots.md, "The root
 * disk"), read while the VM is paused, so its block device has nothing
 * in flight. Ephemeral: a sparse copy of the memfd, a part. Persistent:
 * a reference to the state file, its pages digest now, into fields.
 * Cow: a reference to its store and the token settle_root_store got.
 * Read-only, or no root disk: nothing.
 */
static int write_root_layer(struct vm *vm, struct snap_dir *d, json_t *fields,
			    const struct store_token *t, char *err, size_t len)
{
	const struct rootfs_config *r = &vm->cfg->rootfs;
	char hex[SNAP_SHA256_HEX + 1], digest[SNAP_SHA256_HEX + 8];
	int fd = vm->disk ? disk__layer_fd(vm->disk) : -1;
	uint64_t bytes = vm->disk ? disk__layer_bytes(vm->disk) : 0;
	json_t *ref;
	int ret;

	if (fd < 0 || r->mode == ROOTFS_READONLY)
		return 0;
	/* Its layer is a cache of the store's: the store is what counts. */
	if (r->mode == ROOTFS_COW)
		return write_root_store(vm, t, fields);
	if (r->mode == ROOTFS_EPHEMERAL)
		return snap_dir__write_sparse(d, SNAP_LAYER_FILE,
					      SNAP_LAYER_KIND, fd, bytes, err,
					      len);
	ret = snap_file__pages_sha256(fd, hex);
	if (ret) {
		snprintf(err, len, "state file %s: %s", r->state_path,
			 strerror(-ret));
		return ret;
	}
	snprintf(digest, sizeof(digest), "sha256:%s", hex);
	ref = json_pack("{s:s, s:I, s:s}", "path", r->state_path, "bytes",
			(json_int_t)bytes, "sha256", digest);
	if (!ref || json_object_set_new(fields, SNAP_ROOT_STATE, ref))
		return -ENOMEM;
	return 0;
}

static int write_snapshot(struct vm *vm, const char *dir, json_t *devices,
			  char *err, size_t len)
{
	const char *what = "saving";
	struct store_token token;
	struct snap_writer w;
	struct snap_dir d;
	json_t *fields = NULL;
	char *text;
	int ret;

	ret = settle_root_store(vm, &token, err, len);
	if (!ret)
		ret = snap_dir__create(&d, dir, err, len);
	if (ret)
		return ret;
	ret = write_vcpus(vm, &d, err, len);
	if (!ret) {
		snap_writer__init(&w, SNAP_KIND_VM);
		ret = save_vm_state(vm, &w, &what);
		if (ret)
			snprintf(err, len, "the VM: %s: %s", what,
				 strerror(-ret));
		else
			ret = write_state(&d, "vm.state", "vm", &w, err, len);
		snap_writer__release(&w);
	}
	if (!ret) {
		text = json_dumps(devices, JSON_INDENT(2) | JSON_SORT_KEYS);
		ret = text ? snap_dir__write_part(&d, "devices.json", "devices",
						  text, strlen(text), err,
						  len) :
			     -ENOMEM;
		free(text);
	}
	if (!ret)
		ret = snap_dir__write_memory(&d, "memory.raw", vm->ram,
					     vm->ram_size, err, len);
	if (!ret) {
		ret = manifest_fields(vm, false, &fields);
		if (ret)
			snprintf(err, len, "the manifest: %s", strerror(-ret));
	}
	if (!ret)
		ret = write_root_layer(vm, &d, fields, &token, err, len);
	if (!ret)
		ret = snap_dir__finish(&d, fields, err, len);
	json_decref(fields);
	snap_dir__close(&d);
	if (ret == -ENOMEM && !err[0])
		snprintf(err, len, "out of memory");
	return ret;
}

int vm__snapshot(struct vm *vm, const char *dir, bool resume, char *err,
		 size_t len)
{
	bool was_paused = vm_state__get(&vm->lc) == VM_STATE_PAUSED;
	json_t *devices = NULL;
	char rerr[128];
	int ret = 0;

	err[0] = '\0';
	if (!was_paused)
		ret = vm__pause(vm, err, len);
	if (ret)
		return ret;
	ret = save_devices(vm, &devices, err, len);
	if (!ret)
		ret = write_snapshot(vm, dir, devices, err, len);
	json_decref(devices);
	if (!ret)
		api__event(vm->api, "snapshot", json_pack("{s:s}", "dir", dir));
	if ((ret && !was_paused) || (!ret && resume)) {
		if (vm__resume(vm, rerr, sizeof(rerr)))
			pr_warn("vm.snapshot: resuming: %s", rerr);
	}
	if (!ret)
		pr_info("vm.snapshot: %s written (%u vCPUs, %llu MiB)%s", dir,
			vm->nr_vcpus, (unsigned long long)(vm->ram_size >> 20),
			resume ? ", resumed" : ", paused");
	return ret;
}
