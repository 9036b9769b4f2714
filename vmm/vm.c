// SPDX-License-Identifier: GPL-2.0
/*
 * The VM builder and lifecycle. vm__create runs an explicit table of steps,
 * undoing the ones done in reverse when one fails; vm__destroy runs every
 * undo. Each step reports its own failure, once, naming what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/block/disk.h"
#include "devices/console.h"
#include "devices/fs/backend.h"
#include "devices/uart.h"
#include "devices/virtio/blk.h"
#include "devices/virtio/fs.h"
#include "devices/virtio/vsock.h"
#include "lib/compiler.h"
#include "lib/nofile.h"
#include "proto/initramfs.h"
#include "snapshot/load.h"
#include "vmm/baseline-vm.h"
#include "vmm/console-log.h"
#include "vmm/control.h"
#include "vmm/cpuid.h"
#include "vmm/jail.h"
#include "vmm/kvm.h"
#include "vmm/metrics.h"
#include "vmm/mounts.h"
#include "vmm/restore.h"
#include "vmm/seccomp.h"
#include "vmm/snapshot.h"
#include "vmm/trace-startup.h"
#include "vmm/vcpu.h"
#include "vmm/vm-metrics.h"
#include "vmm/vm-state.h"
#include "vmm/vm.h"

/* Above RAM and the devices, below 4 GiB: what KVM needs on Intel. */
#define KVM_TSS_ADDR	      0xfffbd000ULL
#define KVM_IDENTITY_MAP_ADDR 0xfffbc000ULL

#define KILN_CMDLINE_DEFAULT                                     \
	"console=ttyS0 reboot=k panic=-1 quiet 8250.nr_uarts=1 " \
	"i8042.noaux i8042.nokbd"
#define KILN_CMDLINE_RAW " kiln.console=raw"

#define PIO_LIMIT     0x10000 /* x86 has 64 KiB of I/O ports */
#define MEM_SLOT_LOW  0
#define MEM_SLOT_HIGH 1

/* ---- step: slots ------------------------------------------------------ */

/* The control API reaches the agent through vsock, socket or not. */
static bool has_vsock(const struct vm *vm)
{
	return vm->cfg->vsock.socket_path || vm__has_agent(vm);
}

/*
 * A virtio-mmio slot for each device the config asks for, before anything
 * is built: the kernel command line declares them. Undone by
 * vm__release_virtio.
 */
static int slots_init(struct vm *vm)
{
	char name[24]; /* "virtio-fs7" */
	int ret = 0;

	if (vm->cfg->rootfs.descriptor)
		ret = vm__reserve_virtio(vm, VIRTIO_SLOT_BLK, "virtio-blk0");
	if (!ret && has_vsock(vm))
		ret = vm__reserve_virtio(vm, VIRTIO_SLOT_VSOCK,
					 "virtio-vsock0");
	for (unsigned int i = 0; !ret && i < vm->cfg->mounts.nr; i++) {
		snprintf(name, sizeof(name), "virtio-fs%u", i);
		ret = vm__reserve_virtio(vm, VIRTIO_SLOT_FS0 + i, name);
	}
	if (!ret && vm->cfg->net.mode != NET_NONE)
		ret = vm__reserve_virtio(vm, VIRTIO_SLOT_NET, "virtio-net0");
	return ret;
}

/* ---- step: image ------------------------------------------------------ */

_Static_assert(VSOCK_MAX_GUEST_CID == CONFIG_MAX_VSOCK_CID &&
		       VSOCK_DEFAULT_GUEST_CID == CONFIG_DEFAULT_VSOCK_CID,
	       "vsock CID range");

/*
 * Each reserved virtio slot's declaration, then the network's and the
 * root disk's parts for the init.
 */
static int root_cmdline(const struct vm *vm, char *buf, size_t len)
{
	const struct rootfs_config *r = &vm->cfg->rootfs;
	size_t at = 0;
	int ret, m;

	buf[0] = '\0';
	ret = vm__virtio_cmdline(vm, buf, len, &at);
	if (!ret) {
		ret = netcfg__cmdline(&vm->cfg->net, buf + at, len - at);
		at += strlen(buf + at);
	}
	if (!ret && vm__has_agent(vm)) {
		m = snprintf(buf + at, len - at, " kiln.agent=on");
		if (m < 0 || (size_t)m >= len - at)
			return -ENOSPC;
		at += m;
	}
	if (ret || !r->descriptor)
		return ret;
	m = snprintf(buf + at, len - at, " kiln.root=vda kiln.rootflags=%s",
		     r->mode == ROOTFS_READONLY ? "ro" : "rw");
	return m < 0 || (size_t)m >= len - at ? -ENOSPC : 0;
}

