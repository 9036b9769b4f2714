/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_UART_H
#define KILN_UART_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/irq.h"
#include "lib/log.h"

#define UART_COM1_BASE 0x3f8
#define UART_COM1_IRQ  4
#define UART_NR_REGS   8
#define UART_RX_BUF    4096 /* host input held for the guest, bytes */

struct uart;

/*
 * Transmitted bytes go to out_fd; space_fd (eventfd, may be -1) is written
 * whenever the guest drains the receive buffer, so the host can send more.
 * stopping (may be NULL) tells a transmit blocked on a slow reader to give
 * up once the VM is going away.
 */
struct uart *uart__create(int out_fd, int space_fd, const struct irq_line *irq,
			  const atomic_int *stopping);
void uart__destroy(struct uart *u);

/*
 * A second destination for transmitted bytes besides out_fd (the console
 * log, vmm/console-log.h): called with each byte, in order, on the
 * transmitting vCPU's thread under the transmit lock. Set it before any
 * vCPU runs.
 */
struct uart_log {
	void (*write)(void *opaque, const uint8_t *buf, size_t n);
	void *opaque;
};
void uart__set_log(struct uart *u, const struct uart_log *log);

/* Port I/O from a vCPU: offset 0..7 from the base, one byte. */
void uart__io(void *opaque, uint64_t offset, uint8_t *data, unsigned int size,
	      bool is_write);

/* Host input: queue up to n bytes, returns how many were taken. */
size_t uart__receive(struct uart *u, const uint8_t *buf, size_t n);
size_t uart__rx_space(struct uart *u);
/* Until the guest says it is ready, host input is held back. */
void uart__set_rx_open(struct uart *u, bool open);

/*
 * The registers the guest's driver set, for a snapshot (Documentation/
 * snapshots.md): its driver keeps its own copy of IER, so a restored
 * UART must have the same, or the THR-empty interrupt it waits for
 * never comes. Host input held is not kept. Little-endian bytes.
 */
struct uart_regs {
	uint8_t ier, fcr, lcr, mcr, msr, scr, dll, dlm;
	uint8_t thr_ipending; /* 0 or 1 */
	uint8_t reserved[7];  /* zero */
};
void uart__save(struct uart *u, struct uart_regs *r);
/* Before the guest runs, after the irqchip: the line follows the state. */
void uart__load(struct uart *u, const struct uart_regs *r);

#endif
