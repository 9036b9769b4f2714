/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_CONSOLE_H
#define KILN_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/uart.h"

/*
 * The host end of the serial console: the vmm's stdin feeds the UART,
 * the UART writes to stdout. When stdin is a terminal it is put in raw
 * mode (the guest's tty does the line editing) and restored on destroy;
 * otherwise the guest is asked for a raw tty (kiln.console=raw) and end
 * of input is passed on as the tty's EOF character.
 */
#define CONSOLE_EOF_CHAR   0x04 /* VEOF, ^D */
#define CONSOLE_EOF_REPEAT 8	/* readers that see the end of stdin */

struct console;

struct console *console__create(int in_fd, struct uart *uart);
void console__destroy(struct console *c);

bool console__host_is_tty(const struct console *c);
/* The guest init has configured its tty: host input may flow. */
void console__guest_ready(struct console *c);
/* Ready for host input and not at its end yet. */
bool console__wants_input(struct console *c);
/* Bytes of host input the console can take now (0: wait for room). */
size_t console__input_room(struct console *c);
/* Hand over what was read; n == 0 means end of input. */
void console__input(struct console *c, const uint8_t *buf, size_t n);

#endif
