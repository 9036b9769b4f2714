/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_IOPORT_H
#define KILN_IOPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/log.h"

/*
 * The port I/O bus: devices claim [base, base + len) with one handler. Set up
 * by the builder before any vCPU runs, read-only afterwards, so the vCPU
 * threads look it up without a lock.
 */
typedef void ioport_fn(void *opaque, uint16_t offset, uint8_t *data,
		       unsigned int size, bool is_write);

struct ioport_range {
	uint16_t base;
	uint16_t len;
	ioport_fn *fn;
	void *opaque;
};

#define IOPORT_MAX_RANGES 16

struct ioport_bus {
	struct ioport_range ranges[IOPORT_MAX_RANGES];
	unsigned int nr;
};

int __must_check ioport__register(struct ioport_bus *bus, uint16_t base,
				  uint16_t len, ioport_fn *fn, void *opaque);
/* Returns false when no device claims the port (reads then see 0xff). */
bool ioport__access(const struct ioport_bus *bus, uint16_t port, uint8_t *data,
		    unsigned int size, bool is_write);

#endif
