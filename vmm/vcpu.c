// SPDX-License-Identifier: GPL-2.0
/*
 * vCPUs: one thread each, running KVM_RUN and dispatching exits. A vCPU is
 * told to stop through kvm_run->immediate_exit plus a signal, never killed.
 * It never stops the VM itself: an exit that ends the guest is reported
 * through the lifecycle's exit event (vmm/vm-state.h), which the run loop
 * reads, and the vCPU leaves the guest. Its registers for a snapshot and
 * a restore are in vcpu-state.c.
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
#include "vmm/cpuid.h"
#include "vmm/metrics.h"
#include "vmm/seccomp.h"
#include "vmm/trace-startup.h"
#include "vmm/vcpu-internal.h"
#include "vmm/vm-state.h"
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

/* The guest is done, or this vCPU failed: the run loop stops the VM. */
static void report_exit(struct vcpu *v, enum vm_stop_reason reason,
			const char *detail)
{
	vm_state__report_exit(&v->vm->lc, reason, 0, detail);
}

static void handle_system_event(struct vcpu *v)
{
	switch (v->run->system_event.type) {
	case KVM_SYSTEM_EVENT_CRASH:
		note_crash(v, VM_CRASH_PANIC);
		report_exit(v, VM_STOP_GUEST_RESET, "guest crashed");
		break;
	default:
		report_exit(v, VM_STOP_GUEST_RESET,
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
		report_exit(v, VM_STOP_GUEST_RESET, "guest triple-faulted");
		return false;
	case KVM_EXIT_SYSTEM_EVENT:
		handle_system_event(v);
		return false;
	case KVM_EXIT_HLT:
		report_exit(v, VM_STOP_GUEST_RESET,
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
	report_exit(v, VM_STOP_ERROR, "vCPU failed");
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

/* PAUSING or PAUSED: a parked vCPU stays parked. */
static bool parking(const struct vm_lifecycle *lc)
{
	enum vm_state st = vm_state__get(lc);

	return st == VM_STATE_PAUSING || st == VM_STATE_PAUSED;
}

/*
 * Park for the request being made (PAUSING): report, then wait to be let
 * go, which is a move out of PAUSING or PAUSED (back to running, or to
 * STOPPING) or a newer request.
 */
static void park(struct vcpu *v)
{
	struct vm_lifecycle *lc = &v->vm->lc;
	bool dead = halted_for_good(v);
	unsigned int gen;

	pthread_mutex_lock(&lc->lock);
	gen = atomic_load(&lc->pause_gen);
	if (vm_state__get(lc) == VM_STATE_PAUSING && v->parked_gen != gen) {
		v->parked_gen = gen;
		lc->paused++;
		lc->paused_dead += dead;
		pthread_cond_broadcast(&lc->cv);
		while (atomic_load(&lc->pause_gen) == gen && parking(lc))
			pthread_cond_wait(&lc->cv, &lc->lock);
	}
	pthread_mutex_unlock(&lc->lock);
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

/*
 * The local APIC's timer (SDM vol. 3, 11.5.4): LVT timer register, initial
 * and current counts; its TSC-deadline MSR (vol. 4). A vCPU halted with
 * its timer overdue and no vector pending was never woken for it.
 */
#define APIC_REG_LVTT	       0x320
#define APIC_REG_TMICT	       0x380
#define APIC_REG_TMCCT	       0x390
#define APIC_REG_IRR	       0x200 /* 8 registers, 16 bytes apart */
#define APIC_LVT_VECTOR	       0xffU
#define APIC_LVT_MASKED	       (1U << 16)
#define APIC_LVTT_MODE_SHIFT   17
#define APIC_LVTT_MODE_MASK    3U
#define APIC_LVTT_TSC_DEADLINE 2U
#define MSR_IA32_TSC	       0x00000010
#define MSR_IA32_TSC_DEADLINE  0x000006e0
#define REPORT_TIMER_MSRS      2

static uint32_t lapic_reg(const struct kvm_lapic_state *l, unsigned int reg)
{
	uint32_t v;

	memcpy(&v, l->regs + reg, sizeof(v));
	return v;
}

/* "timer <mode>[ masked] ..., irr <vectors>" for report(), or "". */
static void timer_text(struct vcpu *v, char *buf, size_t len)
{
	static const char *const mode[] = { "one-shot", "periodic",
					    "tsc-deadline", "?" };
	struct {
		struct kvm_msrs h;
		struct kvm_msr_entry e[REPORT_TIMER_MSRS];
	} m = { .h.nmsrs = REPORT_TIMER_MSRS,
		.e = { { .index = MSR_IA32_TSC },
		       { .index = MSR_IA32_TSC_DEADLINE } } };
	struct kvm_lapic_state l;
	uint32_t lvtt;
	unsigned int md;
	size_t at;

	buf[0] = '\0';
	if (ioctl(v->fd, KVM_GET_LAPIC, &l) < 0)
		return;
	lvtt = lapic_reg(&l, APIC_REG_LVTT);
	md = (lvtt >> APIC_LVTT_MODE_SHIFT) & APIC_LVTT_MODE_MASK;
	at = (size_t)snprintf(buf, len, "; timer %s vector %#x%s", mode[md],
			      lvtt & APIC_LVT_VECTOR,
			      lvtt & APIC_LVT_MASKED ? " masked" : "");
	if (md == APIC_LVTT_TSC_DEADLINE &&
	    ioctl(v->fd, KVM_GET_MSRS, &m) == REPORT_TIMER_MSRS)
		at += (size_t)snprintf(
			buf + at, len - at, " deadline %s%lld tsc",
			m.e[1].data ? "in " : "none, ",
			m.e[1].data ? (long long)(m.e[1].data - m.e[0].data) :
				      0LL);
	else if (md != APIC_LVTT_TSC_DEADLINE)
		at += (size_t)snprintf(buf + at, len - at,
				       " initial %u current %u",
				       lapic_reg(&l, APIC_REG_TMICT),
				       lapic_reg(&l, APIC_REG_TMCCT));
	at += (size_t)snprintf(buf + at, len - at, "; irr");
	for (unsigned int r = 0; r < 8 && at < len; r++) {
		uint32_t irr = lapic_reg(&l, APIC_REG_IRR + 16 * r);

		for (unsigned int b = 0; b < 32 && at < len; b++)
			if (irr & (1U << b))
				at += (size_t)snprintf(buf + at, len - at,
						       " %#x", r * 32 + b);
	}
}

static void report(struct vcpu *v)
{
	struct kvm_mp_state mp = { .mp_state = UINT32_MAX };
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	char stack[REPORT_STACK_SHOWN * 20 + 1], timer[256];

	if (ioctl(v->fd, KVM_GET_MP_STATE, &mp) < 0 ||
	    ioctl(v->fd, KVM_GET_REGS, &regs) < 0 ||
	    ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0) {
		pr_info("vcpu%u: registers unreadable: %s", v->id,
			strerror(errno));
		return;
	}
	stack_text(v, regs.rsp, stack, sizeof(stack));
	timer_text(v, timer, sizeof(timer));
	pr_info("vcpu%u: %s, rip %#llx rsp %#llx rflags %#llx cr3 %#llx%s; "
		"text on the stack:%s",
		v->id, mp_state_name(mp.mp_state), (unsigned long long)regs.rip,
		(unsigned long long)regs.rsp, (unsigned long long)regs.rflags,
		(unsigned long long)sregs.cr3, timer,
		stack[0] ? stack : " none");
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

/*
 * The requester of a pause moves to PAUSING before it kicks: a vCPU that
 * read the state just before takes the kick on its next KVM_RUN.
 */
static void kicked(struct vcpu *v)
{
	unsigned int report_gen = atomic_load(&v->vm->report_gen);

	if (v->report_gen != report_gen) {
		v->report_gen = report_gen;
		report(v);
	}

	if (vm_state__get(&v->vm->lc) == VM_STATE_PAUSING)
		park(v);
	else
		probe_halt(v);
}

/*
 * A request to park every vCPU (lc->lock held): from BOOTING or RUNNING,
 * remembered as where it goes back to.
 */
static int request_park(struct vm *vm)
{
	struct vm_lifecycle *lc = &vm->lc;
	enum vm_state from = vm_state__get(lc);
	int ret;

	ret = vm_state__set_locked(lc, VM_STATE_PAUSING);
	if (ret)
		return ret;
	lc->resume_to = from;
	atomic_fetch_add(&lc->pause_gen, 1);
	lc->paused = lc->paused_dead = 0;
	return 0;
}

static void kick_all(struct vm *vm)
{
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		vcpu__kick(vm->vcpus[i]);
}

/* Until every vCPU parked, the state left PAUSING, or the deadline. */
static void wait_parked(struct vm *vm, const struct timespec *deadline)
{
	struct vm_lifecycle *lc = &vm->lc;

	while (lc->paused < vm->nr_vcpus &&
	       vm_state__get(lc) == VM_STATE_PAUSING &&
	       pthread_cond_timedwait(&lc->cv, &lc->lock, deadline) !=
		       ETIMEDOUT)
		;
}

bool vcpu__snapshot_all_dead(struct vm *vm, unsigned int timeout_ms)
{
	struct vm_lifecycle *lc = &vm->lc;
	struct timespec deadline;
	enum vm_state st;
	bool all_dead;

	pthread_mutex_lock(&lc->lock);
	st = vm_state__get(lc);
	/* Paused by vm.pause, or stopping: nothing to decide. */
	if ((st != VM_STATE_BOOTING && st != VM_STATE_RUNNING) ||
	    request_park(vm)) {
		pthread_mutex_unlock(&lc->lock);
		return false;
	}
	pthread_mutex_unlock(&lc->lock);
	kick_all(vm);

	timespec__deadline_in(&deadline, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&lc->lock);
	wait_parked(vm, &deadline);
	all_dead =
		lc->paused == vm->nr_vcpus && lc->paused_dead == vm->nr_vcpus;
	/* Let them go, unless the VM stops meanwhile. */
	if (vm_state__get(lc) == VM_STATE_PAUSING &&
	    vm_state__set_locked(lc, lc->resume_to))
		all_dead = false;
	pthread_mutex_unlock(&lc->lock);
	return all_dead;
}

int vcpu__pause_all(struct vm *vm, unsigned int timeout_ms)
{
	struct vm_lifecycle *lc = &vm->lc;
	struct timespec deadline;
	enum vm_state st;
	int ret = 0;

	timespec__deadline_in(&deadline, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&lc->lock);
	/*
	 * A halt look (PAUSING) ends in HALT_SNAPSHOT_MS; vCPUs not yet
	 * released (CREATED) are, right after the API thread starts.
	 */
	for (st = vm_state__get(lc);
	     st == VM_STATE_PAUSING || st == VM_STATE_CREATED;
	     st = vm_state__get(lc))
		if (pthread_cond_timedwait(&lc->cv, &lc->lock, &deadline) ==
		    ETIMEDOUT)
			break;
	if (st == VM_STATE_PAUSED)
		ret = -EALREADY;
	else if (vm_state__ending(lc))
		ret = -ESHUTDOWN;
	else if (st != VM_STATE_BOOTING && st != VM_STATE_RUNNING)
		ret = -ETIMEDOUT;
	else
		ret = request_park(vm);
	pthread_mutex_unlock(&lc->lock);
	if (ret)
		return ret;
	kick_all(vm);

	pthread_mutex_lock(&lc->lock);
	wait_parked(vm, &deadline);
	if (vm_state__get(lc) != VM_STATE_PAUSING)
		ret = -ESHUTDOWN; /* only a stop leaves PAUSING meanwhile */
	else if (lc->paused < vm->nr_vcpus)
		ret = vm_state__set_locked(lc, lc->resume_to) ? -EINVAL :
								-ETIMEDOUT;
	else
		ret = vm_state__set_locked(lc, VM_STATE_PAUSED);
	pthread_mutex_unlock(&lc->lock);
	return ret;
}

int vcpu__resume_all(struct vm *vm)
{
	struct vm_lifecycle *lc = &vm->lc;
	int ret = -EALREADY;

	pthread_mutex_lock(&lc->lock);
	if (vm_state__get(lc) == VM_STATE_PAUSED)
		ret = vm_state__set_locked(lc, lc->resume_to);
	pthread_mutex_unlock(&lc->lock);
	return ret;
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
	struct vm_lifecycle *lc = &v->vm->lc;
	sigset_t kick;

	__atomic_store_n(&v->tid, (int)gettid(), __ATOMIC_RELEASE);
	sigemptyset(&kick);
	sigaddset(&kick, VCPU_KICK_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &kick, NULL);

	/*
	 * The gate: every thread's seccomp filter, the main thread's last,
	 * is in before the guest's first instruction (vm-run.c releases the
	 * vCPUs by leaving VM_STATE_CREATED).
	 */
	pthread_mutex_lock(&lc->lock);
	while (vm_state__get(lc) == VM_STATE_CREATED)
		pthread_cond_wait(&lc->cv, &lc->lock);
	pthread_mutex_unlock(&lc->lock);

	/* The first vCPU's first KVM_RUN: the others' marks are ignored. */
	if (!vm_state__ending(lc))
		startup_trace__mark(v->vm->trace, TRACE_FIRST_RUN);
	while (!vm_state__ending(lc)) {
		if (ioctl(v->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				counter__add(&v->exits[VCPU_EXIT_INTR], 1);
				v->run->immediate_exit = 0;
				kicked(v);
				continue;
			}
			pr_err("vcpu%u: KVM_RUN: %s", v->id, strerror(errno));
			report_exit(v, VM_STOP_ERROR, "KVM_RUN failed");
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

/*
 * immediate_exit first, then the signal: a vCPU about to enter KVM_RUN sees
 * the flag, one inside it is interrupted by the signal. Either way it
 * returns -EINTR and finds the VM stopping (vm_state__ending).
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
