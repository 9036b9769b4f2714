/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VIRTIO_MMIO_H
#define KILN_VIRTIO_MMIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/virtio/device.h"
#include "lib/log.h"

/*
 * The virtio-mmio transport, version 2 (virtio 1.1, section 4.2.2): a
 * register window per device, registers at 0x000-0x0ff, the device's
 * config space from 0x100. The VM places the window, wires an interrupt
 * line and forwards MMIO exits here; Linux finds the device through the
 * "virtio_mmio.device=" kernel parameter (virtio_mmio__cmdline()).
 */

#define VIRTIO_MMIO_WINDOW_SIZE 0x1000 /* bytes per device */

/* "KILN" in ASCII, as the little-endian register reads it. */
#define VIRTIO_MMIO_KILN_VENDOR_ID 0x4e4c494b

/*
 * A driver access at offset (from the window's base), len bytes, data in
 * the guest's (little-endian) byte order, as in a KVM_EXIT_MMIO. Registers
 * take 32-bit aligned accesses, the config space 8, 16, 32 or 64-bit
 * naturally aligned ones (4.2.2.2); anything else is ignored and reads as
 * zeros, like any offset that holds nothing. Never fails: a misbehaving
 * driver is logged once per device.
 */
void virtio_mmio__read(struct virtio_device *dev, uint64_t offset, void *data,
		       unsigned int len);
void virtio_mmio__write(struct virtio_device *dev, uint64_t offset,
			const void *data, unsigned int len);

/*
 * The same, in the shape of an MMIO bus handler (vmm/bus.h bus_fn), with
 * the struct virtio_device as opaque.
 */
void virtio_mmio__io(void *opaque, uint64_t offset, uint8_t *data,
		     unsigned int size, bool is_write);

/*
 * The kernel parameter that declares the device:
 * "virtio_mmio.device=4K@0xd0000000:5", size in the largest of K/M/G that
 * divides it (what the kernel's memparse reads). Returns its length, or
 * -EINVAL for an empty or wrapping window, -ENOSPC when buf is too short
 * (buf then holds an empty string).
 */
int __must_check virtio_mmio__cmdline(uint64_t base, uint64_t size,
				      unsigned int irq, char *buf, size_t len);

#endif
