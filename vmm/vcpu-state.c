// SPDX-License-Identifier: GPL-2.0
/*
 * A vCPU's registers for a snapshot (Documentation/snapshots.md, "State
 * files"): read from a parked vCPU by vcpu__save, set on a vCPU just
 * created for a restore by vcpu__restore. The thread that runs it is in
 * vcpu.c; both share vcpu-internal.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lib/log.h"
#include "snapshot/state.h"
#include "vmm/vcpu-internal.h"
#include "vmm/vm.h"

/* ---- save --------------------------------------------------------- */

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

#define MSR_IA32_TSC	0x00000010
#define MSR_RESTORE_MAX 4096U /* entries: far above KVM's list */

/* One section of exactly its structure's size, set by ioctl req. */
#define RESTORE_IOCTL(v, p, plen, req, type, tag, what)                 \
	do {                                                            \
		type s_;                                                \
		const void *d_;                                         \
		int r_ = snap_state__find(p, plen, SNAP_KIND_VCPU, tag, \
					  sizeof(s_), &d_);             \
		if (r_) {                                               \
			*(what) = "the " #tag " section";               \
			return r_;                                      \
		}                                                       \
		memcpy(&s_, d_, sizeof(s_));                            \
		if (ioctl((v)->fd, req, &s_) < 0) {                     \
			*(what) = #req;                                 \
			return -errno;                                  \
		}                                                       \
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
	if (n > MSR_RESTORE_MAX ||
	    len != sizeof(*m) + n * sizeof(m->entries[0]))
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
