/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_BOOT_H
#define KILN_BOOT_H

/*
 * The Linux x86-64 boot protocol (Documentation/x86/boot.rst): turn a
 * kernel, an initrd and a command line into guest memory contents and the
 * boot vCPU's registers. Nothing here touches KVM.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <asm/bootparam.h>
#include <linux/kvm.h>

#include "lib/compiler.h"
#include "lib/log.h"

/* Guest-physical layout of the boot structures, all in the first 1 MiB. */
#define BOOT_GDT_ADDR	    0x500ULL
#define BOOT_IDT_ADDR	    0x520ULL
#define BOOT_ZERO_PAGE_ADDR 0x7000ULL
#define BOOT_STACK_TOP	    0x8ff0ULL
#define BOOT_PML4_ADDR	    0x9000ULL
#define BOOT_PDPT_ADDR	    0xa000ULL
#define BOOT_PD_ADDR	    0xb000ULL /* 4 pages: 0xb000-0xefff */
#define BOOT_PD_PAGES	    4	      /* 4 x 1 GiB identity map */
#define BOOT_CMDLINE_ADDR   0x20000ULL
#define BOOT_CMDLINE_MAX    4096ULL	/* room reserved at the address */
#define BOOT_EBDA_START	    0x9fc00ULL	/* MP table lives here */
#define BOOT_HIMEM_START    0x100000ULL /* 1 MiB: protected-mode kernel */

/* The 32-bit MMIO hole devices live in; RAM resumes above 4 GiB. */
#define MMIO_GAP_START 0xc0000000ULL
#define MMIO_GAP_END   0x100000000ULL

/* GDT selectors the 64-bit boot protocol requires (__BOOT_CS, __BOOT_DS). */
#define BOOT_GDT_NULL	 0
#define BOOT_GDT_CODE	 2
#define BOOT_GDT_DATA	 3
#define BOOT_GDT_TSS	 4
#define BOOT_GDT_ENTRIES 5

/* The x86 COMMAND_LINE_SIZE: what an ELF vmlinux (no setup header) takes. */
#define BOOT_ELF_CMDLINE_SIZE 2048U
/* initrd_addr_max the kernel advertises since protocol 2.03 (boot.rst). */
#define BOOT_INITRD_ADDR_MAX_DEFAULT 0x7fffffffULL

#define KILN_MAX_CPUS 64U /* APIC IDs 0..63, IOAPIC takes the next */

enum kernel_format {
	KERNEL_FORMAT_ELF,
	KERNEL_FORMAT_BZIMAGE,
};

/* A kernel file, mapped read-only and parsed; loaded later. */
struct kernel_image {
	const char *path;
	const uint8_t *data; /* read-only mapping of the file */
	size_t size;	     /* bytes */
	enum kernel_format format;
	struct setup_header hdr;  /* bzImage: as found in the file */
	size_t hdr_len;		  /* bzImage: setup header bytes to copy */
	uint64_t entry;		  /* guest-physical 64-bit entry point */
	uint64_t load_start;	  /* lowest guest-physical byte written */
	uint64_t load_end;	  /* highest byte the kernel needs + 1 */
	uint32_t cmdline_size;	  /* max command line bytes, without NUL */
	uint64_t initrd_addr_max; /* highest byte an initrd may occupy */
};

/* Where things go, decided before any guest memory exists. */
struct boot_plan {
	uint64_t low_ram;     /* RAM bytes below the MMIO gap */
	uint64_t high_ram;    /* RAM bytes from 4 GiB up */
	uint64_t initrd_addr; /* 0 when there is no initrd */
	uint64_t initrd_size; /* bytes, including appended archives */
};

/* Guest RAM as the loader sees it: guest-physical 0..low_ram. */
struct boot_mem {
	uint8_t *ram;
	uint64_t low_ram;
	uint64_t high_ram;
};

/* loader.c */
int __must_check kernel__open(struct kernel_image *k, const char *path,
			      const char **why);
void kernel__close(struct kernel_image *k);
int __must_check kernel__parse(struct kernel_image *k, const char **why);
int __must_check boot__plan(struct boot_plan *p, const struct kernel_image *k,
			    uint64_t mem_bytes, uint64_t initrd_bytes,
			    size_t cmdline_len, const char **why);
int __must_check kernel__load(const struct kernel_image *k,
			      const struct boot_mem *m);

/*
 * len bytes at src into guest memory at m->ram + off, then zero more
 * bytes after them: both sides' pages faulted in first, in one call each
 * (fewer page faults, half the load's time; a kernel without
 * MADV_POPULATE_* just copies). Bounds are the caller's.
 */
void boot__copy(const struct boot_mem *m, uint64_t off, const uint8_t *src,
		size_t len, size_t zero);
/* The pages of [p, p + len) faulted in, writable or readable: a hint. */
void boot__prefault(void *p, size_t len, bool write);

/* elf.c and bzimage.c: format back ends used by kernel__parse/load. */
int __must_check elf__parse(struct kernel_image *k, const char **why);
void elf__load(const struct kernel_image *k, const struct boot_mem *m);
int __must_check bzimage__parse(struct kernel_image *k, const char **why);
void bzimage__load(const struct kernel_image *k, const struct boot_mem *m);
bool elf__is_elf(const uint8_t *data, size_t size);
bool bzimage__is_bzimage(const uint8_t *data, size_t size);

/* bootparams.c */
unsigned int e820__build(struct boot_e820_entry *table, unsigned int max,
			 uint64_t low_ram, uint64_t high_ram);
void bootparams__setup(const struct boot_mem *m, const struct kernel_image *k,
		       const struct boot_plan *p, const char *cmdline);

/* pagetable.c */
void pagetable__setup(const struct boot_mem *m);
void pagetable__boot_sregs(struct kvm_sregs *sregs);
void pagetable__boot_regs(struct kvm_regs *regs, uint64_t entry);

/* mptable.c */
int __must_check mptable__setup(const struct boot_mem *m, unsigned int ncpus,
				unsigned int nr_irqs);
#define MPTABLE_IOAPIC_ADDR 0xfec00000U
#define MPTABLE_LAPIC_ADDR  0xfee00000U
#define MPTABLE_NR_IRQS	    24U /* pins on KVM's in-kernel IOAPIC */

/* initrd.c */
#define INITRD_FILE_MAX (1U << 20) /* bytes per file: 1 MiB of arguments */
#define INITRD_NAME_MAX 64U

struct initrd_file {
	const char *name; /* inside the archive: "dir/file" */
	const void *data;
	size_t len;
};

/*
 * A newc archive holding directory dir and the nr files (read-only, in
 * dir), into a new buffer; -E2BIG for a file over INITRD_FILE_MAX.
 */
int __must_check initrd__archive(const char *dir,
				 const struct initrd_file *files,
				 unsigned int nr, uint8_t **out,
				 size_t *out_len);
/* argv's strings, each NUL-terminated, into a new buffer (argv NULL: none). */
int __must_check initrd__join_argv(char *const argv[], char **out,
				   size_t *out_len);

#endif
