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
#include "devices/exit-dev.h"
#include "devices/i8042.h"
#include "devices/virtio/guest-mem.h"
#include "lib/compiler.h"
#include "lib/fdbudget.h"
#include "lib/log.h"
#include "vmm/bus.h"
#include "vmm/config.h"
#include "vmm/rootfs.h"
#include "vmm/virtio-attach.h"
#include "vmm/vm-net.h"

#define KILN_VERSION "0.1.0" /* `vmm --version`, and in a snapshot */

/*
 * Exit codes of `vmm run` besides the command's own status (0..255, or
 * 128+N when a signal killed it). Documented in Documentation/cli.md.
 */
#define VMM_EXIT_GUEST_CRASH 123 /* reset, panic or triple fault */
#define VMM_EXIT_VMM_ERROR   125 /* bad input or a monitor failure */

/*
 * start --detach: what the VM process writes to its waiting parent
 * (main.c): the agent answered (a baseline capture may follow); ready.
 */
#define VM_AGENT_BYTE 'a'
#define VM_READY_BYTE 'r'

/* struct vm's ready_deadline_ms past its deadline (vm-run.c). */
#define VM_READY_REPORTED (-1LL)
#define VM_READY_STOPPING (-2LL)

enum vm_stop_reason {
	VM_STOP_NONE,
	VM_STOP_GUEST_EXIT,  /* status reported through the exit device */
	VM_STOP_GUEST_RESET, /* reset or triple fault, no status */
	VM_STOP_GUEST_HALT,  /* every vCPU halted for good: power off */
	VM_STOP_ERROR,	     /* KVM or the monitor failed */
	VM_STOP_SIGNAL,	     /* the host asked us to stop */
	VM_STOP_SHUTDOWN,    /* vm.shutdown, and the guest did not power off */
};

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

struct vm {
	const struct vm_config *cfg;

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
	int ready_fd; /* start --detach: the parent waits on it */
	int null_fd;  /* /dev/null, for after a detach */
	atomic_llong shutdown_deadline; /* CLOCK_MONOTONIC s; 0: none */
	/*
	 * --ready-timeout-ms: CLOCK_MONOTONIC ms by which the guest agent
	 * must have answered (0: no limit, or it has), or VM_READY_REPORTED
	 * (overdue, the state logged) and VM_READY_STOPPING (the VM stops).
	 */
	atomic_llong ready_deadline_ms;
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

	/* Pausing all vCPUs for a snapshot; counters under pause_lock. */
	pthread_mutex_t pause_lock;
	pthread_cond_t pause_cv;
	atomic_uint pause_gen;	  /* odd while a pause is requested */
	unsigned int paused;	  /* vCPUs parked in this pause */
	unsigned int paused_dead; /* of them, halted with IF clear */
	/*
	 * vm.pause: the vCPUs stay parked until vm.resume (vcpu__pause_all);
	 * no halt probe runs meanwhile. Under pause_lock.
	 */
	bool pause_held;
	/*
	 * Under pause_lock: vCPU threads wait for it before their first
	 * KVM_RUN, so that every thread's seccomp filter, the main
	 * thread's last, is in before the guest's first instruction.
	 */
	bool vcpus_released;
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

	int event_fd;	     /* vCPU threads wake the main loop */
	int space_fd;	     /* the UART has room for host input */
	atomic_int stopping; /* set once; vCPUs leave KVM_RUN */
	enum vm_stop_reason stop_reason;
	int stop_status; /* status or signal number */
	const char *stop_detail;
	pthread_mutex_t stop_lock;
	/* The first enum vm_crash a vCPU saw, and which vCPU (+1; 0: none). */
	atomic_int crash;
	atomic_uint crash_vcpu;
};

/* Builds everything; errors are reported here, with what failed. */
int __must_check vm__create(struct vm **out, const struct vm_config *cfg);
void vm__destroy(struct vm *vm);
/* Runs the guest to completion; returns the process exit code. */
int vm__run(struct vm *vm);
/* Called from any thread: first caller's reason wins. */
void vm__stop(struct vm *vm, enum vm_stop_reason reason, int status,
	      const char *detail);
void vm__irq_line(void *opaque, unsigned int gsi, int level);
/*
 * vmm/snapshot.c: vm.pause, vm.resume, vm.snapshot (Documentation/
 * snapshots.md). Called on the control API's thread, one at a time.
 * Each returns 0 or -errno with one line in err: -EALREADY (paused
 * twice, resumed while running), -ETIMEDOUT (a vCPU or a device did not
 * stop in time: the VM runs on), -EOPNOTSUPP (a device without a save
 * hook, named), -EPERM (the directory's modes), another (I/O, KVM).
 */