static int build_cmdline(struct vm *vm)
{
	const char *user = vm->cfg->cmdline;
	char root[1024];
	size_t len;
	int ret;

	ret = root_cmdline(vm, root, sizeof(root));
	if (ret)
		return ret;
	len = sizeof(KILN_CMDLINE_DEFAULT) + sizeof(KILN_CMDLINE_RAW) +
	      strlen(root) + (user ? strlen(user) + 1 : 0);
	vm->cmdline = malloc(len);
	if (!vm->cmdline)
		return -ENOMEM;
	/* The user's words come last: the kernel and init take the last. */
	snprintf(vm->cmdline, len, "%s%s%s%s%s", KILN_CMDLINE_DEFAULT,
		 isatty(STDIN_FILENO) ? "" : KILN_CMDLINE_RAW, root,
		 user ? " " : "", user ? user : "");
	return 0;
}

static int open_initrd(struct vm *vm)
{
	const char *path = vm->cfg->initrd_path;
	struct stat st;
	int ret;

	if (!path)
		return 0;
	vm->initrd_fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (vm->initrd_fd < 0 || fstat(vm->initrd_fd, &st) < 0) {
		ret = -errno;
		pr_err("%s: %s", path, strerror(errno));
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		pr_err("%s: %s", path,
		       S_ISDIR(st.st_mode) ? "is a directory" :
					     "not a regular file");
		return -EINVAL;
	}
	vm->initrd_file_size = st.st_size;
	return 0;
}

/*
 * The archive appended to the initrd (proto/initramfs.h): the command,
 * the virtio-fs mounts, the interception CA and its subject hash,
 * whichever the VM has, and the boot's hostname and working directory.
 */
static int kiln_archive(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	struct initrd_file files[7];
	uint8_t *mounts = NULL;
	size_t mounts_len = 0, argv_len = 0;
	unsigned int nr = 0;
	char *argv = NULL;
	int ret;

	ret = mounts__manifest(&cfg->mounts, &mounts, &mounts_len);
	if (!ret && cfg->argv)
		ret = initrd__join_argv(cfg->argv, &argv, &argv_len);
	if (ret)
		goto out;
	if (cfg->argv)
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_ARGV, argv,
						    argv_len };
	if (mounts_len)
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_MOUNTS,
						    mounts, mounts_len };
	if (vm->guest_ca_len)
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_CA,
						    vm->guest_ca_pem,
						    vm->guest_ca_len };
	if (vm->guest_ca_len && vm->guest_ca_hash[0])
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_CA_HASH,
						    vm->guest_ca_hash,
						    strlen(vm->guest_ca_hash) };
	if (vm->guest_ca_len && !vm_net__guest_ca_required(vm))
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_CA_OPTIONAL,
						    "1", 1 };
	if (cfg->hostname)
		files[nr++] = (struct initrd_file){ KILN_INITRAMFS_HOSTNAME,
						    cfg->hostname,
						    strlen(cfg->hostname) };
	if (cfg->cwd)
		files[nr++] =
			(struct initrd_file){ KILN_INITRAMFS_CWD, cfg->cwd,
					      strlen(cfg->cwd) };
	ret = initrd__archive(KILN_INITRAMFS_DIR, files, nr, &vm->argv_cpio,
			      &vm->argv_cpio_len);
out:
	free(argv);
	free(mounts);
	return ret;
}

static uint64_t initrd_total(const struct vm *vm)
{
	uint64_t pad = (4 - vm->initrd_file_size % 4) % 4;

	if (!vm->initrd_file_size && !vm->argv_cpio_len)
		return 0;
	return vm->initrd_file_size + pad + vm->argv_cpio_len;
}

/* Name what a failed boot plan could not fit. */
static const char *plan_culprit(const struct vm *vm, int err)
{
	if (err == -E2BIG)
		return "--cmdline";
	if (vm->kernel.load_end > vm->plan.low_ram || !vm->cfg->initrd_path)
		return vm->cfg->kernel_path;
	return vm->cfg->initrd_path;
}

static int image_init(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	const char *why;
	int ret;

	ret = kernel__open(&vm->kernel, cfg->kernel_path, &why);
	if (ret) {
		pr_err("%s: %s", cfg->kernel_path, why);
		return ret;
	}
	ret = open_initrd(vm);
	if (ret)
		return ret;
	/*
	 * The guest trusts the interception CA when the policy it boots
	 * with can intercept (http grants, a hook) or net.interceptCa asks
	 * (vmm/vm-net.c); a root without a trust store then fails closed,
	 * unless only a hook could intercept (KILN_INITRAMFS_CA_OPTIONAL).
	 */
	if (!vm_net__guest_ca(vm, &vm->guest_ca_pem, &vm->guest_ca_len,
			      vm->guest_ca_hash, sizeof(vm->guest_ca_hash)))
		pr_debug("the interception CA goes to the guest");
	if (cfg->argv || cfg->mounts.nr || vm->guest_ca_len || cfg->hostname ||
	    cfg->cwd) {
		ret = kiln_archive(vm);
		if (ret) {
			pr_err("the boot's archive (command, mounts, CA, identity): %s",
			       strerror(-ret));
			return ret;
		}
	}
	ret = build_cmdline(vm);
	if (ret)
		return ret;
	ret = boot__plan(&vm->plan, &vm->kernel, vm->ram_size, initrd_total(vm),
			 strlen(vm->cmdline), &why);
	if (ret) {
		pr_err("%s: %s (%llu MiB of memory)", plan_culprit(vm, ret),
		       why, (unsigned long long)cfg->mem_mib);
		return ret;
	}
	vm->boot_entry = vm->kernel.entry;
	return 0;
}

