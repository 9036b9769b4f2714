// SPDX-License-Identifier: GPL-2.0
/*
 * vCPUs: one thread each, running KVM_RUN and dispatching exits. A vCPU is
 * told to stop through kvm_run->immediate_exit plus a signal, never killed.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <asm/processor-flags.h>

#include "lib/compiler.h"
#include "lib/counter.h"
#include "lib/thread-filter.h"
#include "lib/timespec.h"
#include "snapshot/state.h"
#include "vmm/metrics.h"
#include "vmm/seccomp.h"
#include "vmm/vm.h"

/* MSR numbers (SDM vol. 4) and their boot values. */
#define MSR_IA32_SYSENTER_CS	0x00000174
#define MSR_IA32_SYSENTER_ESP	0x00000175
#define MSR_IA32_SYSENTER_EIP	0x00000176
#define MSR_IA32_MISC_ENABLE	0x000001a0
#define MSR_MTRR_DEF_TYPE	0x000002ff
#define MSR_STAR		0xc0000081
#define MSR_LSTAR		0xc0000082
#define MSR_CSTAR		0xc0000083
#define MSR_SYSCALL_MASK	0xc0000084
#define MSR_KERNEL_GS_BASE	0xc0000102
#define MISC_ENABLE_FAST_STRING (1ULL << 0)
#define MTRR_DEF_TYPE_ENABLE	(1ULL << 11)
#define MTRR_TYPE_WRBACK	6ULL

#define FPU_DEFAULT_FCW	  0x37f	 /* FNINIT state */
#define FPU_DEFAULT_MXCSR 0x1f80 /* all exceptions masked */

#define APIC_LVT0      0x350
#define APIC_LVT1      0x360
#define APIC_DM_EXTINT 0x700
#define APIC_DM_NMI    0x400
#define APIC_DM_MASK   0x700

#define VCPU_KICK_SIGNAL SIGUSR1

struct vcpu {
	struct vm *vm;
	unsigned int id;
	int fd;
	struct kvm_run *run;
	pthread_t thread;
	bool started;
	atomic_uint dead_round;	 /* last probe round that found it dead */
	unsigned int parked_gen; /* last pause it parked for (pause_lock) */
	unsigned int report_gen; /* last report it logged */
	long long cpu_ns;	 /* its thread's CPU time at the last look */
	/* vm.metrics (lib/counter.h): written by its thread only. */
	uint64_t exits[VCPU_EXIT_NR];
	int tid;		/* its thread's, 0 until it runs (atomic) */
	uint64_t final_cpu_ns;	/* its CPU time as it ended, then */
	bool ended;		/* final_cpu_ns is set (atomic) */
};

static int setup_msrs(struct vcpu *v)
{
	static const struct {
		uint32_t index;
		uint64_t data;
	} boot_msrs[] = {
		{ MSR_IA32_SYSENTER_CS, 0 },
		{ MSR_IA32_SYSENTER_ESP, 0 },
		{ MSR_IA32_SYSENTER_EIP, 0 },
		{ MSR_STAR, 0 },
		{ MSR_CSTAR, 0 },
		{ MSR_KERNEL_GS_BASE, 0 },
		{ MSR_SYSCALL_MASK, 0 },
		{ MSR_LSTAR, 0 },
		{ MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING },
		{ MSR_MTRR_DEF_TYPE, MTRR_DEF_TYPE_ENABLE | MTRR_TYPE_WRBACK },
	};
	/*
	 * No MSR_IA32_TSC: KVM starts every vCPU's TSC in sync, and a write
	 * from here, late on a slow host, would make the guest see the TSCs
	 * drift apart and drop the TSC as a clocksource.
	 */
	struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry e[ARRAY_SIZE(boot_msrs)];
	} m;
	unsigned int i;
	int ret;

	memset(&m, 0, sizeof(m));
	m.hdr.nmsrs = ARRAY_SIZE(boot_msrs);
	for (i = 0; i < ARRAY_SIZE(boot_msrs); i++) {
		m.e[i].index = boot_msrs[i].index;
		m.e[i].data = boot_msrs[i].data;
	}
	/* KVM_SET_MSRS returns how many it set; all of them or bust. */
	ret = ioctl(v->fd, KVM_SET_MSRS, &m);
	if (ret < 0)
		return -errno;
	return ret == (int)ARRAY_SIZE(boot_msrs) ? 0 : -EINVAL;
}

static int setup_fpu(struct vcpu *v)
{
	struct kvm_fpu fpu = { .fcw = FPU_DEFAULT_FCW,
			       .mxcsr = FPU_DEFAULT_MXCSR };

	return ioctl(v->fd, KVM_SET_FPU, &fpu) < 0 ? -errno : 0;
}

static void set_lvt(struct kvm_lapic_state *l, unsigned int reg, uint32_t mode)
{
	uint32_t val;

	memcpy(&val, &l->regs[reg], sizeof(val));
	val = (val & ~APIC_DM_MASK) | mode;
	memcpy(&l->regs[reg], &val, sizeof(val));
}

/* LINT0 takes the 8259's ExtINT, LINT1 NMI: what the MP table declares. */
static int setup_lapic(struct vcpu *v)
{
	struct kvm_lapic_state l;

	if (ioctl(v->fd, KVM_GET_LAPIC, &l) < 0)
		return -errno;
	set_lvt(&l, APIC_LVT0, APIC_DM_EXTINT);
	set_lvt(&l, APIC_LVT1, APIC_DM_NMI);
	return ioctl(v->fd, KVM_SET_LAPIC, &l) < 0 ? -errno : 0;
}

