// SPDX-License-Identifier: GPL-2.0
/*
 * The 16550A model against what Linux's 8250 driver does with it: the
 * scratch and loopback probes, FIFO detection, THR-empty and receive
 * interrupts, and host input held back until the guest listens.
 */
#include <linux/serial_reg.h>
#include <unistd.h>

#include "devices/uart.h"
#include "selftests/kselftest.h"

struct irq_log {
	int level;
	int raises;
};

static void record_irq(void *opaque, unsigned int gsi, int level)
{
	struct irq_log *l = opaque;

	l->raises += level && !l->level;
	l->level = level;
}

FIXTURE(uart)
{
	struct uart *u;
	int out[2];
	struct irq_log irq;
};

FIXTURE_SETUP(uart)
{
	struct irq_line line = { .set = record_irq,
				 .opaque = &self->irq,
				 .gsi = UART_COM1_IRQ };

	ASSERT_EQ(0, pipe(self->out));
	memset(&self->irq, 0, sizeof(self->irq));
	self->u = uart__create(self->out[1], -1, &line, NULL);
	ASSERT_TRUE(self->u != NULL);
}

FIXTURE_TEARDOWN(uart)
{
	uart__destroy(self->u);
	close(self->out[0]);
	close(self->out[1]);
}

static void out8(struct uart *u, uint16_t reg, uint8_t v)
{
	uart__io(u, reg, &v, 1, true);
}

static uint8_t in8(struct uart *u, uint16_t reg)
{
	uint8_t v = 0xaa;

	uart__io(u, reg, &v, 1, false);
	return v;
}

TEST_F(uart, scratch_register)
{
	out8(self->u, UART_SCR, 0xa5);
	EXPECT_EQ(0xa5, in8(self->u, UART_SCR));
	out8(self->u, UART_SCR, 0x5a);
	EXPECT_EQ(0x5a, in8(self->u, UART_SCR));
}

/* autoconfig(): MCR = LOOP | OUT2 | RTS must read back MSR 0x90. */
TEST_F(uart, loopback_probe)
{
	out8(self->u, UART_MCR, UART_MCR_LOOP | UART_MCR_OUT2 | UART_MCR_RTS);
	EXPECT_EQ(0x90, in8(self->u, UART_MSR) & 0xf0);
	out8(self->u, UART_TX, 'z');
	EXPECT_TRUE(in8(self->u, UART_LSR) & UART_LSR_DR);
	EXPECT_EQ('z', in8(self->u, UART_RX));
	EXPECT_FALSE(in8(self->u, UART_LSR) & UART_LSR_DR);
}

TEST_F(uart, fifo_detected_as_16550a)
{
	EXPECT_EQ(0x00, in8(self->u, UART_IIR) & 0xc0);
	out8(self->u, UART_FCR, UART_FCR_ENABLE_FIFO);
	EXPECT_EQ(0xc0, in8(self->u, UART_IIR) & 0xc0);
}

TEST_F(uart, divisor_latch)
{
	out8(self->u, UART_LCR, UART_LCR_DLAB);
	out8(self->u, UART_DLL, 0x01);
	out8(self->u, UART_DLM, 0x02);
	EXPECT_EQ(0x01, in8(self->u, UART_DLL));
	EXPECT_EQ(0x02, in8(self->u, UART_DLM));
	out8(self->u, UART_LCR, UART_LCR_WLEN8);
	EXPECT_EQ(0, in8(self->u, UART_IER));
}

TEST_F(uart, transmit_and_thre_interrupt)
{
	char buf[4];

	EXPECT_EQ(0, self->irq.level);
	out8(self->u, UART_IER, UART_IER_THRI);
	EXPECT_EQ(1, self->irq.level);
	EXPECT_EQ(UART_IIR_THRI, in8(self->u, UART_IIR) & UART_IIR_ID);
	/* Reading IIR acknowledged it. */
	EXPECT_EQ(0, self->irq.level);
	out8(self->u, UART_TX, 'h');
	out8(self->u, UART_TX, 'i');
	EXPECT_EQ(1, self->irq.level);
	ASSERT_EQ(2, read(self->out[0], buf, sizeof(buf)));
	EXPECT_EQ(0, memcmp(buf, "hi", 2));
	EXPECT_EQ(UART_LSR_THRE | UART_LSR_TEMT,
		  in8(self->u, UART_LSR) & (UART_LSR_THRE | UART_LSR_TEMT));
}

TEST_F(uart, input_held_until_guest_listens)
{
	EXPECT_EQ(3U, uart__receive(self->u, (const uint8_t *)"abc", 3));
	/* Not open, not enabled: the driver's startup read drops nothing. */
	EXPECT_EQ(0, in8(self->u, UART_RX));
	EXPECT_FALSE(in8(self->u, UART_LSR) & UART_LSR_DR);
	uart__set_rx_open(self->u, true);
	EXPECT_FALSE(in8(self->u, UART_LSR) & UART_LSR_DR);
	EXPECT_EQ(0, self->irq.level);
	out8(self->u, UART_IER, UART_IER_RDI);
	EXPECT_EQ(1, self->irq.level);
	EXPECT_EQ(UART_IIR_RDI, in8(self->u, UART_IIR) & UART_IIR_ID);
	EXPECT_EQ('a', in8(self->u, UART_RX));
	EXPECT_EQ('b', in8(self->u, UART_RX));
	EXPECT_EQ('c', in8(self->u, UART_RX));
	EXPECT_EQ(0, self->irq.level);
	EXPECT_FALSE(in8(self->u, UART_LSR) & UART_LSR_DR);
}

TEST_F(uart, receive_is_bounded)
{
	static uint8_t big[UART_RX_BUF + 100];

	EXPECT_EQ((size_t)UART_RX_BUF,
		  uart__receive(self->u, big, sizeof(big)));
	EXPECT_EQ(0U, uart__rx_space(self->u));
	EXPECT_EQ(0U, uart__receive(self->u, big, 1));
}

TEST_F(uart, hostile_accesses)
{
	uint8_t wide[4] = { 1, 2, 3, 4 };

	/* Out-of-range offsets and odd sizes are ignored, never fatal. */
	uart__io(self->u, 9, wide, 4, true);
	uart__io(self->u, UART_SCR, wide, 4, true);
	EXPECT_EQ(1, in8(self->u, UART_SCR));
	uart__io(self->u, UART_SCR, wide, 4, false);
	EXPECT_EQ(1, wide[0]);
	EXPECT_EQ(0, wide[3]);
	uart__io(self->u, UART_SCR, wide, 0, true);
}

TEST_HARNESS_MAIN
