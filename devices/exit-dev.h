/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_EXIT_DEV_H
#define KILN_EXIT_DEV_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Kiln's paravirtual system device, two I/O ports the guest init writes
 * (Documentation/guest.md):
 *   0x500 KILN_SYS_READY  outb: init is up, the console is configured and
 *                         host input may flow.
 *   0x501 KILN_SYS_EXIT   outl: the command's final status (0..255: exit
 *                         code, 128+N: killed by signal N); ends the VM.
 */
#define KILN_SYS_BASE	0x500
#define KILN_SYS_READY	0 /* offset from the base */
#define KILN_SYS_EXIT	1
#define KILN_SYS_LEN	2
#define KILN_STATUS_MAX 255

struct exit_dev_ops {
	void (*ready)(void *opaque);
	void (*exit)(void *opaque, uint32_t status);
};

struct exit_dev {
	const struct exit_dev_ops *ops;
	void *opaque;
};

void exit_dev__io(void *opaque, uint64_t offset, uint8_t *data,
		  unsigned int size, bool is_write);

#endif