/* Only the boot vCPU starts in long mode; the others wait for SIPI. */
static int setup_boot_regs(struct vcpu *v, uint64_t entry)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;

	if (ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0)
		return -errno;
	pagetable__boot_sregs(&sregs);
	if (ioctl(v->fd, KVM_SET_SREGS, &sregs) < 0)
		return -errno;
	pagetable__boot_regs(&regs, entry);
	return ioctl(v->fd, KVM_SET_REGS, &regs) < 0 ? -errno : 0;
}

int vcpu__create(struct vm *vm, unsigned int id, struct vcpu **out)
{
	struct vcpu *v = calloc(1, sizeof(*v));
	int ret;

	if (!v)
		return -ENOMEM;
	v->vm = vm;
	v->id = id;
	v->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, id);
	if (v->fd < 0) {
		ret = -errno;
		goto out_free;
	}
	v->run = mmap(NULL, vm->vcpu_mmap_size, PROT_READ | PROT_WRITE,
		      MAP_SHARED, v->fd, 0);
	if (v->run == MAP_FAILED) {
		ret = -errno;
		v->run = NULL;
		goto out_destroy;
	}
	/* A restore sets everything from the snapshot (vcpu__restore). */
	if (vm->restore)
		goto out_done;
	ret = cpuid__setup(v->fd, vm->cpuid, id, vm->nr_vcpus);
	if (!ret)
		ret = setup_msrs(v);
	if (!ret)
		ret = setup_fpu(v);
	if (!ret)
		ret = setup_lapic(v);
	if (!ret && id == 0)
		ret = setup_boot_regs(v, vm->boot_entry);
	if (ret)
		goto out_destroy;
out_done:
	*out = v;
	return 0;

out_destroy:
	vcpu__destroy(v);
	return ret;
out_free:
	free(v);
	return ret;
}

void vcpu__destroy(struct vcpu *v)
{
	if (!v)
		return;
	if (v->run)
		munmap(v->run, v->vm->vcpu_mmap_size);
	if (v->fd >= 0)
		close(v->fd);
	free(v);
}

static void handle_io(struct vcpu *v)
{
	struct kvm_run *run = v->run;
	uint8_t *data = (uint8_t *)run + run->io.data_offset;
	bool out = run->io.direction == KVM_EXIT_IO_OUT;
	uint32_t i;

	/* count > 1 is a rep ins/outs; KVM bounds it to the run page. */
	for (i = 0; i < run->io.count; i++) {
		bus__access(&v->vm->pio, run->io.port, data, run->io.size, out);
		data += run->io.size;
	}
}

static void handle_mmio(struct vcpu *v)
{
	struct kvm_run *run = v->run;
	unsigned int len = run->mmio.len;

	/* KVM never reports more than the 8 data bytes; be sure anyway. */
	if (len > sizeof(run->mmio.data))
		len = sizeof(run->mmio.data);
	if (!bus__access(&v->vm->mmio, run->mmio.phys_addr, run->mmio.data, len,
			 run->mmio.is_write))
		pr_debug("vcpu%u: unclaimed MMIO %s at 0x%llx", v->id,
			 run->mmio.is_write ? "write" : "read",
			 (unsigned long long)run->mmio.phys_addr);
}

/* The first crash seen is the one vm.event reports; no syscall here. */
static void note_crash(struct vcpu *v, enum vm_crash what)
{
	int none = VM_CRASH_NONE;

	if (atomic_compare_exchange_strong(&v->vm->crash, &none, what))
		atomic_store(&v->vm->crash_vcpu, v->id + 1);
}

static void handle_system_event(struct vcpu *v)
{
	switch (v->run->system_event.type) {
	case KVM_SYSTEM_EVENT_CRASH:
		note_crash(v, VM_CRASH_PANIC);
		vm__stop(v->vm, VM_STOP_GUEST_RESET, 0, "guest crashed");
		break;
	default:
		vm__stop(v->vm, VM_STOP_GUEST_RESET, 0,
			 "guest requested a reset or shutdown");
		break;
	}
}

/* With --verbose: where the vCPU was when it stopped the machine. */
static void debug_where(struct vcpu *v, const char *what)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;

	if (!log__debug_enabled())
		return;
	if (ioctl(v->fd, KVM_GET_REGS, &regs) < 0 ||
	    ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0) {
		pr_debug("vcpu%u: %s, registers unreadable: %s", v->id, what,
			 strerror(errno));
		return;
	}
	pr_debug("vcpu%u: %s at cs:rip 0x%x:0x%llx rsp 0x%llx rflags 0x%llx "
		 "cr0 0x%llx cr2 0x%llx cr3 0x%llx cr4 0x%llx efer 0x%llx",
		 v->id, what, sregs.cs.selector, (unsigned long long)regs.rip,
		 (unsigned long long)regs.rsp, (unsigned long long)regs.rflags,
		 (unsigned long long)sregs.cr0, (unsigned long long)sregs.cr2,
		 (unsigned long long)sregs.cr3, (unsigned long long)sregs.cr4,
		 (unsigned long long)sregs.efer);
}

