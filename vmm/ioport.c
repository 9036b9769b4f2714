// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <string.h>

#include "vmm/ioport.h"

int ioport__register(struct ioport_bus *bus, uint16_t base, uint16_t len,
		     ioport_fn *fn, void *opaque)
{
	unsigned int i;

	if (!len || (uint32_t)base + len > 0x10000)
		return -EINVAL;
	for (i = 0; i < bus->nr; i++) {
		const struct ioport_range *r = &bus->ranges[i];

		if (base < r->base + r->len && r->base < base + len)
			return -EBUSY;
	}
	if (bus->nr == IOPORT_MAX_RANGES)
		return -ENOSPC;
	bus->ranges[bus->nr++] = (struct ioport_range){
		.base = base,
		.len = len,
		.fn = fn,
		.opaque = opaque,
	};
	return 0;
}

bool ioport__access(const struct ioport_bus *bus, uint16_t port, uint8_t *data,
		    unsigned int size, bool is_write)
{
	unsigned int i;

	for (i = 0; i < bus->nr; i++) {
		const struct ioport_range *r = &bus->ranges[i];

		if (port >= r->base && port - r->base < r->len) {
			r->fn(r->opaque, port - r->base, data, size, is_write);
			return true;
		}
	}
	/* Nothing there: a floating ISA bus reads all ones. */
	if (!is_write)
		memset(data, 0xff, size);
	return false;
}