/* What a snapshot's identity needs once boot_init released the files. */
static int snapshot_identity_init(struct vm *vm)
{
	int ret = vm__snapshot_keep_boot(vm);

	if (ret)
		pr_err("keeping the boot's files for snapshots: %s",
		       strerror(-ret));
	return ret;
}

static void image_exit(struct vm *vm)
{
	kernel__close(&vm->kernel);
	if (vm->initrd_fd >= 0)
		close(vm->initrd_fd);
	vm->initrd_fd = -1;
	free(vm->argv_cpio);
	vm->argv_cpio = NULL;
	free(vm->cmdline);
	vm->cmdline = NULL;
}

/* ---- step: mounts ------------------------------------------------------- */

/*
 * Each mount's host side (a directory opened, a server connected) before
 * KVM is touched, like the disk: bad input fails here, once, by name.
 */
static int mounts_init(struct vm *vm)
{
	unsigned int i;
	int ret;

	for (i = 0; i < vm->cfg->mounts.nr; i++) {
		/* The backend reports its own errors, naming the mount. */
		ret = mounts__create_backend(&vm->cfg->mounts.m[i], i, &vm->fds,
					     &vm->fs_backend[i]);
		if (ret)
			return ret;
	}
	return 0;
}

/* The backends no device took over (the build stopped before). */
static void mounts_exit(struct vm *vm)
{
	for (unsigned int i = 0; i < MOUNTS_MAX; i++) {
		fs_backend__destroy(vm->fs_backend[i]);
		vm->fs_backend[i] = NULL;
	}
}

/* ---- step: disk --------------------------------------------------------- */

static const enum disk_mode disk_modes[] = {
	[ROOTFS_EPHEMERAL] = DISK_EPHEMERAL,
	[ROOTFS_READONLY] = DISK_READONLY,
	[ROOTFS_PERSISTENT] = DISK_PERSISTENT,
	/* The local layer of a cow root; its cap is the store layer's. */
	[ROOTFS_COW] = DISK_EPHEMERAL,
};

/*
 * A cow root: its block store says hello (base, block size, the single
 * writer's claim) and lists its blocks before the guest exists.
 */
static int store_open(struct vm *vm)
{
	const struct rootfs_config *r = &vm->cfg->rootfs;
	struct store_params sp = {
		.socket_path = r->store_socket,
		.base = vm->rootfs.digest,
		.nr_blocks = vm->rootfs.size_bytes / STORE_BLOCK_SIZE,
		.claim = true,
	};
	struct store_cow_params cp = {
		.name = "rootfs",
		.disk = vm->disk,
		.max_dirty_bytes = r->max_dirty_bytes,
	};
	char err[512];
	int ret;

	ret = store__connect(&cp.store, &sp, err, sizeof(err));
	if (!ret)
		ret = store_cow__open(&vm->store_cow, &cp, err, sizeof(err));
	if (ret)
		pr_err("rootfs block store \"%s\": %s", r->store_socket, err);
	return ret;
}

/*
 * The root image is checked (descriptor, size, digest) and its writable
 * layer opened before KVM is touched: a bad image costs no VM.
 */
static int disk_init(struct vm *vm)
{
	const struct rootfs_config *r = &vm->cfg->rootfs;
	struct disk_params p;
	char err[CONFIG_ERR_LEN];
	int ret;

	if (!r->descriptor)
		return 0;
	/* config__validate has checked the descriptor and the state path. */
	ret = rootfs__load(&vm->rootfs, r->descriptor, err, sizeof(err));
	if (!ret)
		ret = r->verify_full ?
			      rootfs__verify_full(&vm->rootfs, err,
						  sizeof(err)) :
			      rootfs__verify(&vm->rootfs, err, sizeof(err));
	if (ret) {
		pr_err("%s", err);
		return ret;
	}
	p = (struct disk_params){
		.base_path = vm->rootfs.path,
		.base_format =
			vm->rootfs.qcow2 ? DISK_FORMAT_QCOW2 : DISK_FORMAT_RAW,
		.base_size = vm->rootfs.size_bytes,
		.base_digest = vm->rootfs.digest,
		.mode = disk_modes[r->mode],
		.state_path = r->state_path,
		.max_dirty_bytes =
			r->mode == ROOTFS_COW ? 0 : r->max_dirty_bytes,
		.direct = r->direct,
	};
	ret = disk__open(&vm->disk, &p); /* reports its own errors */
	if (!ret && r->mode == ROOTFS_COW)
		ret = store_open(vm);
	return ret;
}

