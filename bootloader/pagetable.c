// SPDX-License-Identifier: GPL-2.0
/*
 * What the 64-bit boot protocol asks the loader to have set up: long mode
 * with paging on, an identity map covering the kernel, the zero page and the
 * command line, and a GDT with __BOOT_CS (0x10) and __BOOT_DS (0x18).
 */
#include <asm/processor-flags.h>
#include <string.h>

#include "bootloader/boot.h"

#define PTE_PRESENT (1ULL << 0)
#define PTE_RW	    (1ULL << 1)
#define PTE_PS	    (1ULL << 7) /* 2 MiB page in a PD entry */
#define PT_ENTRIES  512
#define PAGE_2M	    (2ULL << 20)

#define EFER_LME (1ULL << 8)  /* long mode enable */
#define EFER_LMA (1ULL << 10) /* long mode active */

/* Descriptor access bytes (SDM vol. 3, 3.4.5). */
#define SEG_TYPE_CODE_XRA 0xb /* execute/read, accessed */
#define SEG_TYPE_DATA_RWA 0x3 /* read/write, accessed */
#define SEG_TYPE_TSS_BUSY 0xb /* 64-bit TSS, busy */

struct seg_desc {
	uint64_t base;
	uint32_t limit; /* in 4 KiB units when g is set */
	uint8_t type, s, dpl, present, avl, l, db, g;
};

static const struct seg_desc boot_gdt[BOOT_GDT_ENTRIES] = {
	[BOOT_GDT_CODE] = { .limit = 0xfffff,
			    .type = SEG_TYPE_CODE_XRA,
			    .s = 1,
			    .present = 1,
			    .l = 1,
			    .g = 1 },
	[BOOT_GDT_DATA] = { .limit = 0xfffff,
			    .type = SEG_TYPE_DATA_RWA,
			    .s = 1,
			    .present = 1,
			    .db = 1,
			    .g = 1 },
	[BOOT_GDT_TSS] = { .limit = 0xfffff,
			   .type = SEG_TYPE_TSS_BUSY,
			   .present = 1,
			   .g = 1 },
};

static uint64_t gdt_entry(const struct seg_desc *d)
{
	if (!d->present)
		return 0;
	return ((d->base & 0xff000000ULL) << 32) | ((uint64_t)d->g << 55) |
	       ((uint64_t)d->db << 54) | ((uint64_t)d->l << 53) |
	       ((uint64_t)d->avl << 52) |
	       (((uint64_t)d->limit & 0xf0000) << 32) |
	       ((uint64_t)d->present << 47) | ((uint64_t)d->dpl << 45) |
	       ((uint64_t)d->s << 44) | ((uint64_t)d->type << 40) |
	       ((d->base & 0x00ffffffULL) << 16) | (d->limit & 0xffff);
}

static void seg_to_kvm(struct kvm_segment *ks, unsigned int idx)
{
	const struct seg_desc *d = &boot_gdt[idx];

	memset(ks, 0, sizeof(*ks));
	ks->base = d->base;
	ks->limit = d->g ? (d->limit << 12) | 0xfff : d->limit;
	ks->selector = idx * 8;
	ks->type = d->type;
	ks->present = d->present;
	ks->dpl = d->dpl;
	ks->db = d->db;
	ks->s = d->s;
	ks->l = d->l;
	ks->g = d->g;
	ks->avl = d->avl;
}

/* GDT, an empty IDT, and a 4 GiB identity map of 2 MiB pages. */
void pagetable__setup(const struct boot_mem *m)
{
	uint64_t *gdt = (uint64_t *)(m->ram + BOOT_GDT_ADDR);
	uint64_t *pml4 = (uint64_t *)(m->ram + BOOT_PML4_ADDR);
	uint64_t *pdpt = (uint64_t *)(m->ram + BOOT_PDPT_ADDR);
	uint64_t *pd = (uint64_t *)(m->ram + BOOT_PD_ADDR);
	unsigned int i;

	for (i = 0; i < BOOT_GDT_ENTRIES; i++)
		gdt[i] = gdt_entry(&boot_gdt[i]);
	memset(m->ram + BOOT_IDT_ADDR, 0, sizeof(uint64_t));

	memset(pml4, 0, 4096);
	memset(pdpt, 0, 4096);
	pml4[0] = BOOT_PDPT_ADDR | PTE_PRESENT | PTE_RW;
	for (i = 0; i < BOOT_PD_PAGES; i++)
		pdpt[i] = (BOOT_PD_ADDR + i * 4096ULL) | PTE_PRESENT | PTE_RW;
	for (i = 0; i < BOOT_PD_PAGES * PT_ENTRIES; i++)
		pd[i] = (i * PAGE_2M) | PTE_PRESENT | PTE_RW | PTE_PS;
}

void pagetable__boot_sregs(struct kvm_sregs *s)
{
	seg_to_kvm(&s->cs, BOOT_GDT_CODE);
	seg_to_kvm(&s->ds, BOOT_GDT_DATA);
	s->es = s->fs = s->gs = s->ss = s->ds;
	seg_to_kvm(&s->tr, BOOT_GDT_TSS);

	s->gdt.base = BOOT_GDT_ADDR;
	s->gdt.limit = BOOT_GDT_ENTRIES * sizeof(uint64_t) - 1;
	s->idt.base = BOOT_IDT_ADDR;
	s->idt.limit = sizeof(uint64_t) - 1;

	s->cr0 |= X86_CR0_PE | X86_CR0_PG;
	s->cr3 = BOOT_PML4_ADDR;
	s->cr4 |= X86_CR4_PAE;
	s->efer |= EFER_LME | EFER_LMA;
}

void pagetable__boot_regs(struct kvm_regs *r, uint64_t entry)
{
	memset(r, 0, sizeof(*r));
	r->rflags = X86_EFLAGS_FIXED;
	r->rip = entry;
	r->rsp = BOOT_STACK_TOP;
	r->rbp = BOOT_STACK_TOP;
	r->rsi = BOOT_ZERO_PAGE_ADDR; /* boot.rst: %rsi holds boot_params */
}
