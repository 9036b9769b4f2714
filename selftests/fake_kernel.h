/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_FAKE_KERNEL_H
#define KILN_SELFTESTS_FAKE_KERNEL_H

/*
 * Minimal, well-formed kernel images for tests to load or to corrupt: an
 * ELF64 x86-64 vmlinux with one PT_LOAD and a bzImage with a 2.15 header.
 */
#include <asm/bootparam.h>
#include <elf.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ELF_PADDR  0x1000000ULL
#define ELF_FILESZ 0x2000
#define ELF_MEMSZ  0x5000

struct fake_elf {
	Elf64_Ehdr eh;
	Elf64_Phdr ph[2];
	uint8_t body[ELF_FILESZ];
};

static inline void make_elf(struct fake_elf *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->eh.e_ident, ELFMAG, SELFMAG);
	f->eh.e_ident[EI_CLASS] = ELFCLASS64;
	f->eh.e_ident[EI_DATA] = ELFDATA2LSB;
	f->eh.e_ident[EI_VERSION] = EV_CURRENT;
	f->eh.e_type = ET_EXEC;
	f->eh.e_machine = EM_X86_64;
	f->eh.e_entry = ELF_PADDR;
	f->eh.e_phoff = offsetof(struct fake_elf, ph);
	f->eh.e_phentsize = sizeof(Elf64_Phdr);
	f->eh.e_phnum = 2;
	f->ph[0].p_type = PT_NOTE;
	f->ph[1].p_type = PT_LOAD;
	f->ph[1].p_offset = offsetof(struct fake_elf, body);
	f->ph[1].p_paddr = ELF_PADDR;
	f->ph[1].p_vaddr = 0xffffffff81000000ULL;
	f->ph[1].p_filesz = ELF_FILESZ;
	f->ph[1].p_memsz = ELF_MEMSZ;
	memset(f->body, 0xab, sizeof(f->body));
}

#define BZ_SIZE	       (64 * 1024)
#define BZ_SETUP_SECTS 4

static inline uint8_t *make_bzimage(void)
{
	uint8_t *b = calloc(1, BZ_SIZE);
	struct setup_header *h = (struct setup_header *)(b + 0x1f1);

	h->setup_sects = BZ_SETUP_SECTS;
	h->boot_flag = 0xaa55;
	h->header = 0x53726448;
	h->version = 0x020f;
	h->loadflags = LOADED_HIGH;
	h->xloadflags = XLF_KERNEL_64;
	h->pref_address = 0x1000000;
	h->init_size = 0x800000;
	h->cmdline_size = 2047;
	h->initrd_addr_max = 0x7fffffff;
	b[0x201] = 0x6a; /* jump: header runs to 0x26c */
	memset(b + (BZ_SETUP_SECTS + 1) * 512, 0xcd,
	       BZ_SIZE - (BZ_SETUP_SECTS + 1) * 512);
	return b;
}

#endif