static enum vcpu_exit_kind exit_kind(uint32_t reason)
{
	switch (reason) {
	case KVM_EXIT_IO:
		return VCPU_EXIT_IO;
	case KVM_EXIT_MMIO:
		return VCPU_EXIT_MMIO;
	case KVM_EXIT_HLT:
		return VCPU_EXIT_HLT;
	case KVM_EXIT_SHUTDOWN:
		return VCPU_EXIT_SHUTDOWN;
	case KVM_EXIT_SYSTEM_EVENT:
		return VCPU_EXIT_SYSTEM_EVENT;
	default:
		return VCPU_EXIT_OTHER;
	}
}

/* Returns false when the vCPU must stop. */
static bool handle_exit(struct vcpu *v)
{
	struct kvm_run *run = v->run;

	counter__add(&v->exits[exit_kind(run->exit_reason)], 1);
	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		handle_io(v);
		return true;
	case KVM_EXIT_MMIO:
		handle_mmio(v);
		return true;
	case KVM_EXIT_SHUTDOWN:
		debug_where(v, "shutdown (triple fault)");
		note_crash(v, VM_CRASH_TRIPLE_FAULT);
		vm__stop(v->vm, VM_STOP_GUEST_RESET, 0, "guest triple-faulted");
		return false;
	case KVM_EXIT_SYSTEM_EVENT:
		handle_system_event(v);
		return false;
	case KVM_EXIT_HLT:
		vm__stop(v->vm, VM_STOP_GUEST_RESET, 0,
			 "guest halted with interrupts off");
		return false;
	case KVM_EXIT_FAIL_ENTRY:
		pr_err("vcpu%u: KVM entry failed, hardware reason 0x%llx",
		       v->id,
		       (unsigned long long)
			       run->fail_entry.hardware_entry_failure_reason);
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		pr_err("vcpu%u: KVM internal error, suberror %u", v->id,
		       run->internal.suberror);
		break;
	default:
		pr_err("vcpu%u: unhandled KVM exit reason %u", v->id,
		       run->exit_reason);
		break;
	}
	vm__stop(v->vm, VM_STOP_ERROR, 0, "vCPU failed");
	return false;
}

bool vcpu__dead_in(const struct vcpu *v, unsigned int round)
{
	return atomic_load(&v->dead_round) == round;
}

/*
 * HLT with interrupts disabled can only be left by NMI, INIT, SMI or a
 * paravirtual kick: that is how Linux stops a CPU for halt and power off
 * when it has no firmware to ask. A vCPU sitting idle in HLT has IF set.
 */
static bool halted_for_good(struct vcpu *v)
{
	struct kvm_mp_state mp;
	struct kvm_regs regs;

	return !ioctl(v->fd, KVM_GET_MP_STATE, &mp) &&
	       mp.mp_state == KVM_MP_STATE_HALTED &&
	       !ioctl(v->fd, KVM_GET_REGS, &regs) &&
	       !(regs.rflags & X86_EFLAGS_IF);
}

static void probe_halt(struct vcpu *v)
{
	struct vm *vm = v->vm;
	unsigned int round = atomic_load(&vm->probe_round);
	uint64_t one = 1;
	unsigned int i;

	if (!round || atomic_load(&v->dead_round) == round ||
	    !halted_for_good(v))
		return;
	atomic_store(&v->dead_round, round);
	for (i = 0; i < vm->nr_vcpus; i++)
		if (!vcpu__dead_in(vm->vcpus[i], round))
			return;
	/* A suspicion only: the main loop confirms on a snapshot. */
	atomic_store(&vm->halt_suspect, round);
	if (write(vm->event_fd, &one, sizeof(one)) < 0)
		pr_debug("event_fd: %s", strerror(errno));
}

/* Park for the pause generation gen: report, then wait to be let go. */
static void park(struct vcpu *v, unsigned int gen)
{
	struct vm *vm = v->vm;
	bool dead = halted_for_good(v);

	pthread_mutex_lock(&vm->pause_lock);
	if (atomic_load(&vm->pause_gen) == gen && v->parked_gen != gen) {
		v->parked_gen = gen;
		vm->paused++;
		vm->paused_dead += dead;
		pthread_cond_broadcast(&vm->pause_cv);
		while (atomic_load(&vm->pause_gen) == gen &&
		       !atomic_load(&vm->stopping))
			pthread_cond_wait(&vm->pause_cv, &vm->pause_lock);
	}
	pthread_mutex_unlock(&vm->pause_lock);
}

static const char *mp_state_name(uint32_t state)
{
	switch (state) {
	case KVM_MP_STATE_RUNNABLE:
		return "runnable";
	case KVM_MP_STATE_UNINITIALIZED:
		return "waiting for INIT/SIPI";
	case KVM_MP_STATE_INIT_RECEIVED:
		return "INIT received";
	case KVM_MP_STATE_HALTED:
		return "halted";
	case KVM_MP_STATE_SIPI_RECEIVED:
		return "SIPI received";
	default:
		return "?";
	}
}

/*
 * The kernel text addresses among the first REPORT_STACK_WORDS words at
 * rsp, translated through the vCPU's own page tables (KVM_TRANSLATE).
 */
#define REPORT_STACK_WORDS 128
#define REPORT_STACK_SHOWN 24
#define GUEST_KERNEL_TEXT  0xffffffff80000000ULL /* x86-64 __START_KERNEL_map */

