/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_I8042_H
#define KILN_I8042_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Just enough of the 8042 keyboard controller for Linux's reboot=k: a
 * status port that never has data and the pulse-reset command.
 */
#define I8042_DATA_PORT	   0x60
#define I8042_COMMAND_PORT 0x64
#define I8042_CMD_RESET	   0xfe /* pulse the CPU reset line */

struct i8042 {
	void (*reset)(void *opaque);
	void *opaque;
};

void i8042__io(void *opaque, uint64_t offset, uint8_t *data, unsigned int size,
	       bool is_write);

#endif
