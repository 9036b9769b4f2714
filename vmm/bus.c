// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <string.h>

#include "vmm/bus.h"

void bus__init(struct bus *bus, const char *name, uint64_t limit)
{
	memset(bus, 0, sizeof(*bus));
	bus->name = name;
	bus->limit = limit;
}

int bus__register(struct bus *bus, uint64_t base, uint64_t len, bus_fn *fn,
		  void *opaque)
{
	unsigned int i;

	if (!len || !fn || base >= bus->limit || len > bus->limit - base)
		return -EINVAL;
	for (i = 0; i < bus->nr; i++) {
		const struct bus_range *r = &bus->ranges[i];

		if (base < r->base + r->len && r->base < base + len)
			return -EBUSY;
	}
	if (bus->nr == BUS_MAX_RANGES)
		return -ENOSPC;
	bus->ranges[bus->nr++] = (struct bus_range){
		.base = base,
		.len = len,
		.fn = fn,
		.opaque = opaque,
	};
	return 0;
}

int bus__unregister(struct bus *bus, uint64_t base)
{
	unsigned int i;

	for (i = 0; i < bus->nr; i++) {
		if (bus->ranges[i].base != base)
			continue;
		memmove(&bus->ranges[i], &bus->ranges[i + 1],
			(bus->nr - i - 1) * sizeof(bus->ranges[i]));
		bus->nr--;
		return 0;
	}
	return -ENOENT;
}

bool bus__access(const struct bus *bus, uint64_t addr, uint8_t *data,
		 unsigned int size, bool is_write)
{
	unsigned int i;

	for (i = 0; i < bus->nr; i++) {
		const struct bus_range *r = &bus->ranges[i];

		if (addr >= r->base && addr - r->base < r->len) {
			r->fn(r->opaque, addr - r->base, data, size, is_write);
			return true;
		}
	}
	if (!is_write)
		memset(data, 0xff, size);
	return false;
}
