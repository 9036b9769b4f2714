/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_H
#define KILN_VM_H

#include <errno.h>
#include <jansson.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bootloader/boot.h"
#include "devices/block/store-cow.h"
#include "devices/exit-dev.h"
#include "devices/i8042.h"
#include "devices/virtio/guest-mem.h"
#include "lib/compiler.h"
#include "lib/fdbudget.h"
#include "lib/log.h"
#include "proto/initramfs.h"
#include "vmm/bus.h"
#include "vmm/config.h"
#include "vmm/rootfs.h"
#include "vmm/virtio-attach.h"
#include "vmm/vm-net.h"
#include "vmm/vm-state.h"

#define KILN_VERSION "0.1.0" /* `vmm --version`, and in a snapshot */

/*
 * Exit codes of `vmm run` besides the command's own status (0..255, or
 * 128+N when a signal killed it). Documented in Documentation/cli.md.
 */
#define VMM_EXIT_GUEST_CRASH 123 /* reset, panic or triple fault */
#define VMM_EXIT_VMM_ERROR   125 /* bad input or a monitor failure */

/* What a vCPU saw the guest do before it stopped the VM (vm.event). */
enum vm_crash {
	VM_CRASH_NONE,
	VM_CRASH_PANIC,	       /* KVM_SYSTEM_EVENT_CRASH */
	VM_CRASH_TRIPLE_FAULT, /* KVM_EXIT_SHUTDOWN */
};

struct vcpu;
struct uart;
struct console;
struct console_log;
struct disk;
struct api;
struct vsock;
struct fs_backend;
struct metrics_file;
struct control_ops;
struct startup_trace;

struct vm {
	const struct vm_config *cfg;
	/* The process's start-up trace, borrowed (vmm/trace-startup.h). */
	struct startup_trace *trace;

	int kvm_fd;
	int vm_fd;
	int vcpu_mmap_size;
	struct kvm_cpuid2 *cpuid; /* what KVM supports, patched per vCPU */
	/*
	 * For a snapshot, found before the seccomp filter: the MSRs KVM
	 * saves (KVM_GET_MSR_INDEX_LIST), the XSAVE area's size
	 * (KVM_CAP_XSAVE2; 0: KVM_GET_XSAVE's 4 KiB, or no XSAVE at all),
	 * and whether there are XCRs; whether KVM runs guests with SVM
	 * (an AMD host: how a restore puts back the task register).
	 */
	struct kvm_msr_list *msr_list;
	int xsave_size;
	bool has_xsave, has_xcrs, host_svm;

	/* What to boot, opened and checked before KVM is touched. */
	struct kernel_image kernel;
	int initrd_fd;		   /* -1: no initrd file */
	uint64_t initrd_file_size; /* bytes */
	uint8_t *argv_cpio;	   /* appended archive with the command */
	size_t argv_cpio_len;
	/*
	 * The HTTPS interception CA's certificate (PEM) for the guest's
	 * trust store (/kiln/ca.pem), set before the boot step; NULL: none.
	 * Borrowed from its owner, never the key.
	 */
	const char *guest_ca_pem;
	size_t guest_ca_len;
	/* Its subject hash (/kiln/ca.hash); "": none computed. */
	char guest_ca_hash[KILN_CA_HASH_LEN + 1];
	char *cmdline; /* the complete kernel command line */
	/*
	 * What a snapshot's identity needs of the boot once the files
	 * above are released (vmm/snapshot.c): with a control socket, the
	 * kernel and initrd files kept open (hashed when a snapshot is
	 * taken, not at every boot), the command line and the appended
	 * archive's digest. -1, NULL, "": none. The kernel's and initrd's
	 * digests once known (a memo of the verification cache, or hashed
	 * once): "" until then.
	 */
	int snap_kernel_fd, snap_initrd_fd;
	char *snap_cmdline;
	char snap_appended[65];
	char snap_kernel_hex[65], snap_initrd_hex[65];

	uint8_t *ram;	      /* one host mapping for all guest RAM */
	uint64_t ram_size;    /* bytes */
	struct guest_mem mem; /* what devices see of it */
	struct boot_plan plan;
	uint64_t boot_entry; /* guest-physical 64-bit entry */

	struct bus pio;	 /* port I/O, 64 KiB */
	struct bus mmio; /* the 3-4 GiB gap */
	/*
	 * virtio-mmio devices by slot, each slot its device's owner
	 * (vmm/virtio-attach.h).
	 */
	struct virtio_slot virtio[VIRTIO_MMIO_SLOTS];
	struct uart *uart;
	struct console *console;
	struct console_log *console_log; /* --console-log; NULL: none */
	struct i8042 i8042;
	struct exit_dev exit_dev;