static void disk_exit(struct vm *vm)
{
	store_cow__close(vm->store_cow);
	vm->store_cow = NULL;
	disk__close(vm->disk);
	vm->disk = NULL;
	rootfs__free(&vm->rootfs);
}

/* ---- step: kvm ---------------------------------------------------------- */

/*
 * An idle vCPU that polls before it sleeps burns a host CPU for every
 * halt: at high density that CPU belongs to another VM. Best effort: older
 * kernels lack the capability and keep their module-wide default.
 */
static void disable_halt_polling(struct vm *vm)
{
	struct kvm_enable_cap cap = { .cap = KVM_CAP_HALT_POLL };

	if (ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_HALT_POLL) <= 0)
		return;
	if (ioctl(vm->vm_fd, KVM_ENABLE_CAP, &cap) < 0)
		pr_debug("KVM_CAP_HALT_POLL: %s", strerror(errno));
}

/* What a snapshot will read, asked while any ioctl may still be made. */
static int snapshot_probe(struct vm *vm)
{
	int ret;

	ret = kvm__msr_index_list(vm->kvm_fd, &vm->msr_list);
	if (ret) {
		pr_err("/dev/kvm: KVM_GET_MSR_INDEX_LIST: %s", strerror(-ret));
		return ret;
	}
	ret = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);
	vm->xsave_size = ret > 0 ? ret : 0;
	vm->has_xsave =
		ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE) > 0;
	vm->has_xcrs = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XCRS) > 0;
	vm->host_svm = cpuid__host_is_svm();
	return 0;
}

static int kvm_init(struct vm *vm)
{
	const char *why;
	int ret;

	kvm__warn_if_software();
	ret = kvm__open(&vm->kvm_fd, &why);
	if (ret) {
		pr_err("/dev/kvm: %s", why);
		return ret;
	}
	vm->vcpu_mmap_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (vm->vcpu_mmap_size < (int)sizeof(struct kvm_run)) {
		pr_err("/dev/kvm: KVM_GET_VCPU_MMAP_SIZE: %s", strerror(errno));
		return -EINVAL;
	}
	ret = kvm__supported_cpuid(vm->kvm_fd, &vm->cpuid);
	if (ret) {
		pr_err("/dev/kvm: KVM_GET_SUPPORTED_CPUID: %s", strerror(-ret));
		return ret;
	}
	vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0) {
		ret = -errno;
		pr_err("/dev/kvm: KVM_CREATE_VM: %s", strerror(errno));
		return ret;
	}
	disable_halt_polling(vm);
	ret = snapshot_probe(vm);
	if (ret)
		return ret;
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, KVM_TSS_ADDR) < 0 ||
	    ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR,
		  &(uint64_t){ KVM_IDENTITY_MAP_ADDR }) < 0) {
		ret = -errno;
		pr_err("/dev/kvm: setting the TSS/identity map: %s",
		       strerror(errno));
		return ret;
	}
	return 0;
}

static void kvm_exit(struct vm *vm)
{
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	if (vm->kvm_fd >= 0)
		close(vm->kvm_fd);
	vm->vm_fd = vm->kvm_fd = -1;
	free(vm->cpuid);
	vm->cpuid = NULL;
	free(vm->msr_list);
	vm->msr_list = NULL;
}

/* ---- step: memory ------------------------------------------------------- */

static int set_slot(struct vm *vm, uint32_t slot, uint64_t gpa, uint64_t size,
		    void *host)
{
	struct kvm_userspace_memory_region r = {
		.slot = slot,
		.guest_phys_addr = gpa,
		.memory_size = size,
		.userspace_addr = (uintptr_t)host,
	};

	return ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0 ? -errno :
								      0;
}

static int memory_init(struct vm *vm)
{
	int ret;

	/*
	 * Only touched pages cost host memory: that is the density story.
	 * A restore maps the snapshot's memory file privately instead: a
	 * page loads on first touch, from the page cache every VM restored
	 * from the same file shares until it writes the page.
	 */
	if (vm->restore)
		vm->ram = mmap(NULL, vm->ram_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_NORESERVE, vm->restore->mem_fd,
			       0);
	else
		vm->ram = mmap(NULL, vm->ram_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			       0);
	if (vm->ram == MAP_FAILED) {
		vm->ram = NULL;
		ret = -errno;
		pr_err("guest memory (%llu MiB): %s",
		       (unsigned long long)vm->cfg->mem_mib, strerror(errno));
		return ret;
	}
	madvise(vm->ram, vm->ram_size, MADV_DONTFORK);
	ret = set_slot(vm, MEM_SLOT_LOW, 0, vm->plan.low_ram, vm->ram);
	if (!ret && vm->plan.high_ram)
		ret = set_slot(vm, MEM_SLOT_HIGH, MMIO_GAP_END,
			       vm->plan.high_ram, vm->ram + vm->plan.low_ram);
	if (ret) {
		pr_err("KVM_SET_USER_MEMORY_REGION: %s", strerror(-ret));
		return ret;
	}
	guest_mem__init(&vm->mem);
	ret = guest_mem__add(&vm->mem, 0, vm->plan.low_ram, vm->ram);
	if (!ret && vm->plan.high_ram)
		ret = guest_mem__add(&vm->mem, MMIO_GAP_END, vm->plan.high_ram,
				     vm->ram + vm->plan.low_ram);
	return ret;
}

