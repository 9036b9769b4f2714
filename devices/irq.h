/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_IRQ_H
#define KILN_IRQ_H

/* An interrupt line a device drives; the VM decides how it reaches KVM. */
struct irq_line {
	void (*set)(void *opaque, unsigned int gsi, int level);
	void *opaque;
	unsigned int gsi;
};

static inline void irq_line__set(const struct irq_line *l, int level)
{
	if (l->set)
		l->set(l->opaque, l->gsi, level);
}

#endif
