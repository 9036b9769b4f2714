// SPDX-License-Identifier: GPL-2.0
#include <string.h>

#include "devices/exit-dev.h"

void exit_dev__io(void *opaque, uint64_t offset, uint8_t *data,
		  unsigned int size, bool is_write)
{
	struct exit_dev *d = opaque;
	uint32_t v = 0;

	if (!is_write) {
		memset(data, 0xff, size);
		return;
	}
	memcpy(&v, data, size < sizeof(v) ? size : sizeof(v));
	switch (offset) {
	case KILN_SYS_READY:
		d->ops->ready(d->opaque);
		break;
	case KILN_SYS_EXIT:
		/* Only a full 32-bit write counts; garbage is clamped. */
		if (size != sizeof(v))
			break;
		d->ops->exit(d->opaque,
			     v > KILN_STATUS_MAX ? KILN_STATUS_MAX : v);
		break;
	}
}