static void memory_exit(struct vm *vm)
{
	if (vm->ram)
		munmap(vm->ram, vm->ram_size);
	vm->ram = NULL;
}

/* ---- step: irqchip ------------------------------------------------------ */

static int irqchip_init(struct vm *vm)
{
	struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
	int ret;

	if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0 ||
	    ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
		ret = -errno;
		pr_err("/dev/kvm: creating the in-kernel irqchip and PIT: %s",
		       strerror(errno));
		return ret;
	}
	return 0;
}

void vm__irq_line(void *opaque, unsigned int gsi, int level)
{
	struct vm *vm = opaque;
	struct kvm_irq_level irq = { .irq = gsi, .level = level };

	if (ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq) < 0)
		pr_debug("KVM_IRQ_LINE %u: %s", gsi, strerror(errno));
}

/* ---- step: devices ------------------------------------------------------ */

static void sys_ready(void *opaque)
{
	struct vm *vm = opaque;
	uint64_t one = 1;

	pr_debug("guest init is ready for console input");
	console__guest_ready(vm->console);
	if (write(vm->event_fd, &one, sizeof(one)) < 0)
		pr_debug("event_fd: %s", strerror(errno));
}

/* On a vCPU's thread: reported to the run loop (vmm/vm-state.h). */
static void sys_exit(void *opaque, uint32_t status)
{
	struct vm *vm = opaque;

	vm_state__report_exit(&vm->lc, VM_STOP_GUEST_EXIT, status, NULL);
}

static void sys_reset(void *opaque)
{
	struct vm *vm = opaque;

	vm_state__report_exit(&vm->lc, VM_STOP_GUEST_RESET, 0,
			      "guest reset the machine");
}

static const struct exit_dev_ops sys_ops = {
	.ready = sys_ready,
	.exit = sys_exit,
};

static int blk_start(void *dev, const struct sock_fprog *filter)
{
	return virtio_blk__start(dev, filter);
}

static void blk_destroy(void *dev)
{
	virtio_blk__destroy(dev);
}

static const struct virtio_slot_ops blk_slot_ops = {
	.type = "virtio-blk",
	.thread = SECCOMP_THREAD_DEVICE,
	.start = blk_start,
	.destroy = blk_destroy,
};

static int blk_init(struct vm *vm)
{
	struct virtio_blk_params p = {
		.name = vm__virtio_name(vm, VIRTIO_SLOT_BLK),
		.disk = vm->disk,
		.store_cow = vm->store_cow,
		.serial = vm->rootfs.name,
		.nr_queues = vm->nr_vcpus < VIRTIO_BLK_MAX_QUEUES ?
				     vm->nr_vcpus :
				     VIRTIO_BLK_MAX_QUEUES,
		.mem = &vm->mem,
		.irq = vm__virtio_irq(vm, VIRTIO_SLOT_BLK),
	};
	struct virtio_blk *b;
	int ret;

	if (!vm->disk)
		return 0;
	ret = virtio_blk__create(&b, &p);
	if (ret) {
		pr_err("%s: %s", p.name, strerror(-ret));
		return ret;
	}
	return vm__attach_virtio(vm, VIRTIO_SLOT_BLK, virtio_blk__device(b),
				 &blk_slot_ops, b);
}

static int vsock_start(void *dev, const struct sock_fprog *filter)
{
	return vsock__start(dev, filter);
}

static void vsock_destroy(void *dev)
{
	vsock__destroy(dev);
}

static const struct virtio_slot_ops vsock_slot_ops = {
	.type = "virtio-vsock",
	.thread = SECCOMP_THREAD_DEVICE,
	.start = vsock_start,
	.destroy = vsock_destroy,
};

