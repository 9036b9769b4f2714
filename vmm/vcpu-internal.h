/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VCPU_INTERNAL_H
#define KILN_VCPU_INTERNAL_H

/*
 * What vcpu.c (the thread, its exits and parking) and vcpu-state.c (the
 * registers for a snapshot and a restore) share. Callers see vcpu.h.
 */
#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/metrics.h"
#include "vmm/vcpu.h"

struct vcpu {
	struct vm *vm;
	unsigned int id;
	int fd;
	struct kvm_run *run;
	pthread_t thread;
	bool started;
	atomic_uint dead_round;	 /* last probe round that found it dead */
	unsigned int parked_gen; /* last pause it parked for (lc.lock) */
	unsigned int report_gen; /* last report it logged */
	long long cpu_ns;	 /* its thread's CPU time at the last look */
	/* vm.metrics (lib/counter.h): written by its thread only. */
	uint64_t exits[VCPU_EXIT_NR];
	int tid;	       /* its thread's, 0 until it runs (atomic) */
	uint64_t final_cpu_ns; /* its CPU time as it ended, then */
	bool ended;	       /* final_cpu_ns is set (atomic) */
};

#endif