#define VM_PAUSE_VCPU_MS   5000U /* for every vCPU to leave KVM_RUN */
#define VM_PAUSE_DEVICE_MS 5000U /* for each device's requests in flight */
int __must_check vm__pause(struct vm *vm, char *err, size_t len);
int __must_check vm__resume(struct vm *vm, char *err, size_t len);
bool vm__is_paused(struct vm *vm);
/* The boot step, before it releases the files: keep what identity needs. */
int __must_check vm__snapshot_keep_boot(struct vm *vm);
void vm__snapshot_drop_boot(struct vm *vm);
/*
 * The identity digest a snapshot of this VM would have ("sha256:<hex>"
 * into out), from what vm__snapshot_keep_boot kept: what a restore
 * compares with the manifest's. With identity, also the object hashed (a
 * reference for the caller, which says what differs when the digests do).
 * 0 or -errno.
 */
#define VM_IDENTITY_DIGEST_LEN 80 /* "sha256:" + 64 hex + NUL, rounded */
int __must_check vm__snapshot_identity_digest(struct vm *vm, char *out,
					      size_t len, json_t **identity);

/*
 * vmm/restore.c: start --restore DIR (Documentation/snapshots.md,
 * "Restore"), two build steps. vm__restore_open, before KVM is touched:
 * the snapshot verified against this monitor and config and read
 * (vm->restore); any mismatch is one error line naming the file or the
 * field. vm__restore_state, once the vCPUs and devices exist: the
 * vCPUs', the VM's and the devices' state set. The memory step maps
 * memory.raw instead of anonymous memory, and the boot step loads
 * nothing.
 */
int __must_check vm__restore_open(struct vm *vm);
void vm__restore_close(struct vm *vm);
int __must_check vm__restore_state(struct vm *vm);
/*
 * vmm/baseline-vm.c: start --baseline-cache DIR (Documentation/
 * snapshots.md, "Baselines"). vm__baseline_open, a build step after the
 * identity and before restore-check: the cache checked (an unsafe one
 * is an error), the identity looked up (a valid entry leased and set as
 * vm->restore; an invalid one discarded with one line), the bounds
 * enforced, and a capture prepared when there was no entry.
 * vm__baseline_capture, on the API thread when the agent is first
 * ready (before any request reaches it): the snapshot saved into the
 * cache. vm__baseline_failed: a restore from the entry failed; logs
 * why, discards it and returns VM_BASELINE_COLD, on which main() builds
 * the VM once more with cfg->baseline.no_lookup.
 */
#define VM_BASELINE_COLD (-ESTALE)
int __must_check vm__baseline_open(struct vm *vm);
void vm__baseline_close(struct vm *vm);
bool vm__baseline_restoring(const struct vm *vm);
int __must_check vm__baseline_failed(struct vm *vm, int err);
/* A capture is planned: the API thread renames (seccomp needs). */
bool vm__baseline_needs_publish(const struct vm *vm);
void vm__baseline_capture(struct vm *vm);
/*
 * A VM with mounts: the agent detached them for the capture (err 0: it
 * runs now), or could not (-errno, why: nothing is saved).
 */
void vm__baseline_capture_detached(struct vm *vm, int err, const char *why);
/* A VM restored from the cache whose mounts could not be attached. */
void vm__baseline_attach_failed(struct vm *vm, const char *why);
/* vm.status's "baseline" object; NULL without a cache. */
json_t *vm__baseline_status(const struct vm *vm);

/*
 * Pauses a running VM first; leaves it paused unless resume (or on a
 * failure, when it was running before).
 */
int __must_check vm__snapshot(struct vm *vm, const char *dir, bool resume,
			      char *err, size_t len);

/* vmm/kvm.c: /dev/kvm and capability checks. */
int __must_check kvm__open(int *kvm_fd, const char **why);
void kvm__warn_if_software(void);
int __must_check kvm__supported_cpuid(int kvm_fd, struct kvm_cpuid2 **out);
/* KVM_GET_MSR_INDEX_LIST, as large as it is (calloc'ed, the caller's). */
int __must_check kvm__msr_index_list(int kvm_fd, struct kvm_msr_list **out);

/* vmm/vcpu.c */
int __must_check vcpu__create(struct vm *vm, unsigned int id,
			      struct vcpu **out);
void vcpu__destroy(struct vcpu *v);
int __must_check vcpu__setup_kick(void);
/*
 * Its thread, under the vCPU seccomp filter from its start; it waits for
 * vcpu__release_all() before entering the guest.
 */