static int vsock_init(struct vm *vm)
{
	const struct vsock_config *c = &vm->cfg->vsock;
	struct vsock_params p = {
		.name = vm__virtio_name(vm, VIRTIO_SLOT_VSOCK),
		.guest_cid = c->cid,
		.uds_path = c->socket_path,
		.mem = &vm->mem,
		.irq = vm__virtio_irq(vm, VIRTIO_SLOT_VSOCK),
		.fds = &vm->fds,
	};
	int ret;

	if (!has_vsock(vm))
		return 0;
	/*
	 * Each vsock connection is an fd: room for twice the device's
	 * limit (beyond it, socket() and accept4() fail and those
	 * connections are refused).
	 */
	nofile__room(2 * VSOCK_MAX_CONNS);
	ret = vsock__create(&vm->vsock, &p);
	if (ret) {
		pr_err("%s: %s: %s", p.name, c->socket_path,
		       ret == -EEXIST ? "exists and is not a socket" :
					strerror(-ret));
		return ret;
	}
	return vm__attach_virtio(vm, VIRTIO_SLOT_VSOCK,
				 vsock__device(vm->vsock), &vsock_slot_ops,
				 vm->vsock);
}

/*
 * How long the guest may cache names and attributes of a mount. Short: a
 * bind's host side can change under it (the orchestrator edits the
 * workspace), and a second is what virtiofsd's "auto" cache mode gives.
 */
#define VM_FS_ATTR_TIMEOUT_MS 1000U

/* A mount's device, and what vm.metrics says of it: its mount. */
struct vm_fs {
	struct virtio_fs *fs;
	const char *guest_path; /* the config's */
};

static int fs_start(void *priv, const struct sock_fprog *filter)
{
	struct vm_fs *f = priv;

	return virtio_fs__start(f->fs, filter);
}

/* A memory mount's bytes against its limit. */
static void fs_metrics(void *priv, json_t *o)
{
	struct vm_fs *f = priv;
	uint64_t used, max;

	json_object_set_new(o, "mount", json_string(f->guest_path));
	if (virtio_fs__usage(f->fs, &used, &max))
		json_object_set_new(o, "memory",
				    metrics__usage_json(used, max));
}

static void fs_destroy(void *priv)
{
	struct vm_fs *f = priv;

	virtio_fs__destroy(f->fs);
	free(f);
}

static const struct virtio_slot_ops fs_slot_ops = {
	.type = "virtio-fs",
	.thread = SECCOMP_THREAD_FS,
	.start = fs_start,
	.metrics = fs_metrics,
	.destroy = fs_destroy,
};

/* Mount index's virtio-fs device, with its backend, in its slot. */
static int fs_init_one(struct vm *vm, unsigned int index)
{
	const struct mount_config *m = &vm->cfg->mounts.m[index];
	const unsigned int slot = VIRTIO_SLOT_FS0 + index;
	char tag[16];
	struct virtio_fs_params p = {
		.name = vm__virtio_name(vm, slot),
		.tag = tag,
		.nr_queues = vm->nr_vcpus < VIRTIO_FS_MAX_QUEUES ?
				     vm->nr_vcpus :
				     VIRTIO_FS_MAX_QUEUES,
		.attr_timeout_ms = VM_FS_ATTR_TIMEOUT_MS,
		.mem = &vm->mem,
		.irq = vm__virtio_irq(vm, slot),
	};
	struct vm_fs *f;
	int ret;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->guest_path = m->guest_path;
	mounts__tag(index, tag, sizeof(tag));
	p.backend = vm->fs_backend[index];
	ret = virtio_fs__create(&f->fs, &p);
	if (ret) {
		pr_err("%s (%s): %s", p.name, m->guest_path, strerror(-ret));
		free(f);
		return ret;
	}
	vm->fs_backend[index] = NULL; /* the device's from now on */
	return vm__attach_virtio(vm, slot, virtio_fs__device(f->fs),
				 &fs_slot_ops, f);
}