static size_t stack_text(struct vcpu *v, uint64_t rsp, char *buf, size_t len)
{
	size_t at = 0;
	int shown = 0;

	buf[0] = '\0';
	for (unsigned int i = 0;
	     i < REPORT_STACK_WORDS && shown < REPORT_STACK_SHOWN; i++) {
		struct kvm_translation tr = {
			.linear_address = rsp + 8ULL * i,
		};
		const void *p;
		uint64_t word;

		if (ioctl(v->fd, KVM_TRANSLATE, &tr) < 0 || !tr.valid)
			break;
		p = guest_mem__ptr(&v->vm->mem, tr.physical_address,
				   sizeof(word));
		if (!p)
			break;
		memcpy(&word, p, sizeof(word));
		if (word < GUEST_KERNEL_TEXT || at >= len)
			continue;
		at += (size_t)snprintf(buf + at, len - at, " %#llx",
				       (unsigned long long)word);
		shown++;
	}
	return at;
}

static void report(struct vcpu *v)
{
	struct kvm_mp_state mp = { .mp_state = UINT32_MAX };
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	char stack[REPORT_STACK_SHOWN * 20 + 1];

	if (ioctl(v->fd, KVM_GET_MP_STATE, &mp) < 0 ||
	    ioctl(v->fd, KVM_GET_REGS, &regs) < 0 ||
	    ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0) {
		pr_info("vcpu%u: registers unreadable: %s", v->id,
			strerror(errno));
		return;
	}
	stack_text(v, regs.rsp, stack, sizeof(stack));
	pr_info("vcpu%u: %s, rip %#llx rsp %#llx rflags %#llx cr3 %#llx; "
		"text on the stack:%s",
		v->id, mp_state_name(mp.mp_state),
		(unsigned long long)regs.rip, (unsigned long long)regs.rsp,
		(unsigned long long)regs.rflags,
		(unsigned long long)sregs.cr3, stack[0] ? stack : " none");
}

/* The thread's CPU time in ns, or -1 (not started, or gone). */
static long long thread_cpu_ns(const struct vcpu *v)
{
	struct timespec ts;
	clockid_t cid;

	if (!v->started || pthread_getcpuclockid(v->thread, &cid) ||
	    clock_gettime(cid, &ts))
		return -1;
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

bool vcpu__all_quiet(struct vm *vm, long long busy_ns)
{
	bool quiet = true;

	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vcpu *v = vm->vcpus[i];
		long long now = thread_cpu_ns(v);

		if (now < 0 || !v->cpu_ns || now - v->cpu_ns > busy_ns)
			quiet = false;
		v->cpu_ns = now > 0 ? now : 0;
	}
	return quiet;
}

void vcpu__report_all(struct vm *vm)
{
	atomic_fetch_add(&vm->report_gen, 1);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);
}

static void kicked(struct vcpu *v)
{
	unsigned int gen = atomic_load(&v->vm->pause_gen);
	unsigned int report_gen = atomic_load(&v->vm->report_gen);

	if (v->report_gen != report_gen) {
		v->report_gen = report_gen;
		report(v);
	}

	if (gen & 1)
		park(v, gen);
	else
		probe_halt(v);
}

bool vcpu__snapshot_all_dead(struct vm *vm, unsigned int timeout_ms)
{
	struct timespec deadline;
	unsigned int i;
	bool all_dead;

	pthread_mutex_lock(&vm->pause_lock);
	/* Paused by vm.pause: nothing runs, nothing to decide. */
	if (vm->pause_held) {
		pthread_mutex_unlock(&vm->pause_lock);
		return false;
	}
	atomic_fetch_add(&vm->pause_gen, 1); /* odd: pause requested */
	vm->paused = vm->paused_dead = 0;
	pthread_mutex_unlock(&vm->pause_lock);
	for (i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);

	timespec__deadline_in(&deadline, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&vm->pause_lock);
	while (vm->paused < vm->nr_vcpus &&
	       pthread_cond_timedwait(&vm->pause_cv, &vm->pause_lock,
				      &deadline) != ETIMEDOUT)
		;
	all_dead =
		vm->paused == vm->nr_vcpus && vm->paused_dead == vm->nr_vcpus;
	atomic_fetch_add(&vm->pause_gen, 1); /* even: let them go */
	pthread_cond_broadcast(&vm->pause_cv);
	pthread_mutex_unlock(&vm->pause_lock);
	return all_dead;
}

int vcpu__pause_all(struct vm *vm, unsigned int timeout_ms)
{
	struct timespec deadline;
	unsigned int i;
	int ret = 0;

	pthread_mutex_lock(&vm->pause_lock);
	if (vm->pause_held) {
		pthread_mutex_unlock(&vm->pause_lock);
		return -EALREADY;
	}
	/* A halt snapshot (odd generation) ends in HALT_SNAPSHOT_MS. */
	while (atomic_load(&vm->pause_gen) & 1)
		pthread_cond_wait(&vm->pause_cv, &vm->pause_lock);
	vm->pause_held = true;
	atomic_fetch_add(&vm->pause_gen, 1); /* odd: pause requested */
	vm->paused = vm->paused_dead = 0;
	pthread_mutex_unlock(&vm->pause_lock);
	for (i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);

	timespec__deadline_in(&deadline, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&vm->pause_lock);
	while (vm->paused < vm->nr_vcpus && !atomic_load(&vm->stopping) &&
	       pthread_cond_timedwait(&vm->pause_cv, &vm->pause_lock,
				      &deadline) != ETIMEDOUT)
		;
	if (atomic_load(&vm->stopping))
		ret = -ESHUTDOWN;
	else if (vm->paused < vm->nr_vcpus)
		ret = -ETIMEDOUT;
	if (ret) {
		vm->pause_held = false;
		atomic_fetch_add(&vm->pause_gen, 1); /* even: let them go */
		pthread_cond_broadcast(&vm->pause_cv);
	}
	pthread_mutex_unlock(&vm->pause_lock);
	return ret;
}