	/*
	 * The root disk (--rootfs): checked image, writable layer (its
	 * virtio-blk device is slot 0's).
	 */
	struct rootfs_image rootfs;
	struct disk *disk;
	/* A cow root's layer over its block store; NULL for the others. */
	struct store_cow *store_cow;

	/*
	 * virtio-vsock (--vsock-socket, or the agent's control socket),
	 * for the control API's agent channel: slot 1's, which destroys it.
	 */
	struct vsock *vsock;

	/*
	 * --mount: each mount's backend until its virtio-fs device (in
	 * slot 2 + index, which owns it) has it.
	 */
	struct fs_backend *fs_backend[MOUNTS_MAX];

	/* The network (--net): vmm/vm-net.h. */
	struct vm_net net;

	/*
	 * vm.metrics and --metrics (vmm/vm-metrics.c): /proc/self/status,
	 * opened before the filter (-1: none), and the file (NULL: none),
	 * written by the main loop every metrics_interval_ms.
	 */
	int proc_status_fd;
	struct metrics_file *metrics_file;

	/* The control socket (--control-socket, vmm/control.c). */
	struct api *api;
	const struct control_ops *control_ops; /* given at control__start */
	int ready_fd; /* start --detach: the parent waits on it */
	int null_fd;  /* /dev/null, for after a detach */
	/*
	 * The descriptor budget the guest and the API's clients draw on
	 * (lib/fdbudget.h): vsock connections, API clients and agent
	 * connections. Set by control__init, once every fixed one is open.
	 */
	struct fd_budget fds;

	unsigned int nr_vcpus;
	struct vcpu **vcpus;
	/*
	 * Held by vm.metrics (API thread) while it reads the vCPUs and by
	 * their tear-down, which the API thread outlives; never by a vCPU.
	 */
	pthread_mutex_t vcpus_lock;

	/*
	 * Halt probes: without ACPI a guest powers off by halting every CPU
	 * with interrupts off. Once a second the main loop bumps probe_round
	 * and kicks the vCPUs; each records the round in which it found
	 * itself in that state. A vCPU also halts with interrupts off for a
	 * moment while it waits for a paravirtual spinlock, so a round in
	 * which every vCPU was seen dead, each at its own moment, is only a
	 * suspicion: the main loop then pauses every vCPU at once and
	 * decides on that consistent snapshot (vcpu__snapshot_all_dead).
	 */
	atomic_uint probe_round;
	atomic_uint halt_suspect; /* round that looked all-dead, 0: none */
	/* SIGUSR2: each vCPU logs where it is once per bump (vcpu__report_all). */
	atomic_uint report_gen;

	/*
	 * The lifecycle (vmm/vm-state.h): the state, the exit event vCPUs,
	 * devices and the control API report through, and the parking of
	 * every vCPU (vm.pause, halt looks). vm.pause holds the vCPUs
	 * parked until vm.resume; no halt probe runs meanwhile. vCPU
	 * threads wait for the VM to leave CREATED before their first
	 * KVM_RUN, so that every thread's seccomp filter, the main
	 * thread's last, is in before the guest's first instruction.
	 */
	struct vm_lifecycle lc;
	/*
	 * start --restore: the snapshot, verified and read before KVM is
	 * touched (vmm/restore.c); NULL: a boot.
	 */
	struct snap_load *restore;
	/* The restore's directory: cfg->restore_dir, or a baseline's entry. */
	const char *restore_dir;
	/* start --baseline-cache (vmm/baseline-vm.c); NULL: none. */
	struct vm_baseline *baseline;
	/* Each thread type's filter (vmm/seccomp.h); NULL: --no-seccomp. */
	struct seccomp_filters *seccomp;

	int event_fd; /* vCPU threads wake the main loop (halt, ready) */
	int space_fd; /* the UART has room for host input */
	/* The first enum vm_crash a vCPU saw, and which vCPU (+1; 0: none). */
	atomic_int crash;
	atomic_uint crash_vcpu;
};

/* Builds everything; errors are reported here, with what failed. */
/* trace: the process's start-up trace, which outlives the VM. */
int __must_check vm__create(struct vm **out, const struct vm_config *cfg,
			    struct startup_trace *trace);
void vm__destroy(struct vm *vm);
void vm__irq_line(void *opaque, unsigned int gsi, int level);

/* The guest agent runs (kiln.agent=on): there is a control socket. */
static inline bool vm__has_agent(const struct vm *vm)
{
	return vm->cfg->control_socket;
}

#endif
