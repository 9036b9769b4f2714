// SPDX-License-Identifier: GPL-2.0
/*
 * A 16550A UART, enough for Linux's 8250 driver to probe it, use its FIFO
 * and run the console tty on interrupts. Transmission is instant: THR is
 * always empty again by the time the guest looks.
 */
#include <errno.h>
#include <linux/serial_reg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/uart.h"

#define UART_IIR_FIFO_BITS 0xc0 /* 16550A with FIFO enabled */
#define UART_MSR_LINES	   0xf0 /* DCD, RI, DSR, CTS */

struct uart {
	pthread_mutex_t lock;	 /* registers and the receive buffer */
	pthread_mutex_t tx_lock; /* order of transmitted bytes */
	int out_fd;
	int space_fd;
	struct uart_log log; /* write NULL: none */
	const atomic_int *stopping;
	struct irq_line irq;

	uint8_t ier, fcr, lcr, mcr, msr, scr, dll, dlm;
	bool thr_ipending; /* THR-empty interrupt not yet acknowledged */
	bool rx_open;	   /* host input may be shown to the guest */

	uint8_t rx[UART_RX_BUF]; /* ring of host input */
	size_t rx_head, rx_len;
	int irq_level;
};

struct uart *uart__create(int out_fd, int space_fd, const struct irq_line *irq,
			  const atomic_int *stopping)
{
	struct uart *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	pthread_mutex_init(&u->lock, NULL);
	pthread_mutex_init(&u->tx_lock, NULL);
	u->out_fd = out_fd;
	u->space_fd = space_fd;
	u->stopping = stopping;
	if (irq)
		u->irq = *irq;
	u->msr = UART_MSR_DCD | UART_MSR_DSR | UART_MSR_CTS;
	u->mcr = UART_MCR_OUT2;
	return u;
}

void uart__set_log(struct uart *u, const struct uart_log *log)
{
	u->log = *log;
}

void uart__destroy(struct uart *u)
{
	if (!u)
		return;
	pthread_mutex_destroy(&u->lock);
	pthread_mutex_destroy(&u->tx_lock);
	free(u);
}

/* Data is visible only once the guest driver listens for it. */
static bool rx_ready(const struct uart *u)
{
	if (u->mcr & UART_MCR_LOOP)
		return u->rx_len > 0;
	return u->rx_open && u->rx_len > 0 && (u->ier & UART_IER_RDI);
}

static uint8_t iir(const struct uart *u)
{
	uint8_t fifo = (u->fcr & UART_FCR_ENABLE_FIFO) ? UART_IIR_FIFO_BITS : 0;

	if ((u->ier & UART_IER_RDI) && rx_ready(u))
		return fifo | UART_IIR_RDI;
	if ((u->ier & UART_IER_THRI) && u->thr_ipending)
		return fifo | UART_IIR_THRI;
	if ((u->ier & UART_IER_MSI) && (u->msr & UART_MSR_ANY_DELTA))
		return fifo | UART_IIR_MSI;
	return fifo | UART_IIR_NO_INT;
}

static void update_irq(struct uart *u)
{
	int level = !(iir(u) & UART_IIR_NO_INT);

	if (level == u->irq_level)
		return;
	u->irq_level = level;
	irq_line__set(&u->irq, level);
}

static void rx_push(struct uart *u, uint8_t c)
{
	if (u->rx_len == UART_RX_BUF)
		return; /* overrun: the byte is lost, as on hardware */
	u->rx[(u->rx_head + u->rx_len) % UART_RX_BUF] = c;
	u->rx_len++;
}

static uint8_t rx_pop(struct uart *u)
{
	uint8_t c;

	if (!rx_ready(u))
		return 0;
	c = u->rx[u->rx_head];
	u->rx_head = (u->rx_head + 1) % UART_RX_BUF;
	u->rx_len--;
	if (!u->rx_len && u->space_fd >= 0) {
		uint64_t one = 1;

		/* Wake the host side to refill; a full counter is harmless. */
		if (write(u->space_fd, &one, sizeof(one)) < 0)
			(void)0;
	}
	return c;
}

/* A kick (EINTR) while blocked on a slow reader: go on unless stopping. */
static bool keep_trying(const struct uart *u)
{
	return errno == EINTR && !(u->stopping && atomic_load(u->stopping));
}

/*
 * Called without the lock: a blocked reader on the host side stalls this
 * vCPU, which is the backpressure we want, but must not stall the main
 * loop's receive path too. An error (reader gone) drops the byte: the guest
 * must keep running.
 */
static void tx_out(struct uart *u, uint8_t c)
{
	while (u->out_fd >= 0 && write(u->out_fd, &c, 1) < 0 && keep_trying(u))
		;
	if (u->log.write)
		u->log.write(u->log.opaque, &c, 1);
}

/* Under the lock: returns true when c must go out through tx_out(). */
static bool tx(struct uart *u, uint8_t c)
{
	u->thr_ipending = true;
	if (u->mcr & UART_MCR_LOOP) {
		rx_push(u, c);
		return false;
	}
	return u->out_fd >= 0 || u->log.write;
}