int vcpu__resume_all(struct vm *vm)
{
	pthread_mutex_lock(&vm->pause_lock);
	if (!vm->pause_held) {
		pthread_mutex_unlock(&vm->pause_lock);
		return -EALREADY;
	}
	vm->pause_held = false;
	atomic_fetch_add(&vm->pause_gen, 1); /* even: let them go */
	pthread_cond_broadcast(&vm->pause_cv);
	pthread_mutex_unlock(&vm->pause_lock);
	return 0;
}

bool vcpu__paused(struct vm *vm)
{
	bool held;

	pthread_mutex_lock(&vm->pause_lock);
	held = vm->pause_held;
	pthread_mutex_unlock(&vm->pause_lock);
	return held;
}

/* One structure read by ioctl req into the section tag. */
#define SAVE_IOCTL(v, w, req, type, tag, what)             \
	do {                                               \
		type s_;                                   \
		memset(&s_, 0, sizeof(s_));                \
		if (ioctl((v)->fd, req, &s_) < 0) {        \
			*(what) = #req;                    \
			return -errno;                     \
		}                                          \
		snap_writer__add(w, tag, &s_, sizeof(s_)); \
	} while (0)

/*
 * Every MSR of the VM's list that KVM reads for this vCPU: KVM_GET_MSRS
 * stops at the first it cannot read (one the guest's CPUID does not
 * have), so that one is left out and the rest read again.
 */
static int save_msrs(struct vcpu *v, struct snap_writer *w)
{
	const struct kvm_msr_list *list = v->vm->msr_list;
	unsigned int n = list->nmsrs, got = 0, from = 0;
	struct kvm_msrs *in, *out;
	int ret = 0;

	in = calloc(1, sizeof(*in) + n * sizeof(in->entries[0]));
	out = calloc(1, sizeof(*out) + n * sizeof(out->entries[0]));
	if (!in || !out) {
		ret = -ENOMEM;
		goto out;
	}
	while (from < n) {
		int r;

		in->nmsrs = n - from;
		for (unsigned int i = from; i < n; i++)
			in->entries[i - from] = (struct kvm_msr_entry){
				.index = list->indices[i],
			};
		r = ioctl(v->fd, KVM_GET_MSRS, in);
		if (r < 0) {
			ret = -errno;
			goto out;
		}
		memcpy(&out->entries[got], in->entries,
		       (size_t)r * sizeof(in->entries[0]));
		got += (unsigned int)r;
		from += (unsigned int)r +
			1; /* past the one it could not read */
	}
	out->nmsrs = got;
	snap_writer__add(w, SNAP_VCPU_MSRS, out,
			 sizeof(*out) + got * sizeof(out->entries[0]));
out:
	free(in);
	free(out);
	return ret;
}

static int save_xsave(struct vcpu *v, struct snap_writer *w)
{
	size_t size = v->vm->xsave_size ? (size_t)v->vm->xsave_size :
					  sizeof(struct kvm_xsave);
	void *buf = calloc(1, size);
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	if (ioctl(v->fd, v->vm->xsave_size ? KVM_GET_XSAVE2 : KVM_GET_XSAVE,
		  buf) < 0)
		ret = -errno;
	else
		snap_writer__add(w, SNAP_VCPU_XSAVE, buf, size);
	free(buf);
	return ret;
}

#define CPUID_SAVE_MAX 1024 /* entries: what kvm.c asks KVM for at most */

/*
 * KVM_GET_CPUID2 never says how many entries it wrote (nent comes back
 * unchanged on success, and not at all with E2BIG), so ask for exactly
 * the count every vCPU was given (cpuid__setup: vm->cpuid): the section
 * must hold no more, KVM_SET_CPUID2 takes at most KVM_MAX_CPUID_ENTRIES.
 */
static int save_cpuid(struct vcpu *v, struct snap_writer *w)
{
	uint32_t nent = v->vm->cpuid->nent;
	struct kvm_cpuid2 *c;
	int ret = 0;

	if (nent > CPUID_SAVE_MAX)
		return -E2BIG;
	c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));
	if (!c)
		return -ENOMEM;
	c->nent = nent;
	if (ioctl(v->fd, KVM_GET_CPUID2, c) < 0)
		ret = -errno;
	else
		snap_writer__add(w, SNAP_VCPU_CPUID, c,
				 sizeof(*c) + nent * sizeof(c->entries[0]));
	free(c);
	return ret;
}

/*
 * Called on a parked vCPU, from another thread: its thread waits in
 * park() and makes no ioctl meanwhile.
 */
