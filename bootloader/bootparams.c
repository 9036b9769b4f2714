// SPDX-License-Identifier: GPL-2.0
/*
 * The zero page (struct boot_params), its e820 map and the command line.
 */
#include <asm/e820.h>
#include <string.h>

#include "bootloader/boot.h"

#define BOOT_LOADER_UNDEFINED 0xff /* type_of_loader: "other" */
#define BOOT_FLAG	      0xaa55
#define BOOT_HDRS_MAGIC	      0x53726448 /* "HdrS" */
#define BOOT_KERNEL_ALIGN     0x1000000	 /* 16 MiB, like the kernel's */

static unsigned int e820_add(struct boot_e820_entry *t, unsigned int n,
			     unsigned int max, uint64_t addr, uint64_t size,
			     uint32_t type)
{
	if (n >= max || !size)
		return n;
	t[n].addr = addr;
	t[n].size = size;
	t[n].type = type;
	return n + 1;
}

/*
 * Low RAM up to the EBDA, the EBDA/VGA/BIOS hole reserved (the MP table
 * sits at its start), RAM from 1 MiB to the MMIO gap, then RAM above 4 GiB.
 */
unsigned int e820__build(struct boot_e820_entry *t, unsigned int max,
			 uint64_t low_ram, uint64_t high_ram)
{
	unsigned int n = 0;

	n = e820_add(t, n, max, 0, BOOT_EBDA_START, E820_RAM);
	n = e820_add(t, n, max, BOOT_EBDA_START,
		     BOOT_HIMEM_START - BOOT_EBDA_START, E820_RESERVED);
	if (low_ram > BOOT_HIMEM_START)
		n = e820_add(t, n, max, BOOT_HIMEM_START,
			     low_ram - BOOT_HIMEM_START, E820_RAM);
	n = e820_add(t, n, max, MMIO_GAP_END, high_ram, E820_RAM);
	return n;
}

void bootparams__setup(const struct boot_mem *m, const struct kernel_image *k,
		       const struct boot_plan *p, const char *cmdline)
{
	struct boot_params *bp =
		(struct boot_params *)(m->ram + BOOT_ZERO_PAGE_ADDR);
	size_t len = strlen(cmdline);

	memset(bp, 0, sizeof(*bp));
	if (k->format == KERNEL_FORMAT_BZIMAGE) {
		memcpy(&bp->hdr, &k->hdr, k->hdr_len);
	} else {
		bp->hdr.boot_flag = BOOT_FLAG;
		bp->hdr.header = BOOT_HDRS_MAGIC;
		bp->hdr.kernel_alignment = BOOT_KERNEL_ALIGN;
	}
	bp->hdr.type_of_loader = BOOT_LOADER_UNDEFINED;
	bp->hdr.loadflags |= LOADED_HIGH;

	/* boot__plan proved len fits cmdline_size (< BOOT_CMDLINE_MAX). */
	memcpy(m->ram + BOOT_CMDLINE_ADDR, cmdline, len + 1);
	bp->hdr.cmd_line_ptr = BOOT_CMDLINE_ADDR;
	bp->hdr.cmdline_size = len;

	if (p->initrd_size) {
		bp->hdr.ramdisk_image = (uint32_t)p->initrd_addr;
		bp->hdr.ramdisk_size = (uint32_t)p->initrd_size;
	}

	bp->e820_entries =
		e820__build(bp->e820_table, E820_MAX_ENTRIES_ZEROPAGE,
			    p->low_ram, p->high_ram);
}