static int fs_init(struct vm *vm)
{
	unsigned int i;
	int ret;

	for (i = 0; i < vm->cfg->mounts.nr; i++) {
		ret = fs_init_one(vm, i);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Every byte the UART sends out, on the vCPU's thread: the start-up
 * trace's first output, and --console-log's copy.
 */
static void console_out(void *opaque, const uint8_t *buf, size_t n)
{
	struct vm *vm = opaque;

	startup_trace__mark(vm->trace, TRACE_FIRST_OUTPUT);
	if (vm->console_log)
		console_log__write(vm->console_log, buf, n);
}

/* --console-log: the UART's bytes go to the file as well as to stdout. */
static int console_log_init(struct vm *vm)
{
	const struct vm_config *cfg = vm->cfg;
	char err[CONFIG_ERR_LEN];
	int ret;

	uart__set_log(vm->uart,
		      &(struct uart_log){ .write = console_out, .opaque = vm });
	if (!cfg->console_log)
		return 0;
	ret = console_log__open(&vm->console_log, cfg->console_log,
				cfg->console_log_max_bytes,
				cfg->console_log_keep, err, sizeof(err));
	if (ret) {
		pr_err("%s", err);
		return ret;
	}
	pr_debug("console log: %s", cfg->console_log);
	return 0;
}

static int devices_init(struct vm *vm)
{
	struct irq_line com1 = { .set = vm__irq_line,
				 .opaque = vm,
				 .gsi = UART_COM1_IRQ };
	int ret;

	vm->event_fd = eventfd(0, EFD_CLOEXEC);
	vm->space_fd = eventfd(0, EFD_CLOEXEC);
	if (vm->event_fd < 0 || vm->space_fd < 0) {
		ret = -errno;
		pr_err("eventfd: %s", strerror(errno));
		return ret;
	}
	/* A stop reason is reported once the VM is going away. */
	vm->uart = uart__create(STDOUT_FILENO, vm->space_fd, &com1,
				&vm->lc.stop_reason);
	if (!vm->uart)
		return -ENOMEM;
	ret = console_log_init(vm);
	if (ret)
		return ret;
	vm->console = console__create(STDIN_FILENO, vm->uart);
	if (!vm->console)
		return -ENOMEM;
	vm->i8042 = (struct i8042){ .reset = sys_reset, .opaque = vm };
	vm->exit_dev = (struct exit_dev){ .ops = &sys_ops, .opaque = vm };

	ret = bus__register(&vm->pio, UART_COM1_BASE, UART_NR_REGS, uart__io,
			    vm->uart);
	if (!ret)
		ret = bus__register(&vm->pio, I8042_DATA_PORT,
				    I8042_COMMAND_PORT - I8042_DATA_PORT + 1,
				    i8042__io, &vm->i8042);
	if (!ret)
		ret = bus__register(&vm->pio, KILN_SYS_BASE, KILN_SYS_LEN,
				    exit_dev__io, &vm->exit_dev);
	if (ret) {
		pr_err("registering port I/O: %s", strerror(-ret));
		return ret;
	}
	ret = blk_init(vm);
	if (!ret)
		ret = vsock_init(vm);
	if (!ret)
		ret = fs_init(vm);
	if (!ret)
		ret = vm_net__device_init(vm);
	return ret;
}

static void devices_exit(struct vm *vm)
{
	vm__detach_virtio(vm);
	virtio_slots__destroy(vm->virtio);
	vm->vsock = NULL; /* destroyed with its slot */
	console__destroy(vm->console);
	vm->console = NULL;
	uart__destroy(vm->uart);
	vm->uart = NULL;
	console_log__destroy(vm->console_log); /* what it holds, written */
	vm->console_log = NULL;
	if (vm->event_fd >= 0)
		close(vm->event_fd);
	if (vm->space_fd >= 0)
		close(vm->space_fd);
	vm->event_fd = vm->space_fd = -1;
	bus__init(&vm->pio, "pio", PIO_LIMIT);
	bus__init(&vm->mmio, "mmio", MMIO_GAP_END);
}

/* ---- step: boot --------------------------------------------------------- */

static int load_initrd(struct vm *vm)
{
	uint8_t *dst = vm->ram + vm->plan.initrd_addr;
	uint64_t done = 0;
	ssize_t n;

	/* What pread and the memcpy below write, faulted in at once. */
	boot__prefault(dst, vm->plan.initrd_size, true);
	while (done < vm->initrd_file_size) {
		n = pread(vm->initrd_fd, dst + done,
			  vm->initrd_file_size - done, done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			pr_err("%s: %s", vm->cfg->initrd_path,
			       n < 0 ? strerror(errno) : "file shrank");
			return n < 0 ? -errno : -EIO;
		}
		done += n;
	}
	done += (4 - done % 4) % 4; /* newc archives start 4-aligned */
	if (vm->argv_cpio_len)
		memcpy(dst + done, vm->argv_cpio, vm->argv_cpio_len);
	return 0;
}

static int boot_init(struct vm *vm)
{
	struct boot_mem m = { .ram = vm->ram,
			      .low_ram = vm->plan.low_ram,
			      .high_ram = vm->plan.high_ram };
	int ret;

	if (vm->restore) {
		image_exit(vm); /* guest memory is the snapshot's */
		return 0;
	}
	ret = kernel__load(&vm->kernel, &m);
	if (!ret && vm->plan.initrd_size)
		ret = load_initrd(vm);
	if (ret)
		return ret;
	bootparams__setup(&m, &vm->kernel, &vm->plan, vm->cmdline);
	pagetable__setup(&m);
	ret = mptable__setup(&m, vm->nr_vcpus, MPTABLE_NR_IRQS);
	if (ret) {
		pr_err("MP table: %s", strerror(-ret));
		return ret;
	}
	/* The files are in guest memory now: stop paying for them. */
	image_exit(vm);
	return 0;
}

/* ---- step: vcpus -------------------------------------------------------- */

static int vcpus_init(struct vm *vm)
{
	unsigned int i;
	int ret;

	vm->vcpus = calloc(vm->nr_vcpus, sizeof(*vm->vcpus));
	if (!vm->vcpus)
		return -ENOMEM;
	for (i = 0; i < vm->nr_vcpus; i++) {
		ret = vcpu__create(vm, i, &vm->vcpus[i]);
		if (ret) {
			pr_err("vcpu%u: %s", i, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

static void vcpus_exit(struct vm *vm)
{
	struct vcpu **vcpus;
	unsigned int i;

	/* The API thread, which outlives this step, may be reading them. */
	pthread_mutex_lock(&vm->vcpus_lock);
	vcpus = vm->vcpus;
	vm->vcpus = NULL;
	pthread_mutex_unlock(&vm->vcpus_lock);
	for (i = 0; vcpus && i < vm->nr_vcpus; i++)
		vcpu__destroy(vcpus[i]);
	free(vcpus);
}

/* ---- the builder -------------------------------------------------------- */

/* phase: the start-up trace's, reached once the step is done. */
static const struct {
	const char *name;
	int (*init)(struct vm *vm);
	void (*exit)(struct vm *vm);
	enum trace_phase phase;
} vm_steps[] = {
	{ "slots", slots_init, vm__release_virtio },
	{ "disk", disk_init, disk_exit },
	{ "mounts", mounts_init, mounts_exit },
	{ "net", vm_net__init, vm_net__exit },
	{ "proxy", vm_net__proxy_init, vm_net__proxy_exit },
	{ "dns", vm_net__dns_init, vm_net__dns_exit },
	/* After the proxy: the interception CA rides in the initramfs. */
	{ "image", image_init, image_exit },
	/* Before the descriptor budget is set (control). */
	{ "snapshot-identity", snapshot_identity_init, vm__snapshot_drop_boot },
	/* start --baseline-cache: an entry found (vm->restore), or a capture. */
	{ "baseline", vm__baseline_open, vm__baseline_close },
	/* start --restore: the snapshot checked and read before KVM. */
	{ "restore-check", vm__restore_open, vm__restore_close },
	{ "kvm", kvm_init, kvm_exit },
	{ "memory", memory_init, memory_exit, TRACE_KVM },
	{ "irqchip", irqchip_init, NULL }, /* goes with the VM fd */
	{ "devices", devices_init, devices_exit, TRACE_DEVICES },
	{ "metrics", vm_metrics__init, vm_metrics__exit },
	{ "control", control__init, control__exit },
	{ "boot", boot_init, NULL, TRACE_LOADED }, /* lives in guest memory */
	{ "vcpus", vcpus_init, vcpus_exit },
	{ "restore", vm__restore_state, NULL, TRACE_BUILT }, /* in KVM */
};

static void vm_unwind(struct vm *vm, unsigned int done)
{
	while (done--)
		if (vm_steps[done].exit)
			vm_steps[done].exit(vm);
}

int vm__create(struct vm **out, const struct vm_config *cfg,
	       struct startup_trace *trace)
{
	struct vm *vm = calloc(1, sizeof(*vm));
	unsigned int i;
	int ret;

	if (!vm)
		return -ENOMEM;
	ret = vm_state__init(&vm->lc);
	if (ret) {
		pr_err("eventfd: %s", strerror(-ret));
		free(vm);
		return ret;
	}
	vm->cfg = cfg;
	vm->trace = trace;
	vm->kvm_fd = vm->vm_fd = vm->initrd_fd = -1;
	vm->snap_kernel_fd = vm->snap_initrd_fd = -1;
	vm->event_fd = vm->space_fd = -1;
	vm->ready_fd = vm->null_fd = -1;
	vm->proc_status_fd = -1;
	vm->nr_vcpus = cfg->nr_cpus;
	vm->restore_dir = cfg->restore_dir;
	bus__init(&vm->pio, "pio", PIO_LIMIT);
	bus__init(&vm->mmio, "mmio", MMIO_GAP_END);
	vm->ram_size = cfg->mem_mib << 20;
	pthread_mutex_init(&vm->vcpus_lock, NULL);
	vm_net__prepare(&vm->net);

	for (i = 0; i < ARRAY_SIZE(vm_steps); i++) {
		ret = vm_steps[i].init(vm);
		if (ret) {
			pr_debug("build step %s failed: %d", vm_steps[i].name,
				 ret);
			vm_unwind(vm, i + 1);
			pthread_mutex_destroy(&vm->vcpus_lock);
			vm_net__release(&vm->net);
			vm_state__exit(&vm->lc);
			free(vm);
			return ret;
		}
		startup_trace__mark(trace, vm_steps[i].phase);
	}
	*out = vm;
	return 0;
}

void vm__destroy(struct vm *vm)
{
	if (!vm)
		return;
	vm_unwind(vm, ARRAY_SIZE(vm_steps));
	pthread_mutex_destroy(&vm->vcpus_lock);
	vm_net__release(&vm->net);
	vm_state__exit(&vm->lc);
	free(vm);
}