int vcpu__save(struct vcpu *v, struct snap_writer *w, const char **what)
{
	uint32_t id = v->id;
	int ret, khz;

	snap_writer__add(w, SNAP_VCPU_ID, &id, sizeof(id));
	SAVE_IOCTL(v, w, KVM_GET_MP_STATE, struct kvm_mp_state,
		   SNAP_VCPU_MP_STATE, what);
	SAVE_IOCTL(v, w, KVM_GET_REGS, struct kvm_regs, SNAP_VCPU_REGS, what);
	SAVE_IOCTL(v, w, KVM_GET_SREGS, struct kvm_sregs, SNAP_VCPU_SREGS,
		   what);
	if (v->vm->has_xsave) {
		*what = "KVM_GET_XSAVE";
		ret = save_xsave(v, w);
		if (ret)
			return ret;
	} else {
		SAVE_IOCTL(v, w, KVM_GET_FPU, struct kvm_fpu, SNAP_VCPU_FPU,
			   what);
	}
	if (v->vm->has_xcrs)
		SAVE_IOCTL(v, w, KVM_GET_XCRS, struct kvm_xcrs, SNAP_VCPU_XCRS,
			   what);
	*what = "KVM_GET_MSRS";
	ret = save_msrs(v, w);
	if (ret)
		return ret;
	SAVE_IOCTL(v, w, KVM_GET_LAPIC, struct kvm_lapic_state, SNAP_VCPU_LAPIC,
		   what);
	SAVE_IOCTL(v, w, KVM_GET_VCPU_EVENTS, struct kvm_vcpu_events,
		   SNAP_VCPU_EVENTS, what);
	SAVE_IOCTL(v, w, KVM_GET_DEBUGREGS, struct kvm_debugregs,
		   SNAP_VCPU_DEBUGREGS, what);
	*what = "KVM_GET_CPUID2";
	ret = save_cpuid(v, w);
	if (ret)
		return ret;
	khz = ioctl(v->fd, KVM_GET_TSC_KHZ, 0);
	if (khz > 0) {
		uint32_t k = (uint32_t)khz;

		snap_writer__add(w, SNAP_VCPU_TSC_KHZ, &k, sizeof(k));
	}
	*what = "saving";
	return w->err;
}

/* ---- restore ------------------------------------------------------ */

#define MSR_IA32_TSC	 0x00000010
#define MSR_RESTORE_MAX	 4096U /* entries: far above KVM's list */

/* One section of exactly its structure's size, set by ioctl req. */
#define RESTORE_IOCTL(v, p, plen, req, type, tag, what)                   \
	do {                                                              \
		type s_;                                                  \
		const void *d_;                                           \
		int r_ = snap_state__find(p, plen, SNAP_KIND_VCPU, tag,   \
					  sizeof(s_), &d_);               \
		if (r_) {                                                 \
			*(what) = "the " #tag " section";                 \
			return r_;                                        \
		}                                                         \
		memcpy(&s_, d_, sizeof(s_));                              \
		if (ioctl((v)->fd, req, &s_) < 0) {                       \
			*(what) = #req;                                   \
			return -errno;                                    \
		}                                                         \
	} while (0)

static int restore_cpuid(struct vcpu *v, const void *p, size_t plen)
{
	struct kvm_cpuid2 *c;
	const void *d;
	size_t len;
	uint32_t nent;
	int ret;

	ret = snap_state__find_var(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_CPUID, &d,
				   &len);
	if (ret)
		return ret;
	if (len < sizeof(*c))
		return -EINVAL;
	memcpy(&nent, d, sizeof(nent)); /* kvm_cpuid2.nent, first */
	if (nent > CPUID_SAVE_MAX ||
	    len != sizeof(*c) + nent * sizeof(c->entries[0]))
		return -EINVAL;
	c = calloc(1, len);
	if (!c)
		return -ENOMEM;
	memcpy(c, d, len);
	ret = ioctl(v->fd, KVM_SET_CPUID2, c) < 0 ? -errno : 0;
	free(c);
	return ret;
}

/* The guest's TSC rate, when this host's differs (KVM_CAP_TSC_CONTROL). */
static int restore_tsc_khz(struct vcpu *v, const void *p, size_t plen)
{
	const void *d;
	uint32_t khz;
	int cur;

	if (snap_state__find(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_TSC_KHZ,
			     sizeof(khz), &d))
		return 0; /* not saved: KVM could not say */
	memcpy(&khz, d, sizeof(khz));
	cur = ioctl(v->fd, KVM_GET_TSC_KHZ, 0);
	if (cur > 0 && (uint32_t)cur == khz)
		return 0;
	return ioctl(v->fd, KVM_SET_TSC_KHZ, (unsigned long)khz) < 0 ? -errno :
								       0;
}

static int restore_xsave(struct vcpu *v, const void *p, size_t plen)
{
	size_t size = v->vm->xsave_size ? (size_t)v->vm->xsave_size :
					  sizeof(struct kvm_xsave);
	const void *d;
	size_t len;
	void *buf;
	int ret;

	ret = snap_state__find_var(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_XSAVE, &d,
				   &len);
	if (ret)
		return ret;
	/* KVM_SET_XSAVE reads this host's size; what is past len is zero. */
	if (len < sizeof(struct kvm_xsave) || len > size)
		return -EINVAL;
	buf = calloc(1, size);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, d, len);
	ret = ioctl(v->fd, KVM_SET_XSAVE, buf) < 0 ? -errno : 0;
	free(buf);
	return ret;
}

/*
 * Every MSR saved, the TSC moved on by tsc_advance ticks. KVM_SET_MSRS
 * stops at the first it refuses: that one is named, left at KVM's value,
 * and the rest set (a snapshot reads what KVM_GET_MSR_INDEX_LIST lists,
 * and KVM may list one it reads but does not take from user space).
 */
