// SPDX-License-Identifier: GPL-2.0
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "devices/console.h"

struct console {
	int in_fd;
	struct uart *uart;
	bool host_tty;
	struct termios saved;
	atomic_bool ready;
	bool eof;
	uint8_t last; /* last byte sent, to close a partial line */
};

struct console *console__create(int in_fd, struct uart *uart)
{
	struct console *c = calloc(1, sizeof(*c));
	struct termios raw;

	if (!c)
		return NULL;
	c->in_fd = in_fd;
	c->uart = uart;
	c->last = '\n';
	c->host_tty = isatty(in_fd) && !tcgetattr(in_fd, &c->saved);
	if (c->host_tty) {
		raw = c->saved;
		cfmakeraw(&raw);
		/* Keep \n -> \r\n for our own messages on the terminal. */
		raw.c_oflag |= OPOST | ONLCR;
		tcsetattr(in_fd, TCSANOW, &raw);
		/* A terminal user types into a tty: no need to wait. */
		uart__set_rx_open(uart, true);
		atomic_store(&c->ready, true);
	}
	return c;
}

void console__destroy(struct console *c)
{
	if (!c)
		return;
	if (c->host_tty)
		tcsetattr(c->in_fd, TCSANOW, &c->saved);
	free(c);
}

bool console__host_is_tty(const struct console *c)
{
	return c->host_tty;
}

void console__guest_ready(struct console *c)
{
	atomic_store(&c->ready, true);
	uart__set_rx_open(c->uart, true);
}

bool console__wants_input(struct console *c)
{
	return atomic_load(&c->ready) && !c->eof;
}

size_t console__input_room(struct console *c)
{
	if (!atomic_load(&c->ready) || c->eof)
		return 0;
	return uart__rx_space(c->uart);
}

void console__input(struct console *c, const uint8_t *buf, size_t n)
{
	uint8_t eof[CONSOLE_EOF_REPEAT + 1];
	size_t count = CONSOLE_EOF_REPEAT;

	if (n) {
		/* input_room() bounded n: the UART takes all of it. */
		uart__receive(c->uart, buf, n);
		c->last = buf[n - 1];
		return;
	}
	c->eof = true;
	if (c->host_tty)
		return;
	/*
	 * A tty has no lasting end of file: each VEOF on an empty line ends
	 * one read. Queue several, so that `wc -l; cat` both see the end,
	 * plus one to push out a last line without a newline. Whatever does
	 * not fit is dropped: readers past that point wait, as on a tty.
	 */
	if (c->last != '\n')
		count++;
	memset(eof, CONSOLE_EOF_CHAR, count);
	uart__receive(c->uart, eof, count);
}
