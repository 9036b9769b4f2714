// SPDX-License-Identifier: GPL-2.0
/*
 * Uncompressed ELF vmlinux: PT_LOAD segments go to their physical addresses
 * (p_paddr) and e_entry is startup_64's physical address.
 */
#include <elf.h>
#include <errno.h>
#include <string.h>

#include "bootloader/boot.h"

/* A vmlinux has a handful of program headers; anything more is corrupt. */
#define ELF_MAX_PHDRS 64

bool elf__is_elf(const uint8_t *data, size_t size)
{
	return size >= SELFMAG && !memcmp(data, ELFMAG, SELFMAG);
}

static int check_ehdr(const Elf64_Ehdr *eh, size_t size, const char **why)
{
	if (eh->e_ident[EI_CLASS] != ELFCLASS64) {
		*why = "ELF file is not 64-bit (need an ELF64 x86-64 vmlinux)";
		return -ENOEXEC;
	}
	if (eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_machine != EM_X86_64) {
		*why = "ELF file is not for x86-64";
		return -ENOEXEC;
	}
	if (eh->e_type != ET_EXEC) {
		*why = "ELF file is not an executable kernel image";
		return -ENOEXEC;
	}
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0 ||
	    eh->e_phnum > ELF_MAX_PHDRS) {
		*why = "ELF program header table is malformed";
		return -ENOEXEC;
	}
	if (eh->e_phoff > size ||
	    (size - eh->e_phoff) / sizeof(Elf64_Phdr) < eh->e_phnum) {
		*why = "ELF program headers lie past the end of the file";
		return -ENOEXEC;
	}
	return 0;
}

static int check_load(const Elf64_Phdr *ph, size_t size, const char **why)
{
	if (ph->p_offset > size || ph->p_filesz > size - ph->p_offset) {
		*why = "ELF segment lies past the end of the file";
		return -ENOEXEC;
	}
	if (ph->p_filesz > ph->p_memsz) {
		*why = "ELF segment file size exceeds its memory size";
		return -ENOEXEC;
	}
	if (ph->p_paddr < BOOT_HIMEM_START || ph->p_memsz > MMIO_GAP_START ||
	    ph->p_paddr > MMIO_GAP_START - ph->p_memsz) {
		*why = "ELF segment is not loadable between 1 MiB and 3 GiB";
		return -ENOEXEC;
	}
	return 0;
}

/*
 * The headers are copied out of the file: e_phoff is the file's word, so
 * a program header may sit at any offset, and reading it in place would
 * be a misaligned access.
 */
static void ehdr_read(const struct kernel_image *k, Elf64_Ehdr *eh)
{
	memcpy(eh, k->data, sizeof(*eh));
}

/* Program header i; its table was checked to lie in the file. */
static void phdr_read(const struct kernel_image *k, const Elf64_Ehdr *eh,
		      unsigned int i, Elf64_Phdr *ph)
{
	memcpy(ph, k->data + eh->e_phoff + i * sizeof(*ph), sizeof(*ph));
}

int elf__parse(struct kernel_image *k, const char **why)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	unsigned int i, loads = 0;
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	int ret;

	if (k->size < sizeof(eh)) {
		*why = "truncated ELF header";
		return -ENOEXEC;
	}
	ehdr_read(k, &eh);
	ret = check_ehdr(&eh, k->size, why);
	if (ret)
		return ret;

	for (i = 0; i < eh.e_phnum; i++) {
		phdr_read(k, &eh, i, &ph);
		if (ph.p_type != PT_LOAD)
			continue;
		ret = check_load(&ph, k->size, why);
		if (ret)
			return ret;
		if (ph.p_paddr < lo)
			lo = ph.p_paddr;
		if (ph.p_paddr + ph.p_memsz > hi)
			hi = ph.p_paddr + ph.p_memsz;
		loads++;
	}
	if (!loads) {
		*why = "ELF file has no loadable segment";
		return -ENOEXEC;
	}
	if (eh.e_entry < lo || eh.e_entry >= hi) {
		*why = "ELF entry point lies outside the loaded segments";
		return -ENOEXEC;
	}

	k->format = KERNEL_FORMAT_ELF;
	k->entry = eh.e_entry;
	k->load_start = lo;
	k->load_end = hi;
	k->cmdline_size = BOOT_ELF_CMDLINE_SIZE - 1;
	k->initrd_addr_max = BOOT_INITRD_ADDR_MAX_DEFAULT;
	return 0;
}

void elf__load(const struct kernel_image *k, const struct boot_mem *m)
{
	unsigned int i;
	Elf64_Ehdr eh;
	Elf64_Phdr ph;

	/* Bounds were proven by elf__parse and kernel__load. */
	ehdr_read(k, &eh);
	for (i = 0; i < eh.e_phnum; i++) {
		phdr_read(k, &eh, i, &ph);
		if (ph.p_type != PT_LOAD)
			continue;
		boot__copy(m, ph.p_paddr, k->data + ph.p_offset, ph.p_filesz,
			   ph.p_memsz - ph.p_filesz);
	}
}