static int restore_msrs(struct vcpu *v, const void *p, size_t plen,
			uint64_t tsc_advance)
{
	struct kvm_msrs *m;
	const void *d;
	uint32_t n, from = 0;
	size_t len;
	int ret;

	ret = snap_state__find_var(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_MSRS, &d,
				   &len);
	if (ret)
		return ret;
	if (len < sizeof(*m))
		return -EINVAL;
	memcpy(&n, d, sizeof(n)); /* kvm_msrs.nmsrs, first */
	if (n > MSR_RESTORE_MAX || len != sizeof(*m) + n * sizeof(m->entries[0]))
		return -EINVAL;
	m = calloc(1, len);
	if (!m)
		return -ENOMEM;
	memcpy(m, d, len);
	for (uint32_t i = 0; i < n; i++)
		if (m->entries[i].index == MSR_IA32_TSC)
			m->entries[i].data += tsc_advance;
	while (from < n) {
		int r;

		memmove(m->entries, m->entries + from,
			(n - from) * sizeof(m->entries[0]));
		n -= from;
		m->nmsrs = n;
		r = ioctl(v->fd, KVM_SET_MSRS, m);
		if (r < 0) {
			ret = -errno;
			break;
		}
		from = (uint32_t)r;
		if (from < n) {
			pr_warn("vcpu%u: MSR %#x: KVM does not take the saved "
				"value %#llx; it keeps its own",
				v->id, m->entries[from].index,
				(unsigned long long)m->entries[from].data);
			from++;
		}
	}
	free(m);
	return ret;
}

/* A system segment's type (SDM vol. 3, "System Descriptor Types"). */
#define SEG_TYPE_TSS64_AVAIL 0x9
#define SEG_TYPE_TSS64_BUSY  0xb

/*
 * The special registers, with the task register's busy bit put back as
 * the CPU keeps it. On AMD, KVM_GET_SREGS reports TR busy (type 11)
 * whatever the VMCB holds, because the VMCB does not reliably show the
 * bit (KVM's svm_get_segment); SVM ignores it, and so does the CPU, long
 * mode having no task switches. QEMU's emulated SVM does not: its I/O
 * permission check wants the available type that its LTR leaves, and
 * refuses every port a guest process was given with ioperm() once a
 * restore has set busy (init's exit-status write faulted, so every
 * restored VM ended in a panic in the harness). On AMD the TR goes back
 * as LTR leaves it there; Intel's VM entry wants it busy, as saved.
 */
static int restore_sregs(struct vcpu *v, const void *p, size_t plen,
			 const char **what)
{
	struct kvm_sregs sregs;
	const void *d;
	int ret;

	*what = "the SNAP_VCPU_SREGS section";
	ret = snap_state__find(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_SREGS,
			       sizeof(sregs), &d);
	if (ret)
		return ret;
	memcpy(&sregs, d, sizeof(sregs));
	if (v->vm->host_svm && sregs.tr.type == SEG_TYPE_TSS64_BUSY)
		sregs.tr.type = SEG_TYPE_TSS64_AVAIL;
	*what = "KVM_SET_SREGS";
	if (ioctl(v->fd, KVM_SET_SREGS, &sregs) < 0)
		return -errno;
	return 0;
}

/*
 * Order (Documentation/snapshots.md, "Restore"): CPUID first (what the
 * rest is checked against), the TSC rate, the special registers before
 * the general ones and the LAPIC (apic_base enables it), the FPU state,
 * the LAPIC before the MSRs (KVM drops a TSC deadline written while the
 * LAPIC timer is not in TSC-deadline mode), then the events, the MP
 * state and the debug registers. Last, tell the guest's kvmclock it was
 * stopped (KVM_KVMCLOCK_CTRL), so that its watchdogs do not count the
 * gap as a lockup: only once kvmclock is set up, hence best effort.
 */
int vcpu__restore(struct vcpu *v, const void *p, size_t plen,
		  uint64_t tsc_advance, const char **what)
{
	const void *d;
	uint32_t id;
	int ret;

	*what = "the SNAP_VCPU_ID section";
	ret = snap_state__find(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_ID,
			       sizeof(id), &d);
	if (ret)
		return ret;
	memcpy(&id, d, sizeof(id));
	if (id != v->id)
		return -EINVAL;
	*what = "KVM_SET_CPUID2";
	ret = restore_cpuid(v, p, plen);
	if (ret)
		return ret;
	*what = "KVM_SET_TSC_KHZ";
	ret = restore_tsc_khz(v, p, plen);
	if (ret)
		return ret;
	ret = restore_sregs(v, p, plen, what);
	if (ret)
		return ret;
	RESTORE_IOCTL(v, p, plen, KVM_SET_REGS, struct kvm_regs, SNAP_VCPU_REGS,
		      what);
	if (v->vm->has_xsave) {
		*what = "KVM_SET_XSAVE";
		ret = restore_xsave(v, p, plen);
		if (ret)
			return ret;
	} else {
		RESTORE_IOCTL(v, p, plen, KVM_SET_FPU, struct kvm_fpu,
			      SNAP_VCPU_FPU, what);
	}
	if (v->vm->has_xcrs &&
	    !snap_state__find(p, plen, SNAP_KIND_VCPU, SNAP_VCPU_XCRS,
			      sizeof(struct kvm_xcrs), &d))
		RESTORE_IOCTL(v, p, plen, KVM_SET_XCRS, struct kvm_xcrs,
			      SNAP_VCPU_XCRS, what);
	RESTORE_IOCTL(v, p, plen, KVM_SET_LAPIC, struct kvm_lapic_state,
		      SNAP_VCPU_LAPIC, what);
	*what = "KVM_SET_MSRS";
	ret = restore_msrs(v, p, plen, tsc_advance);
	if (ret)
		return ret;
	RESTORE_IOCTL(v, p, plen, KVM_SET_VCPU_EVENTS, struct kvm_vcpu_events,
		      SNAP_VCPU_EVENTS, what);
	RESTORE_IOCTL(v, p, plen, KVM_SET_MP_STATE, struct kvm_mp_state,
		      SNAP_VCPU_MP_STATE, what);
	RESTORE_IOCTL(v, p, plen, KVM_SET_DEBUGREGS, struct kvm_debugregs,
		      SNAP_VCPU_DEBUGREGS, what);
	if (ioctl(v->fd, KVM_KVMCLOCK_CTRL, 0) < 0)
		pr_debug("vcpu%u: KVM_KVMCLOCK_CTRL: %s", v->id,
			 strerror(errno));
	*what = "restoring";
	return 0;
}

