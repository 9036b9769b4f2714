// SPDX-License-Identifier: GPL-2.0
/*
 * bootloader: ELF and bzImage parsing (good and corrupt), boot planning,
 * the zero page and e820 map, page tables and GDT, the MP table and the
 * argv archive. No KVM needed: everything works on plain buffers.
 */
#include <asm/e820.h>
#include <asm/processor-flags.h>
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bootloader/boot.h"
#include "selftests/kselftest.h"
#include "selftests/fake_kernel.h"

#define MiB	 (1ULL << 20)
#define TEST_RAM (64 * MiB)
static int parse(const void *buf, size_t len, struct kernel_image *k,
		 const char **why)
{
	memset(k, 0, sizeof(*k));
	k->data = buf;
	k->size = len;
	*why = NULL;
	return kernel__parse(k, why);
}

TEST(elf_good)
{
	struct fake_elf f;
	struct kernel_image k;
	const char *why;

	make_elf(&f);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	EXPECT_EQ(KERNEL_FORMAT_ELF, k.format);
	EXPECT_EQ(ELF_PADDR, k.entry);
	EXPECT_EQ(ELF_PADDR, k.load_start);
	EXPECT_EQ(ELF_PADDR + ELF_MEMSZ, k.load_end);
	EXPECT_EQ(BOOT_ELF_CMDLINE_SIZE - 1, k.cmdline_size);
}

