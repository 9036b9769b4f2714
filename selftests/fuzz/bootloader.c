// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz bootloader - the kernel image loader (bootloader/): any bytes as
 * the kernel file, ELF vmlinux or bzImage, then, when it parses, the plan
 * for 256 MiB with an initrd and a command line, and when the kernel is
 * small enough to give it the memory it asks for, its load into guest
 * RAM and the zero page. The input is read as kernel__open maps a file.
 *
 * Checked for every input: a refusal says why; a kernel that parses
 * loads between 1 MiB and the MMIO gap and enters inside what it loads
 * (an ELF's entry); the initrd goes above the
 * kernel and inside RAM; the setup header copied fits its struct.
 */
#include <errno.h>

#include "bootloader/boot.h"
#include "selftests/fuzz/fuzz.h"

#define MIB	     (1ULL << 20)
#define PLAN_MEM     (256 * MIB)
#define PLAN_INITRD  MIB
#define LOAD_RAM_MAX (16 * MIB) /* kernels asking more: not loaded */
#define CMDLINE	     "console=ttyS0 quiet"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kernel_image k = { .path = "fuzz", .data = data, .size = size };
	const char *why = NULL;
	struct boot_plan p;
	struct boot_mem m;
	int ret;

	fuzz__quiet();
	ret = kernel__parse(&k, &why);
	if (ret) {
		fuzz_check(ret < 0 && why && *why);
		return 0;
	}
	fuzz_check(k.format == KERNEL_FORMAT_ELF ||
		   k.format == KERNEL_FORMAT_BZIMAGE);
	fuzz_check(k.load_start >= BOOT_HIMEM_START);
	fuzz_check(k.load_start < k.load_end && k.load_end <= MMIO_GAP_START);
	if (k.format == KERNEL_FORMAT_ELF)
		fuzz_check(k.entry >= k.load_start && k.entry < k.load_end);
	else
		fuzz_check(k.hdr_len <= sizeof(k.hdr));

	ret = boot__plan(&p, &k, PLAN_MEM, PLAN_INITRD, strlen(CMDLINE), &why);
	if (ret) {
		fuzz_check(why && *why);
		return 0;
	}
	fuzz_check(p.initrd_addr >= k.load_end);
	fuzz_check(p.initrd_addr + p.initrd_size <= p.low_ram);
	if (k.load_end > LOAD_RAM_MAX)
		return 0;
	m = (struct boot_mem){ .low_ram = k.load_end };
	m.ram = calloc(1, m.low_ram);
	if (!m.ram)
		return 0;
	fuzz_check(!kernel__load(&k, &m));
	/* The zero page and command line sit below 1 MiB, in any kernel's. */
	p.low_ram = m.low_ram;
	p.initrd_size = 0;
	bootparams__setup(&m, &k, &p, CMDLINE);
	free(m.ram);
	return 0;
}
