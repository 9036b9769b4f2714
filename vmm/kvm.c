// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/kvm: open it, check the API and the capabilities Kiln relies on.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "vmm/cpuid.h"
#include "vmm/kvm.h"
#include "vmm/vm.h"

#define KVM_DEV		  "/dev/kvm"
#define KVM_EXPECTED_API  12
#define CPUID_MAX_ENTRIES 1024

static const struct {
	long cap;
	const char *name;
} required_caps[] = {
	{ KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP" },
	{ KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY" },
	{ KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR" },
	{ KVM_CAP_PIT2, "KVM_CAP_PIT2" },
	{ KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID" },
	{ KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT" },
};

int kvm__open(int *kvm_fd, const char **why)
{
	static char msg[128];
	unsigned int i;
	int fd, ret;

	fd = open(KVM_DEV, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(msg, sizeof(msg), "%s%s", strerror(errno),
			 errno == ENOENT ? " (no KVM on this host; run under "
					   "tools/vmtest)" :
					   "");
		*why = msg;
		return ret;
	}
	if (ioctl(fd, KVM_GET_API_VERSION, 0) != KVM_EXPECTED_API) {
		*why = "unsupported KVM API version (need 12)";
		close(fd);
		return -ENOTSUP;
	}
	for (i = 0; i < ARRAY_SIZE(required_caps); i++) {
		if (ioctl(fd, KVM_CHECK_EXTENSION, required_caps[i].cap) > 0)
			continue;
		snprintf(msg, sizeof(msg), "KVM lacks %s",
			 required_caps[i].name);
		*why = msg;
		close(fd);
		return -ENOTSUP;
	}
	*kvm_fd = fd;
	return 0;
}

static bool cpu_has_hw_virt(void)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/cpuinfo", "re");

	if (!f)
		return true; /* cannot tell: do not cry wolf */
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		found = strstr(line, " vmx") || strstr(line, " svm");
		break;
	}
	fclose(f);
	return found;
}

/*
 * kvm_pvm is a software KVM that emulates a Linux guest instruction by
 * instruction: it cannot run our guests usefully.
 */
bool kvm__is_software(void)
{
	return !access("/sys/module/kvm_pvm", F_OK) && !cpu_has_hw_virt();
}

/* Says so, once, when the host's KVM is the software one. */
void kvm__warn_if_software(void)
{
	if (!kvm__is_software())
		return;
	pr_warn("/dev/kvm is the software PVM backend (kvm_pvm, no vmx/svm): "
		"Linux guests will not run usefully here; use tools/vmtest");
}

#define MSR_LIST_MAX 4096 /* entries: far above what KVM lists (~100) */

int kvm__msr_index_list(int kvm_fd, struct kvm_msr_list **out)
{
	struct kvm_msr_list probe = { .nmsrs = 0 };
	struct kvm_msr_list *l;
	unsigned int n;

	/* E2BIG, with nmsrs set to the count it needs. */
	if (ioctl(kvm_fd, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
		return -errno;
	n = probe.nmsrs;
	if (n > MSR_LIST_MAX)
		return -E2BIG;
	l = calloc(1, sizeof(*l) + n * sizeof(l->indices[0]));
	if (!l)
		return -ENOMEM;
	l->nmsrs = n;
	if (n && ioctl(kvm_fd, KVM_GET_MSR_INDEX_LIST, l) < 0) {
		int err = errno;

		free(l);
		return -err;
	}
	*out = l;
	return 0;
}

int kvm__supported_cpuid(int kvm_fd, struct kvm_cpuid2 **out)
{
	unsigned int nent = 64;
	struct kvm_cpuid2 *c, *grown;
	int err;

	for (;;) {
		c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));
		if (!c)
			return -ENOMEM;
		c->nent = nent;
		if (!ioctl(kvm_fd, KVM_GET_SUPPORTED_CPUID, c))
			break;
		err = errno;
		free(c);
		if (err != E2BIG || nent >= CPUID_MAX_ENTRIES)
			return -err;
		nent *= 2;
	}
	/*
	 * Room for what cpuid.c adds: every vCPU gets this list, so its
	 * count is what a snapshot reads back (vcpu.c, save_cpuid).
	 */
	grown = realloc(c, sizeof(*c) + (c->nent + CPUID_ADDED_MAX) *
						sizeof(c->entries[0]));
	if (!grown) {
		free(c);
		return -ENOMEM;
	}
	c = grown;
	cpuid__add_emulated(kvm_fd, c, c->nent + CPUID_ADDED_MAX);
	*out = c;
	return 0;
}
