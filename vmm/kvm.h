/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_KVM_H
#define KILN_KVM_H

/* vmm/kvm.c: /dev/kvm and capability checks. */
#include <linux/kvm.h>
#include <stdbool.h>

#include "lib/compiler.h"

int __must_check kvm__open(int *kvm_fd, const char **why);
/* /dev/kvm is kvm_pvm on a CPU without vmx/svm: guests will not run. */
bool kvm__is_software(void);
void kvm__warn_if_software(void);
int __must_check kvm__supported_cpuid(int kvm_fd, struct kvm_cpuid2 **out);
/* KVM_GET_MSR_INDEX_LIST, as large as it is (calloc'ed, the caller's). */
int __must_check kvm__msr_index_list(int kvm_fd, struct kvm_msr_list **out);

#endif