/* In loopback the modem inputs reflect the modem outputs (16550 spec). */
static uint8_t msr(const struct uart *u)
{
	uint8_t m = u->msr & ~UART_MSR_LINES;

	if (!(u->mcr & UART_MCR_LOOP))
		return u->msr;
	if (u->mcr & UART_MCR_OUT2)
		m |= UART_MSR_DCD;
	if (u->mcr & UART_MCR_OUT1)
		m |= UART_MSR_RI;
	if (u->mcr & UART_MCR_DTR)
		m |= UART_MSR_DSR;
	if (u->mcr & UART_MCR_RTS)
		m |= UART_MSR_CTS;
	return m;
}

/* Returns true when v was transmitted and must be sent out. */
static bool uart_write(struct uart *u, uint16_t off, uint8_t v)
{
	bool dlab = u->lcr & UART_LCR_DLAB;

	switch (off) {
	case UART_TX:
		if (!dlab)
			return tx(u, v);
		u->dll = v;
		break;
	case UART_IER:
		if (dlab) {
			u->dlm = v;
			break;
		}
		/* Enabling THRI with THR empty raises it at once. */
		if (!(u->ier & UART_IER_THRI) && (v & UART_IER_THRI))
			u->thr_ipending = true;
		u->ier = v & 0x0f;
		break;
	case UART_FCR:
		u->fcr = v & (UART_FCR_ENABLE_FIFO | UART_FCR_TRIGGER_MASK);
		break;
	case UART_LCR:
		u->lcr = v;
		break;
	case UART_MCR:
		u->mcr = v & 0x1f;
		break;
	case UART_LSR:
	case UART_MSR:
		break; /* read-only on a 16550A */
	case UART_SCR:
		u->scr = v;
		break;
	}
	return false;
}

static uint8_t uart_read(struct uart *u, uint16_t off)
{
	bool dlab = u->lcr & UART_LCR_DLAB;
	uint8_t v = 0;

	switch (off) {
	case UART_RX:
		v = dlab ? u->dll : rx_pop(u);
		break;
	case UART_IER:
		v = dlab ? u->dlm : u->ier;
		break;
	case UART_IIR:
		v = iir(u);
		/* Reading IIR acknowledges a THR-empty interrupt. */
		if ((v & UART_IIR_ID) == UART_IIR_THRI)
			u->thr_ipending = false;
		break;
	case UART_LCR:
		v = u->lcr;
		break;
	case UART_MCR:
		v = u->mcr;
		break;
	case UART_LSR:
		v = UART_LSR_THRE | UART_LSR_TEMT;
		if (rx_ready(u))
			v |= UART_LSR_DR;
		break;
	case UART_MSR:
		v = msr(u);
		u->msr &= ~UART_MSR_ANY_DELTA;
		break;
	case UART_SCR:
		v = u->scr;
		break;
	}
	return v;
}

void uart__io(void *opaque, uint64_t offset, uint8_t *data, unsigned int size,
	      bool is_write)
{
	struct uart *u = opaque;
	bool send;

	/* The 8250 is a byte device; wider accesses touch only byte 0. */
	if (!is_write)
		memset(data, 0, size);
	if (offset >= UART_NR_REGS || !size)
		return;
	if (!is_write) {
		pthread_mutex_lock(&u->lock);
		data[0] = uart_read(u, offset);
		update_irq(u);
		pthread_mutex_unlock(&u->lock);
		return;
	}
	/*
	 * tx_lock keeps transmitted bytes in order across vCPUs while the
	 * slow part, the write to the host, runs outside the register lock
	 * that the main loop's receive path also takes. Order: tx_lock, lock.
	 */
	if (offset == UART_TX)
		pthread_mutex_lock(&u->tx_lock);
	pthread_mutex_lock(&u->lock);
	send = uart_write(u, offset, data[0]);
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	if (send)
		tx_out(u, data[0]);
	if (offset == UART_TX)
		pthread_mutex_unlock(&u->tx_lock);
}

size_t uart__receive(struct uart *u, const uint8_t *buf, size_t n)
{
	size_t i;

	pthread_mutex_lock(&u->lock);
	for (i = 0; i < n && u->rx_len < UART_RX_BUF; i++)
		rx_push(u, buf[i]);
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	return i;
}

size_t uart__rx_space(struct uart *u)
{
	size_t space;

	pthread_mutex_lock(&u->lock);
	space = UART_RX_BUF - u->rx_len;
	pthread_mutex_unlock(&u->lock);
	return space;
}

void uart__set_rx_open(struct uart *u, bool open)
{
	pthread_mutex_lock(&u->lock);
	u->rx_open = open;
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
}

void uart__save(struct uart *u, struct uart_regs *r)
{
	pthread_mutex_lock(&u->lock);
	*r = (struct uart_regs){
		.ier = u->ier,
		.fcr = u->fcr,
		.lcr = u->lcr,
		.mcr = u->mcr,
		.msr = u->msr,
		.scr = u->scr,
		.dll = u->dll,
		.dlm = u->dlm,
		.thr_ipending = u->thr_ipending,
	};
	pthread_mutex_unlock(&u->lock);
}

void uart__load(struct uart *u, const struct uart_regs *r)
{
	pthread_mutex_lock(&u->lock);
	u->ier = r->ier;
	u->fcr = r->fcr;
	u->lcr = r->lcr;
	u->mcr = r->mcr;
	u->msr = r->msr;
	u->scr = r->scr;
	u->dll = r->dll;
	u->dlm = r->dlm;
	u->thr_ipending = r->thr_ipending != 0;
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
}
