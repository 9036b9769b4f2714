/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_BUS_H
#define KILN_BUS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"

/*
 * An address bus: devices claim [base, base + len) with one handler. The VM
 * has two, port I/O and MMIO. Set up by the builder before any vCPU runs,
 * read-only afterwards, so the vCPU threads look it up without a lock.
 */
typedef void bus_fn(void *opaque, uint64_t offset, uint8_t *data,
		    unsigned int size, bool is_write);

struct bus_range {
	uint64_t base;
	uint64_t len;
	bus_fn *fn;
	void *opaque;
};

#define BUS_MAX_RANGES 32

struct bus {
	const char *name; /* "pio", "mmio": for messages */
	uint64_t limit;	  /* addresses end here (0x10000 for ports) */
	struct bus_range ranges[BUS_MAX_RANGES];
	unsigned int nr;
};

void bus__init(struct bus *bus, const char *name, uint64_t limit);
int __must_check bus__register(struct bus *bus, uint64_t base, uint64_t len,
			       bus_fn *fn, void *opaque);
/* Frees the range claimed at base: -ENOENT when none starts there. */
int bus__unregister(struct bus *bus, uint64_t base);
/*
 * Returns false when no device claims the address: reads then see all
 * ones (a floating bus), writes vanish. An access that straddles the end
 * of a range goes to that range's device, which bounds its own offsets.
 */
bool bus__access(const struct bus *bus, uint64_t addr, uint8_t *data,
		 unsigned int size, bool is_write);

#endif
