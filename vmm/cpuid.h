/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CPUID_H
#define KILN_CPUID_H

/* vmm/cpuid.c: the CPUID each vCPU is given. */
#include <linux/kvm.h>
#include <stdbool.h>

#include "lib/compiler.h"

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