int __must_check vcpu__start(struct vcpu *v);
/* Every vCPU started may enter the guest (and one that stops, leave). */
void vcpu__release_all(struct vm *vm);
void vcpu__kick(struct vcpu *v);
/* Has this vCPU been found halted for good in round `round`? */
bool vcpu__dead_in(const struct vcpu *v, unsigned int round);
/*
 * Park every vCPU outside KVM_RUN, look at all of them at that one moment,
 * let them go. True only if every vCPU is halted with interrupts off: then
 * nothing in the guest can ever wake them. Waits at most timeout_ms for
 * the vCPUs to park (one blocked on the host counts as alive).
 */
bool vcpu__snapshot_all_dead(struct vm *vm, unsigned int timeout_ms);
/*
 * Did every vCPU thread use at most busy_ns of CPU (its guest's time
 * included) since the last call? The first call has nothing to compare
 * with and says no. Main loop only.
 */
bool vcpu__all_quiet(struct vm *vm, long long busy_ns);
struct vcpu_stats;
/* Its exits by kind and its thread's CPU time (vm.metrics); any thread. */
void vcpu__stats(const struct vcpu *v, struct vcpu_stats *s);
/*
 * Ask every vCPU to log, from its own thread, where its guest is: mp
 * state, rip, rsp, rflags, cr3, and the kernel text addresses found on
 * its stack (a poor man's backtrace to read against the guest's System.map).
 */
void vcpu__report_all(struct vm *vm);
void vcpu__join(struct vcpu *v);
/*
 * vm.pause: park every vCPU outside KVM_RUN and keep it there. A vCPU
 * parks only after KVM_RUN returned -EINTR, which completes the MMIO or
 * port I/O exit it was in first (api.rst, "immediate_exit"): its state
 * is then consistent for the KVM_GET_* ioctls, from any thread. 0;
 * -EALREADY when paused already; -ETIMEDOUT when not every vCPU parked
 * within timeout_ms (they all run again); -ESHUTDOWN when the VM stops.
 */
int __must_check vcpu__pause_all(struct vm *vm, unsigned int timeout_ms);
/* Let them run again: 0, or -EALREADY when not paused. */
int vcpu__resume_all(struct vm *vm);
bool vcpu__paused(struct vm *vm);
/* The VM is stopping: parked vCPUs wake, see it and end. */
void vcpu__wake_parked(struct vm *vm);
/*
 * A parked vCPU's state for a snapshot (vmm/snapshot.c): the vCPU
 * sections of Documentation/snapshots.md, "State files", added to w.
 * 0 or -errno, with the ioctl that failed in *what.
 */
struct snap_writer;
int __must_check vcpu__save(struct vcpu *v, struct snap_writer *w,
			    const char **what);
/*
 * A vCPU just created for a restore (vcpu__create skipped the boot
 * setup): the sections of its state file p set in the order KVM needs
 * (Documentation/snapshots.md, "Restore"), its TSC moved on by
 * tsc_advance ticks. Before any thread runs it. 0 or -errno, with the
 * ioctl or section that failed in *what.
 */
int __must_check vcpu__restore(struct vcpu *v, const void *p, size_t plen,
			       uint64_t tsc_advance, const char **what);

/* vmm/vm-metrics.c: a build step, and the metrics object. */
int __must_check vm_metrics__init(struct vm *vm);
void vm_metrics__exit(struct vm *vm);
/* Everything but the API's "agent" member, added to o; any thread. */
void vm__metrics_fill(struct vm *vm, json_t *o);
/* One line to the --metrics file, if there is one; main loop. */
void vm__metrics_write(struct vm *vm);

/* vmm/control.c: the control API, a build step and its start. */
int __must_check control__init(struct vm *vm);
int __must_check control__start(struct vm *vm);
void control__exit(struct vm *vm);
/*
 * The vCPUs are joined: vm.event guest-panic or triple-fault when a
 * vCPU saw one, then shutdown with the reason and the exit code.
 */
void control__stopped(struct vm *vm, int exit_code);

/* The guest agent runs (kiln.agent=on): there is a control socket. */
static inline bool vm__has_agent(const struct vm *vm)
{
	return vm->cfg->control_socket;
}

/* vmm/cpuid.c */
/* Entries cpuid__add_emulated may append: c must have room for them. */
#define CPUID_ADDED_MAX 4
/*
 * Adds what KVM emulates but does not list as supported (TSC deadline),
 * and the topology subleaves it leaves out; room: c's capacity.
 */
void cpuid__add_emulated(int kvm_fd, struct kvm_cpuid2 *c, unsigned int room);
bool cpuid__host_is_svm(void);
int __must_check cpuid__setup(int vcpu_fd, const struct kvm_cpuid2 *supported,
			      unsigned int id, unsigned int nr_cpus);

#endif
