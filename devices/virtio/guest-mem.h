/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_GUEST_MEM_H
#define KILN_VIRTIO_GUEST_MEM_H

#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * What the virtio core sees of guest RAM: up to two guest-physical ranges,
 * each mapped contiguously in the monitor (RAM below the 3 GiB MMIO gap,
 * then the rest from 4 GiB). The VM fills it once, before any device runs,
 * and it does not change afterwards, so readers need no lock.
 */
#define GUEST_MEM_MAX_REGIONS 2

struct guest_mem_region {
	uint64_t gpa;  /* guest-physical start */
	uint64_t size; /* bytes, nonzero */
	uint8_t *host; /* where gpa is mapped in the monitor */
};

struct guest_mem {
	unsigned int nr_regions;
	struct guest_mem_region regions[GUEST_MEM_MAX_REGIONS];
};

void guest_mem__init(struct guest_mem *mem);

/*
 * Add [gpa, gpa + size) mapped at host. -EINVAL for an empty, wrapping or
 * overlapping range, -ENOSPC when every region slot is taken.
 */
int __must_check guest_mem__add(struct guest_mem *mem, uint64_t gpa,
				uint64_t size, void *host);

/*
 * The host address of [gpa, gpa + len) when all of it lies inside one
 * region, else NULL. Never overflows, whatever gpa and len are: this is
 * the check every guest-supplied address goes through.
 */
void *guest_mem__ptr(const struct guest_mem *mem, uint64_t gpa, uint64_t len);

#endif