void vcpu__wake_parked(struct vm *vm)
{
	pthread_mutex_lock(&vm->pause_lock);
	pthread_cond_broadcast(&vm->pause_cv);
	pthread_mutex_unlock(&vm->pause_lock);
}

/*
 * A thread's CPU-time clock by its tid, as the kernel encodes it
 * (include/linux/posix-timers.h: CPUCLOCK_PERTHREAD_MASK, CPUCLOCK_SCHED)
 * and pthread_getcpuclockid() builds it; unlike a pthread_t, a tid is
 * safe to use from another thread while the vCPU ends (EINVAL once gone).
 */
#define CPUCLOCK_SCHED		2
#define CPUCLOCK_PERTHREAD_MASK 4

static clockid_t tid_cpu_clock(int tid)
{
	return (clockid_t)((~(unsigned int)tid) << 3) |
	       CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED;
}

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ULL + (uint64_t)ts->tv_nsec;
}

void vcpu__stats(const struct vcpu *v, struct vcpu_stats *s)
{
	int tid = __atomic_load_n(&v->tid, __ATOMIC_ACQUIRE);
	struct timespec ts;

	for (unsigned int i = 0; i < VCPU_EXIT_NR; i++)
		s->exits[i] = counter__get(&v->exits[i]);
	s->cpu_ns = 0;
	if (__atomic_load_n(&v->ended, __ATOMIC_ACQUIRE))
		s->cpu_ns = v->final_cpu_ns;
	else if (tid && !clock_gettime(tid_cpu_clock(tid), &ts))
		s->cpu_ns = ts_ns(&ts);
}

/* The thread's last CPU time, for vm.metrics once it is gone. */
static void note_end(struct vcpu *v)
{
	struct timespec ts;

	if (!clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		v->final_cpu_ns = ts_ns(&ts);
	__atomic_store_n(&v->ended, true, __ATOMIC_RELEASE);
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *v = arg;
	sigset_t kick;

	__atomic_store_n(&v->tid, (int)gettid(), __ATOMIC_RELEASE);
	sigemptyset(&kick);
	sigaddset(&kick, VCPU_KICK_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &kick, NULL);

	pthread_mutex_lock(&v->vm->pause_lock);
	while (!v->vm->vcpus_released)
		pthread_cond_wait(&v->vm->pause_cv, &v->vm->pause_lock);
	pthread_mutex_unlock(&v->vm->pause_lock);

	while (!atomic_load(&v->vm->stopping)) {
		if (ioctl(v->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				counter__add(&v->exits[VCPU_EXIT_INTR], 1);
				v->run->immediate_exit = 0;
				kicked(v);
				continue;
			}
			pr_err("vcpu%u: KVM_RUN: %s", v->id, strerror(errno));
			vm__stop(v->vm, VM_STOP_ERROR, 0, "KVM_RUN failed");
			break;
		}
		if (!handle_exit(v))
			break;
	}
	note_end(v);
	return NULL;
}

static void kick_handler(int sig)
{
	(void)sig; /* only here to make KVM_RUN return -EINTR */
}

int vcpu__setup_kick(void)
{
	struct sigaction sa = { .sa_handler = kick_handler };

	sigemptyset(&sa.sa_mask);
	return sigaction(VCPU_KICK_SIGNAL, &sa, NULL) < 0 ? -errno : 0;
}

int vcpu__start(struct vcpu *v)
{
	const struct sock_fprog *filter =
		seccomp__filter(v->vm->seccomp, SECCOMP_THREAD_VCPU);
	int ret;

	ret = thread_filter__spawn(&v->thread, filter, vcpu_thread, v);
	if (ret)
		return ret;
	v->started = true;
	return 0;
}

void vcpu__release_all(struct vm *vm)
{
	pthread_mutex_lock(&vm->pause_lock);
	vm->vcpus_released = true;
	pthread_cond_broadcast(&vm->pause_cv);
	pthread_mutex_unlock(&vm->pause_lock);
}

/*
 * immediate_exit first, then the signal: a vCPU about to enter KVM_RUN sees
 * the flag, one inside it is interrupted by the signal. Either way it
 * returns -EINTR and finds vm->stopping set.
 */
void vcpu__kick(struct vcpu *v)
{
	if (!v || !v->started)
		return;
	v->run->immediate_exit = 1;
	pthread_kill(v->thread, VCPU_KICK_SIGNAL);
}

void vcpu__join(struct vcpu *v)
{
	if (!v || !v->started)
		return;
	pthread_join(v->thread, NULL);
	v->started = false;
}