TEST(elf_load_zeroes_bss)
{
	struct fake_elf f;
	struct kernel_image k;
	struct boot_mem m = { .low_ram = TEST_RAM };
	const char *why;

	make_elf(&f);
	m.ram = malloc(TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	memset(m.ram, 0x55, TEST_RAM);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	ASSERT_EQ(0, kernel__load(&k, &m));
	EXPECT_EQ(0xab, m.ram[ELF_PADDR]);
	EXPECT_EQ(0xab, m.ram[ELF_PADDR + ELF_FILESZ - 1]);
	EXPECT_EQ(0, m.ram[ELF_PADDR + ELF_FILESZ]);
	EXPECT_EQ(0, m.ram[ELF_PADDR + ELF_MEMSZ - 1]);
	EXPECT_EQ(0x55, m.ram[ELF_PADDR + ELF_MEMSZ]);
	free(m.ram);
}

/* Each corruption must be refused with a reason, never crash. */
TEST(elf_corrupt)
{
	struct fake_elf f;
	struct kernel_image k;
	const char *why;
	int i;

	for (i = 0; i < 12; i++) {
		size_t len = sizeof(f);

		make_elf(&f);
		switch (i) {
		case 0:
			f.eh.e_ident[EI_CLASS] = ELFCLASS32;
			break;
		case 1:
			f.eh.e_machine = EM_AARCH64;
			break;
		case 2:
			f.eh.e_type = ET_DYN;
			break;
		case 3:
			f.eh.e_phoff = sizeof(f) - 8;
			break;
		case 4:
			f.eh.e_phnum = 0xffff;
			break;
		case 5:
			f.ph[1].p_filesz = sizeof(f);
			break;
		case 6:
			f.ph[1].p_filesz = ELF_MEMSZ + 1;
			f.ph[1].p_offset = 0;
			break;
		case 7:
			f.ph[1].p_paddr = 0x1000;
			break;
		case 8:
			f.eh.e_entry = 0x100;
			break;
		case 9:
			f.ph[1].p_type = PT_NOTE;
			break;
		case 10:
			len = 20;
			break;
		case 11:
			f.ph[1].p_paddr = UINT64_MAX - 0x1000;
			break;
		}
		EXPECT_EQ(-ENOEXEC, parse(&f, len, &k, &why))
		TH_LOG("corruption %d accepted", i);
		EXPECT_TRUE(why != NULL);
	}
}

TEST(not_a_kernel)
{
	static const char text[] = "#!/bin/sh\necho not a kernel\n";
	static uint8_t zeros[4096];
	struct kernel_image k;
	const char *why;

	EXPECT_EQ(-ENOEXEC, parse(text, sizeof(text), &k, &why));
	EXPECT_STREQ("not an ELF64 x86-64 vmlinux or bzImage", why);
	EXPECT_EQ(-ENOEXEC, parse(zeros, sizeof(zeros), &k, &why));
	EXPECT_EQ(-ENOEXEC, parse(zeros, 3, &k, &why));
}

TEST(bzimage_good)
{
	uint8_t *b = make_bzimage();
	struct boot_mem m = { .low_ram = TEST_RAM };
	struct kernel_image k;
	const char *why;

	ASSERT_EQ(0, parse(b, BZ_SIZE, &k, &why));
	EXPECT_EQ(KERNEL_FORMAT_BZIMAGE, k.format);
	EXPECT_EQ(BOOT_HIMEM_START + 0x200, k.entry);
	EXPECT_EQ(0x1000000ULL + 0x800000, k.load_end);
	EXPECT_EQ(2047U, k.cmdline_size);
	EXPECT_EQ(0x7fffffffULL, k.initrd_addr_max);

	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	ASSERT_EQ(0, kernel__load(&k, &m));
	EXPECT_EQ(0xcd, m.ram[BOOT_HIMEM_START]);
	EXPECT_EQ(0xcd, m.ram[BOOT_HIMEM_START + BZ_SIZE - 5 * 512 - 1]);
	EXPECT_EQ(0, m.ram[BOOT_HIMEM_START + BZ_SIZE - 5 * 512]);
	free(m.ram);
	free(b);
}

TEST(bzimage_corrupt)
{
	struct kernel_image k;
	const char *why;
	int i;

	for (i = 0; i < 6; i++) {
		uint8_t *b = make_bzimage();
		struct setup_header *h = (struct setup_header *)(b + 0x1f1);
		size_t len = BZ_SIZE;
		int want = -ENOEXEC;

		switch (i) {
		case 0:
			h->version = 0x0204;
			break;
		case 1:
			h->xloadflags = 0;
			break;
		case 2:
			h->loadflags = 0;
			break;
		case 3:
			h->setup_sects = 200;
			break;
		case 4:
			h->init_size = 0xfffffff0;
			break;
		case 5:
			h->pref_address = 0;
			break;
		}
		EXPECT_EQ(want, parse(b, len, &k, &why))
		TH_LOG("corruption %d accepted", i);
		EXPECT_TRUE(why != NULL);
		free(b);
	}
}

TEST(bzimage_hostile_cmdline_size_is_clamped)
{
	uint8_t *b = make_bzimage();
	struct setup_header *h = (struct setup_header *)(b + 0x1f1);
	struct kernel_image k;
	const char *why;

	h->cmdline_size = 0xffffffff;
	ASSERT_EQ(0, parse(b, BZ_SIZE, &k, &why));
	EXPECT_LT(k.cmdline_size, (uint32_t)BOOT_CMDLINE_MAX);
	free(b);
}

TEST(plan_places_initrd_high_and_aligned)
{
	struct fake_elf f;
	struct kernel_image k;
	struct boot_plan p;
	const char *why;

	make_elf(&f);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	ASSERT_EQ(0, boot__plan(&p, &k, TEST_RAM, 1000000, 100, &why));
	EXPECT_EQ(TEST_RAM, p.low_ram);
	EXPECT_EQ(0ULL, p.high_ram);
	EXPECT_EQ(0ULL, p.initrd_addr % 4096);
	EXPECT_LE(p.initrd_addr + 1000000, TEST_RAM);
	EXPECT_GT(p.initrd_addr + 4096 + 1000000, TEST_RAM);
	EXPECT_GE(p.initrd_addr, k.load_end);
}

TEST(plan_rejects_what_does_not_fit)
{
	struct fake_elf f;
	struct kernel_image k;
	struct boot_plan p;
	const char *why;

	make_elf(&f);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	EXPECT_EQ(-EFBIG, boot__plan(&p, &k, TEST_RAM, TEST_RAM, 0, &why));
	EXPECT_EQ(-EFBIG, boot__plan(&p, &k, 16 * MiB, 0, 0, &why));
	EXPECT_EQ(-E2BIG,
		  boot__plan(&p, &k, TEST_RAM, 0, BOOT_ELF_CMDLINE_SIZE, &why));
	EXPECT_EQ(0, boot__plan(&p, &k, TEST_RAM, 0, BOOT_ELF_CMDLINE_SIZE - 1,
				&why));
}

TEST(plan_splits_ram_around_the_mmio_gap)
{
	struct fake_elf f;
	struct kernel_image k;
	struct boot_plan p;
	const char *why;

	make_elf(&f);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	ASSERT_EQ(0, boot__plan(&p, &k, 4096 * MiB, 0, 0, &why));
	EXPECT_EQ(MMIO_GAP_START, p.low_ram);
	EXPECT_EQ(4096 * MiB - MMIO_GAP_START, p.high_ram);
}

TEST(e820_layout)
{
	struct boot_e820_entry t[8];
	unsigned int n, i;

	n = e820__build(t, 8, 256 * MiB, 0);
	ASSERT_EQ(3U, n);
	EXPECT_EQ(0ULL, t[0].addr);
	EXPECT_EQ((uint32_t)E820_RAM, t[0].type);
	EXPECT_EQ(BOOT_EBDA_START, t[0].size);
	EXPECT_EQ((uint32_t)E820_RESERVED, t[1].type);
	EXPECT_EQ(BOOT_HIMEM_START, t[2].addr);
	EXPECT_EQ(256 * MiB - BOOT_HIMEM_START, t[2].size);

	n = e820__build(t, 8, MMIO_GAP_START, 1024 * MiB);
	ASSERT_EQ(4U, n);
	EXPECT_EQ(MMIO_GAP_END, t[3].addr);
	EXPECT_EQ(1024 * MiB, t[3].size);
	/* Sorted and never overlapping. */
	for (i = 1; i < n; i++)
		EXPECT_LE(t[i - 1].addr + t[i - 1].size, t[i].addr);
	/* Bounded by the table it is given. */
	EXPECT_EQ(2U, e820__build(t, 2, MMIO_GAP_START, 1024 * MiB));
}

TEST(zero_page_for_elf)
{
	struct fake_elf f;
	struct kernel_image k;
	struct boot_plan p;
	struct boot_mem m = { .low_ram = TEST_RAM };
	struct boot_params *bp;
	const char *why, *cmd = "console=ttyS0 quiet";

	make_elf(&f);
	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	ASSERT_EQ(0, parse(&f, sizeof(f), &k, &why));
	ASSERT_EQ(0, boot__plan(&p, &k, TEST_RAM, 8192, strlen(cmd), &why));
	bootparams__setup(&m, &k, &p, cmd);

	bp = (struct boot_params *)(m.ram + BOOT_ZERO_PAGE_ADDR);
	EXPECT_EQ(0xaa55, bp->hdr.boot_flag);
	EXPECT_EQ(0x53726448U, bp->hdr.header);
	EXPECT_EQ(0xff, bp->hdr.type_of_loader);
	EXPECT_EQ((uint32_t)BOOT_CMDLINE_ADDR, bp->hdr.cmd_line_ptr);
	EXPECT_STREQ(cmd, (char *)m.ram + BOOT_CMDLINE_ADDR);
	EXPECT_EQ((uint32_t)p.initrd_addr, bp->hdr.ramdisk_image);
	EXPECT_EQ(8192U, bp->hdr.ramdisk_size);
	EXPECT_EQ(3, bp->e820_entries);
	/* The zero page layout the kernel reads: e820 table at 0x2d0. */
	EXPECT_EQ(0x2d0UL, offsetof(struct boot_params, e820_table));
	EXPECT_EQ(0x1f1UL, offsetof(struct boot_params, hdr));
	free(m.ram);
}

TEST(zero_page_keeps_bzimage_header)
{
	uint8_t *b = make_bzimage();
	struct kernel_image k;
	struct boot_plan p;
	struct boot_mem m = { .low_ram = TEST_RAM };
	struct boot_params *bp;
	const char *why;

	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	ASSERT_EQ(0, parse(b, BZ_SIZE, &k, &why));
	ASSERT_EQ(0, boot__plan(&p, &k, TEST_RAM, 0, 1, &why));
	bootparams__setup(&m, &k, &p, "x");
	bp = (struct boot_params *)(m.ram + BOOT_ZERO_PAGE_ADDR);
	EXPECT_EQ(0x020f, bp->hdr.version);
	EXPECT_EQ(0x1000000U, bp->hdr.pref_address);
	EXPECT_EQ(0U, bp->hdr.ramdisk_image);
	EXPECT_TRUE(bp->hdr.loadflags & LOADED_HIGH);
	free(m.ram);
	free(b);
}

TEST(page_tables_identity_map_4g)
{
	struct boot_mem m = { .low_ram = TEST_RAM };
	uint64_t *pml4, *pdpt, *pd;
	unsigned int i;

	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	pagetable__setup(&m);
	pml4 = (uint64_t *)(m.ram + BOOT_PML4_ADDR);
	pdpt = (uint64_t *)(m.ram + BOOT_PDPT_ADDR);
	pd = (uint64_t *)(m.ram + BOOT_PD_ADDR);
	EXPECT_EQ(BOOT_PDPT_ADDR | 3, pml4[0]);
	EXPECT_EQ(0ULL, pml4[1]);
	for (i = 0; i < 4; i++)
		EXPECT_EQ((BOOT_PD_ADDR + i * 4096) | 3, pdpt[i]);
	EXPECT_EQ(0ULL, pdpt[4]);
	for (i = 0; i < 4 * 512; i++) {
		/* Every 2 MiB page maps to itself, present, writable, PS. */
		if ((pd[i] & ~0xfffULL) != i * (2 * MiB) ||
		    (pd[i] & 0xfff) != 0x83) {
			EXPECT_EQ(i * (2 * MiB) | 0x83, pd[i]);
			break;
		}
	}
	free(m.ram);
}

TEST(gdt_matches_boot_segments)
{
	struct boot_mem m = { .low_ram = TEST_RAM };
	struct kvm_sregs s;
	struct kvm_regs r;
	uint64_t *gdt;

	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	pagetable__setup(&m);
	memset(&s, 0, sizeof(s));
	pagetable__boot_sregs(&s);
	gdt = (uint64_t *)(m.ram + BOOT_GDT_ADDR);

	/* boot.rst: __BOOT_CS is 0x10, __BOOT_DS is 0x18. */
	EXPECT_EQ(0x10, s.cs.selector);
	EXPECT_EQ(0x18, s.ds.selector);
	EXPECT_EQ(0x18, s.ss.selector);
	EXPECT_EQ(1, s.cs.l);
	EXPECT_EQ(0, s.cs.db);
	EXPECT_EQ(0x00af9b000000ffffULL, gdt[2]);
	EXPECT_EQ(0x00cf93000000ffffULL, gdt[3]);
	EXPECT_EQ(0ULL, gdt[0]);
	EXPECT_TRUE(s.cr0 & X86_CR0_PE);
	EXPECT_TRUE(s.cr0 & X86_CR0_PG);
	EXPECT_TRUE(s.cr4 & X86_CR4_PAE);
	EXPECT_EQ(BOOT_PML4_ADDR, s.cr3);
	EXPECT_EQ((1ULL << 8) | (1ULL << 10), s.efer);

	pagetable__boot_regs(&r, 0x1000000);
	EXPECT_EQ(0x1000000ULL, r.rip);
	EXPECT_EQ(BOOT_ZERO_PAGE_ADDR, r.rsi);
	EXPECT_EQ(2ULL, r.rflags);
	free(m.ram);
}

static uint8_t sum(const uint8_t *p, size_t n)
{
	uint8_t s = 0;

	while (n--)
		s += *p++;
	return s;
}

TEST(mptable_lists_every_cpu)
{
	struct boot_mem m = { .low_ram = TEST_RAM };
	const uint8_t *mpf, *mpc, *e;
	unsigned int cpus = 0, ioapics = 0, ints = 0;
	uint16_t len;

	m.ram = calloc(1, TEST_RAM);
	ASSERT_TRUE(m.ram != NULL);
	ASSERT_EQ(0, mptable__setup(&m, 4, MPTABLE_NR_IRQS));
	mpf = m.ram + BOOT_EBDA_START;
	ASSERT_EQ(0, memcmp(mpf, "_MP_", 4));
	EXPECT_EQ(0, sum(mpf, 16));
	ASSERT_EQ(BOOT_EBDA_START + 16, *(const uint32_t *)(mpf + 4));
	mpc = m.ram + BOOT_EBDA_START + 16;
	ASSERT_EQ(0, memcmp(mpc, "PCMP", 4));
	memcpy(&len, mpc + 4, 2);
	EXPECT_EQ(0, sum(mpc, len));

	for (e = mpc + 44; e < mpc + len;) {
		switch (e[0]) {
		case 0:
			EXPECT_EQ(cpus, e[1]); /* APIC ID = index */
			EXPECT_EQ(cpus == 0, !!(e[3] & 2));
			cpus++;
			e += 20;
			break;
		case 2:
			EXPECT_EQ(4, e[1]);
			ioapics++;
			e += 8;
			break;
		case 3:
			ints++;
			e += 8;
			break;
		default:
			e += 8;
			break;
		}
	}
	EXPECT_EQ(4U, cpus);
	EXPECT_EQ(1U, ioapics);
	EXPECT_EQ(MPTABLE_NR_IRQS, ints);
	EXPECT_EQ(0, mptable__setup(&m, KILN_MAX_CPUS, MPTABLE_NR_IRQS));
	EXPECT_EQ(-EINVAL, mptable__setup(&m, 0, MPTABLE_NR_IRQS));
	EXPECT_EQ(-EINVAL, mptable__setup(&m, KILN_MAX_CPUS + 1, 4));
	free(m.ram);
}

/* One file in dir "kiln". */
static int archive(uint8_t **a, size_t *len, const char *name, const void *data,
		   size_t data_len)
{
	const struct initrd_file f = { name, data, data_len };

	return initrd__archive("kiln", &f, 1, a, len);
}

TEST(argv_archive)
{
	char a0[] = "sh", a1[] = "-c", a2[] = "echo 'a b' \"c\"", a3[] = "";
	char *argv[] = { a0, a1, a2, a3, NULL };
	static const char body[] = "sh\0-c\0echo 'a b' \"c\"\0\0";
	size_t len, joined_len;
	const uint8_t *hit;
	char *joined;
	uint8_t *a;

	ASSERT_EQ(0, initrd__join_argv(argv, &joined, &joined_len));
	EXPECT_EQ(sizeof(body) - 1, joined_len);
	ASSERT_EQ(0, archive(&a, &len, "kiln/argv", joined, joined_len));
	free(joined);
	EXPECT_EQ(0U, len % 4);
	EXPECT_EQ(0, memcmp(a, "070701", 6));
	hit = memmem(a, len, "kiln/argv", 10);
	ASSERT_TRUE(hit != NULL);
	EXPECT_TRUE(memmem(a, len, body, sizeof(body) - 1) != NULL);
	EXPECT_TRUE(memmem(a, len, "TRAILER!!!", 11) != NULL);
	EXPECT_TRUE(memmem(a, len, "kiln/mounts", 11) == NULL);
	free(a);
}

TEST(mounts_archive_without_a_command)
{
	static const char mounts[] = "kiln0\0/workspace\0rw\0";
	uint8_t *a;
	size_t len;

	ASSERT_EQ(0,
		  archive(&a, &len, "kiln/mounts", mounts, sizeof(mounts) - 1));
	EXPECT_EQ(0U, len % 4);
	EXPECT_TRUE(memmem(a, len, "kiln/argv", 9) == NULL);
	EXPECT_TRUE(memmem(a, len, "kiln/mounts", 12) != NULL);
	EXPECT_TRUE(memmem(a, len, mounts, sizeof(mounts) - 1) != NULL);
	free(a);
	EXPECT_EQ(-E2BIG, archive(&a, &len, "kiln/mounts", mounts, 2U << 20));
}

/* Several files in one archive, in order, each byte for byte. */
TEST(archive_of_several_files)
{
	static const char pem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n"
				  "-----END CERTIFICATE-----\n";
	static const struct initrd_file files[] = {
		{ "kiln/argv", "true", 5 },
		{ "kiln/ca.pem", pem, sizeof(pem) - 1 },
	};
	const uint8_t *argv_at, *ca_at;
	uint8_t *a;
	size_t len;

	ASSERT_EQ(0, initrd__archive("kiln", files, 2, &a, &len));
	EXPECT_EQ(0U, len % 4);
	argv_at = memmem(a, len, "kiln/argv", 9);
	ca_at = memmem(a, len, "kiln/ca.pem", 12);
	ASSERT_TRUE(argv_at && ca_at);
	EXPECT_TRUE(argv_at < ca_at);
	EXPECT_TRUE(memmem(a, len, pem, sizeof(pem) - 1) != NULL);
	EXPECT_TRUE(memmem(a, len, "TRAILER!!!", 11) != NULL);
	free(a);
}

TEST(argv_archive_too_large)
{
	char *big = malloc(2 << 20);
	char *argv[] = { big, NULL };
	char *joined = NULL;
	size_t len;

	ASSERT_TRUE(big != NULL);
	memset(big, 'x', (2 << 20) - 1);
	big[(2 << 20) - 1] = 0;
	EXPECT_EQ(-E2BIG, initrd__join_argv(argv, &joined, &len));
	free(big);
}

TEST_HARNESS_MAIN
