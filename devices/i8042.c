// SPDX-License-Identifier: GPL-2.0
#include <string.h>

#include "devices/i8042.h"

/* Registered over 0x60..0x64; the offset tells data from command. */
void i8042__io(void *opaque, uint64_t offset, uint8_t *data, unsigned int size,
	       bool is_write)
{
	struct i8042 *k = opaque;

	if (!is_write) {
		/* No data waiting, input buffer empty: nothing to read. */
		memset(data, 0, size);
		return;
	}
	if (offset == I8042_COMMAND_PORT - I8042_DATA_PORT &&
	    data[0] == I8042_CMD_RESET)
		k->reset(k->opaque);
}
