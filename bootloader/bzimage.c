// SPDX-License-Identifier: GPL-2.0
/*
 * bzImage (Documentation/x86/boot.rst): real-mode setup sectors, then the
 * protected-mode kernel that we load at 1 MiB and enter at its 64-bit entry
 * (load address + 0x200), skipping the real-mode code entirely.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "bootloader/boot.h"

#define BZ_SETUP_HEADER_OFF    0x1f1 /* struct setup_header in the file */
#define BZ_JUMP_LEN_OFF	       0x201 /* header length = 0x202 + this byte */
#define BZ_BOOT_FLAG	       0xaa55
#define BZ_HDRS_MAGIC	       0x53726448 /* "HdrS" */
#define BZ_MIN_VERSION	       0x020c	  /* 2.12: xloadflags, 64-bit entry */
#define BZ_SECTOR	       512
#define BZ_DEFAULT_SETUP_SECTS 4     /* setup_sects == 0 means 4 */
#define BZ_ENTRY64_OFF	       0x200 /* startup_64 from the load address */

bool bzimage__is_bzimage(const uint8_t *data, size_t size)
{
	const struct setup_header *h;

	if (size < BZ_SETUP_HEADER_OFF + sizeof(*h))
		return false;
	h = (const struct setup_header *)(data + BZ_SETUP_HEADER_OFF);
	return h->boot_flag == BZ_BOOT_FLAG && h->header == BZ_HDRS_MAGIC;
}

static int check_header(const struct setup_header *h, const char **why)
{
	if (h->version < BZ_MIN_VERSION) {
		*why = "bzImage boot protocol older than 2.12 (no 64-bit "
		       "entry)";
		return -ENOEXEC;
	}
	if (!(h->xloadflags & XLF_KERNEL_64)) {
		*why = "bzImage has no 64-bit entry point (XLF_KERNEL_64)";
		return -ENOEXEC;
	}
	if (!(h->loadflags & LOADED_HIGH)) {
		*why = "zImage (loaded low) is not supported, need a bzImage";
		return -ENOEXEC;
	}
	if (h->pref_address < BOOT_HIMEM_START ||
	    h->pref_address >= MMIO_GAP_START ||
	    h->init_size >= MMIO_GAP_START - h->pref_address) {
		*why = "bzImage preferred address or init size is out of range";
		return -ENOEXEC;
	}
	return 0;
}

int bzimage__parse(struct kernel_image *k, const char **why)
{
	const struct setup_header *h;
	size_t hdr_len, setup_size, payload;
	uint64_t end;
	int ret;

	h = (const struct setup_header *)(k->data + BZ_SETUP_HEADER_OFF);
	hdr_len = BZ_JUMP_LEN_OFF + 1 + k->data[BZ_JUMP_LEN_OFF] -
		  BZ_SETUP_HEADER_OFF;
	if (hdr_len > sizeof(k->hdr))
		hdr_len = sizeof(k->hdr);

	memset(&k->hdr, 0, sizeof(k->hdr));
	memcpy(&k->hdr, h, hdr_len);
	ret = check_header(&k->hdr, why);
	if (ret)
		return ret;

	setup_size = ((size_t)(k->hdr.setup_sects ? k->hdr.setup_sects :
						    BZ_DEFAULT_SETUP_SECTS) +
		      1) *
		     BZ_SECTOR;
	if (setup_size >= k->size) {
		*why = "bzImage is truncated (setup sectors past end of file)";
		return -ENOEXEC;
	}
	payload = k->size - setup_size;
	if (payload >= MMIO_GAP_START - BOOT_HIMEM_START) {
		*why = "bzImage payload is larger than the 32-bit address "
		       "space";
		return -ENOEXEC;
	}

	/*
	 * The decompressor writes the kernel at pref_address (where a
	 * relocatable kernel also lands, LOAD_PHYSICAL_ADDR being its floor)
	 * and needs init_size bytes there.
	 */
	end = BOOT_HIMEM_START + payload;
	if (k->hdr.pref_address + k->hdr.init_size > end)
		end = k->hdr.pref_address + k->hdr.init_size;

	k->format = KERNEL_FORMAT_BZIMAGE;
	k->hdr_len = hdr_len;
	k->entry = BOOT_HIMEM_START + BZ_ENTRY64_OFF;
	k->load_start = BOOT_HIMEM_START;
	k->load_end = end;
	/* Never more than the room reserved at BOOT_CMDLINE_ADDR. */
	k->cmdline_size = k->hdr.cmdline_size < BOOT_CMDLINE_MAX ?
				  k->hdr.cmdline_size :
				  BOOT_CMDLINE_MAX - 1;
	k->initrd_addr_max = k->hdr.initrd_addr_max;
	return 0;
}

void bzimage__load(const struct kernel_image *k, const struct boot_mem *m)
{
	size_t setup_size =
		((size_t)(k->hdr.setup_sects ? k->hdr.setup_sects :
					       BZ_DEFAULT_SETUP_SECTS) +
		 1) *
		BZ_SECTOR;

	boot__copy(m, BOOT_HIMEM_START, k->data + setup_size,
		   k->size - setup_size, 0);
}
