// SPDX-License-Identifier: GPL-2.0
/*
 * Guest-physical to host translation for the virtio core, with every
 * range check written so that no guest value can make it overflow.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "devices/virtio/guest-mem.h"

void guest_mem__init(struct guest_mem *mem)
{
	memset(mem, 0, sizeof(*mem));
}

/* [a, a + a_len) and [b, b + b_len) share a byte; neither range wraps. */
static bool ranges_overlap(uint64_t a, uint64_t a_len, uint64_t b,
			   uint64_t b_len)
{
	return a < b + b_len && b < a + a_len;
}

int guest_mem__add(struct guest_mem *mem, uint64_t gpa, uint64_t size,
		   void *host)
{
	unsigned int i;

	if (!size || !host || gpa + size < gpa)
		return -EINVAL;
	if (mem->nr_regions >= GUEST_MEM_MAX_REGIONS)
		return -ENOSPC;
	for (i = 0; i < mem->nr_regions; i++) {
		const struct guest_mem_region *r = &mem->regions[i];

		if (ranges_overlap(gpa, size, r->gpa, r->size))
			return -EINVAL;
	}
	mem->regions[mem->nr_regions++] = (struct guest_mem_region){
		.gpa = gpa,
		.size = size,
		.host = host,
	};
	return 0;
}

void *guest_mem__ptr(const struct guest_mem *mem, uint64_t gpa, uint64_t len)
{
	unsigned int i;

	for (i = 0; i < mem->nr_regions && i < GUEST_MEM_MAX_REGIONS; i++) {
		const struct guest_mem_region *r = &mem->regions[i];
		uint64_t off;

		if (gpa < r->gpa)
			continue;
		off = gpa - r->gpa;
		/* off + len <= size, without computing off + len. */
		if (off > r->size || len > r->size - off)
			continue;
		return r->host + off;
	}
	return NULL;
}
