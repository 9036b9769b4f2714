/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvm_util.h - helpers for Kiln's KVM selftests (x86-64 only).
 *
 * A test builds a VM with one memory slot at GPA 0 and vCPUs in 64-bit
 * long mode, identity mapped with 2 MiB pages over the first 1 GiB:
 *
 *	0x001000  GDT (null, code64 0x08, data 0x10, TSS 0x18)
 *	0x002000  TSS
 *	0x003000  page tables: PML4, PDPT, PD
 *	0x006000  IDT: every exception is reported as UCALL_EXCEPTION
 *	0x200000  the test binary's loaded image (GUEST_IMAGE_GPA)
 *	16 MiB..  vm_vaddr_alloc() heap
 *	top       one 64 KiB stack per vCPU, growing down from the top
 *
 * Guest RAM is mapped between two PROT_NONE guard areas in the host
 * (GUEST_MEM_GUARD_SIZE each): a device model that strays past either
 * end faults instead of touching other host memory.
 *
 * Guest code is ordinary C in the test binary, marked __guest_code (its
 * own "guest_text" section). Copying one function's bytes is not enough
 * (calls, string literals, constant pools and jump tables live elsewhere),
 * so every PT_LOAD segment of the running executable is copied to
 * GUEST_IMAGE_GPA with its layout kept: code built with -fPIE reaches its
 * callees and .rodata RIP-relatively, so it runs unchanged at the new
 * address. What does not work in the guest: calls into libc or anything
 * else through the PLT/GOT, and data holding absolute host pointers
 * (tables of pointers, relocated at load time). The test Makefile rule
 * builds without the stack protector, which would read the host's TLS.
 * Each vCPU's copy of .data/.bss is the same guest memory: guest globals
 * are shared by all vCPUs and invisible to the host's own copy.
 *
 * The guest reports through a port-I/O mailbox: GUEST_SYNC(), GUEST_DONE(),
 * GUEST_ASSERT() fill a struct ucall on the guest stack and write its
 * guest address with "outl" to UCALL_PIO_PORT; the host sees KVM_EXIT_IO
 * and get_ucall() copies the struct out of guest memory.
 *
 * Host helpers come in pairs: __vm_ioctl() returns the raw result,
 * vm_ioctl() fails the test naming the ioctl. TEST_ASSERT() fails the
 * running test from any helper; a missing /dev/kvm skips it.
 */
#ifndef KILN_SELFTESTS_KVM_UTIL_H
#define KILN_SELFTESTS_KVM_UTIL_H

#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <linux/kvm.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/harness_watch.h"

/* ---- shared by guest and host --------------------------------------- */

#define UCALL_PIO_PORT 0x0510 /* unclaimed: no device in a test VM */
#define UCALL_MAX_ARGS 4

enum ucall_cmd {
	UCALL_NONE, /* the exit was not a ucall */
	UCALL_SYNC,
	UCALL_DONE,
	UCALL_ABORT,
	UCALL_EXCEPTION, /* args: vector, error code, rip, cr2 */
};

/* Lives on the guest stack; the host copies it out of guest memory. */
struct ucall {
	uint64_t cmd;
	uint64_t line;
	uint64_t file; /* guest virtual address of __FILE__ */
	uint64_t expr; /* guest virtual address of the message */
	uint64_t nargs;
	uint64_t args[UCALL_MAX_ARGS];
};

#define GUEST_MEM_SIZE	   (64ULL << 20)
#define GUEST_GDT_GPA	   0x1000ULL
#define GUEST_TSS_GPA	   0x2000ULL
#define GUEST_PML4_GPA	   0x3000ULL
#define GUEST_PDPT_GPA	   0x4000ULL
#define GUEST_PD_GPA	   0x5000ULL
#define GUEST_IDT_GPA	   0x6000ULL
#define GUEST_IDT_VECTORS  32 /* the CPU exceptions */
#define GUEST_IMAGE_GPA	   0x200000ULL
#define GUEST_IMAGE_MAX	   ((16ULL << 20) - GUEST_IMAGE_GPA)
#define GUEST_HEAP_GPA	   (16ULL << 20)
#define GUEST_STACK_SIZE   0x10000ULL
#define KVM_TEST_MAX_VCPUS 16
#define GUEST_HEAP_END	   (GUEST_MEM_SIZE - KVM_TEST_MAX_VCPUS * GUEST_STACK_SIZE)
#define GUEST_PAGE_SIZE	   0x1000ULL
/*
 * Guest RAM sits between two inaccessible (PROT_NONE) host mappings of
 * this size: a device model that reads or writes past either end of guest
 * memory faults at once instead of touching the monitor's own memory.
 */
#define GUEST_MEM_GUARD_SIZE 0x10000ULL

/* ---- guest side ------------------------------------------------------ */

/*
 * Guest functions: kept out of line in their own section, and with loop
 * idiom recognition off so GCC cannot turn a loop into a memset/memcpy
 * call, which would go through the PLT to the host's libc.
 */
#define __guest_code                                          \
	__attribute__((section("guest_text"), noinline, used, \
		       optimize("no-tree-loop-distribute-patterns")))

static inline __attribute__((always_inline)) void
guest_ucall(uint64_t cmd, const char *file, uint64_t line, const char *expr,
	    uint64_t nargs, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3)
{
	struct ucall uc;

	uc.cmd = cmd;
	uc.line = line;
	uc.file = (uintptr_t)file;
	uc.expr = (uintptr_t)expr;
	uc.nargs = nargs;
	uc.args[0] = a0;
	uc.args[1] = a1;
	uc.args[2] = a2;
	uc.args[3] = a3;
	/*
	 * The stack is identity mapped below 4 GiB, so its address fits
	 * in 32 bits. The "memory" clobber orders the stores above before
	 * the exit: the host reads the struct while the vCPU is stopped.
	 */
	asm volatile("outl %0, %w1"
		     :
		     : "a"((uint32_t)(uintptr_t)&uc), "Nd"(UCALL_PIO_PORT)
		     : "memory");
}

static inline __attribute__((always_inline, noreturn)) void guest_halt(void)
{
	/* No interrupt can arrive: each hlt is an exit to the host. */
	for (;;)
		asm volatile("hlt" : : : "memory");
}

#define GUEST_SYNC(arg) \
	guest_ucall(UCALL_SYNC, __FILE__, __LINE__, "", 1, (arg), 0, 0, 0)
#define GUEST_SYNC2(a0, a1) \
	guest_ucall(UCALL_SYNC, __FILE__, __LINE__, "", 2, (a0), (a1), 0, 0)
#define GUEST_DONE() \
	guest_ucall(UCALL_DONE, __FILE__, __LINE__, "", 0, 0, 0, 0, 0)

#define GUEST_FAIL(msg)                                                       \
	do {                                                                  \
		guest_ucall(UCALL_ABORT, __FILE__, __LINE__, msg, 0, 0, 0, 0, \
			    0);                                               \
		guest_halt();                                                 \
	} while (0)

#define GUEST_ASSERT(cond)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			guest_ucall(UCALL_ABORT, __FILE__, __LINE__, #cond, 0, \
				    0, 0, 0, 0);                               \
			guest_halt();                                          \
		}                                                              \
	} while (0)

#define GUEST_ASSERT_EQ(a, b)                                           \
	do {                                                            \
		uint64_t __ga = (a), __gb = (b);                        \
                                                                        \
		if (__ga != __gb) {                                     \
			guest_ucall(UCALL_ABORT, __FILE__, __LINE__,    \
				    #a " == " #b, 2, __ga, __gb, 0, 0); \
			guest_halt();                                   \
		}                                                       \
	} while (0)

/*
 * Exception entry: one 16-byte stub per vector at guest_exc_stubs + 16 *
 * vector, pushing a zero where the CPU pushes no error code, then the
 * vector; the common part passes vector, error code, rip and cr2 to
 * guest_exception(), on a 16-byte aligned stack.
 */
asm(".pushsection guest_text, \"ax\"\n"
    ".balign 16\n"
    "guest_exc_stubs:\n"
    ".set guest_exc_vec, 0\n"
    ".rept 32\n"
    ".balign 16\n"
    /* The vectors with an error code: 8, 10-14, 17, 21, 29, 30. */
    ".if (guest_exc_vec == 8) || "
    "(guest_exc_vec >= 10 && guest_exc_vec <= 14) || "
    "(guest_exc_vec == 17) || (guest_exc_vec == 21) || "
    "(guest_exc_vec == 29) || (guest_exc_vec == 30)\n"
    ".else\n"
    "pushq $0\n"
    ".endif\n"
    "pushq $guest_exc_vec\n"
    "jmp guest_exc_common\n"
    ".set guest_exc_vec, guest_exc_vec + 1\n"
    ".endr\n"
    "guest_exc_common:\n"
    "movq 0(%rsp), %rdi\n"
    "movq 8(%rsp), %rsi\n"
    "movq 16(%rsp), %rdx\n"
    "movq %cr2, %rcx\n"
    "andq $-16, %rsp\n"
    "call guest_exception\n"
    ".popsection\n");

extern const char guest_exc_stubs[];

static void __guest_code __attribute__((noreturn))
guest_exception(uint64_t vector, uint64_t error, uint64_t rip, uint64_t cr2)
{
	guest_ucall(UCALL_EXCEPTION, __FILE__, __LINE__, "", 4, vector, error,
		    rip, cr2);
	guest_halt();
}

/*
 * Where a guest entry function returns to. Entered by "ret" rather than
 * "call", its stack is 8 bytes off the ABI alignment: realign it.
 */
static void __guest_code __attribute__((force_align_arg_pointer, unused))
guest_code_returned(void)
{
	GUEST_FAIL("guest entry function returned");
}

/* ---- host side ------------------------------------------------------- */

struct kvm_vcpu {
	struct kvm_vm *vm;
	unsigned int id;
	int fd;
	struct kvm_run *run;
};

struct kvm_vm {
	int kvm_fd;
	int fd;
	size_t run_size;      /* mmap size of struct kvm_run */
	uint8_t *mem;	      /* guest physical 0 */
	uint64_t mem_size;    /* bytes */
	uint64_t heap_next;   /* next free GPA for vm_vaddr_alloc */
	uintptr_t image_base; /* host load address of this binary */
	unsigned int nr_vcpus;
	struct kvm_vcpu *vcpus[KVM_TEST_MAX_VCPUS];
};

extern const char __start_guest_text[] __attribute__((weak));
extern const char __stop_guest_text[] __attribute__((weak));

static inline __ksft_printf(4, 5)
	__attribute__((noreturn)) void __test_assert_fail(const char *file,
							  int line,
							  const char *cond,
							  const char *fmt, ...)
{
	char *msg = NULL, *p, *nl;
	va_list ap;

	printf("# ==== Test Assertion Failure ====\n");
	printf("# %s:%d: %s\n", file, line, cond);
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) >= 0) {
		for (p = msg; (nl = strchr(p, '\n')); p = nl + 1)
			printf("# %.*s\n", (int)(nl - p), p);
		printf("# %s\n", p);
		free(msg);
	}
	va_end(ap);
	ksft_test_fail();
}

/*
 * Fails the running test (its teardown still runs) when !cond. The
 * message should carry strerror(errno) itself where errno matters.
 */
#define TEST_ASSERT(cond, fmt, ...)                                        \
	do {                                                               \
		if (!(cond))                                               \
			__test_assert_fail(__FILE__, __LINE__, #cond, fmt, \
					   ##__VA_ARGS__);                 \
	} while (0)

#define __kvm_ioctl(kvm_fd, cmd, arg) ioctl(kvm_fd, cmd, arg)
#define __vm_ioctl(vm, cmd, arg)      ioctl((vm)->fd, cmd, arg)
#define __vcpu_ioctl(vcpu, cmd, arg)  ioctl((vcpu)->fd, cmd, arg)

#define __KVM_IOCTL_CHECKED(fd, cmd, arg, what)                            \
	({                                                                 \
		int __ret = ioctl(fd, cmd, arg);                           \
                                                                           \
		TEST_ASSERT(__ret >= 0, "%s(%s) failed, rc: %d: %s", what, \
			    #cmd, __ret, strerror(errno));                 \
		__ret;                                                     \
	})

#define kvm_ioctl(kvm_fd, cmd, arg) \
	__KVM_IOCTL_CHECKED(kvm_fd, cmd, arg, "kvm ioctl")
#define vm_ioctl(vm, cmd, arg) \
	__KVM_IOCTL_CHECKED((vm)->fd, cmd, arg, "vm ioctl")
#define vcpu_ioctl(vcpu, cmd, arg) \
	__KVM_IOCTL_CHECKED((vcpu)->fd, cmd, arg, "vcpu ioctl")

static inline const char *exit_reason_str(uint32_t reason)
{
	switch (reason) {
	case KVM_EXIT_UNKNOWN:
		return "UNKNOWN";
	case KVM_EXIT_EXCEPTION:
		return "EXCEPTION";
	case KVM_EXIT_IO:
		return "IO";
	case KVM_EXIT_HYPERCALL:
		return "HYPERCALL";
	case KVM_EXIT_DEBUG:
		return "DEBUG";
	case KVM_EXIT_HLT:
		return "HLT";
	case KVM_EXIT_MMIO:
		return "MMIO";
	case KVM_EXIT_SHUTDOWN:
		return "SHUTDOWN";
	case KVM_EXIT_FAIL_ENTRY:
		return "FAIL_ENTRY";
	case KVM_EXIT_INTR:
		return "INTR";
	case KVM_EXIT_INTERNAL_ERROR:
		return "INTERNAL_ERROR";
	case KVM_EXIT_SYSTEM_EVENT:
		return "SYSTEM_EVENT";
	default:
		return "other";
	}
}

/* Host pointer for [gpa, gpa + len) in guest memory, NULL if outside. */
static inline void *__addr_gpa2hva(struct kvm_vm *vm, uint64_t gpa,
				   uint64_t len)
{
	if (gpa >= vm->mem_size || len > vm->mem_size - gpa)
		return NULL;
	return vm->mem + gpa;
}

static inline void *addr_gpa2hva(struct kvm_vm *vm, uint64_t gpa)
{
	void *hva = __addr_gpa2hva(vm, gpa, 1);

	TEST_ASSERT(hva, "GPA %#llx is outside guest memory (%#llx bytes)",
		    (unsigned long long)gpa, (unsigned long long)vm->mem_size);
	return hva;
}

/* Guest virtual addresses are identity mapped. */
static inline void *addr_gva2hva(struct kvm_vm *vm, uint64_t gva)
{
	return addr_gpa2hva(vm, gva);
}

/* Guest address of a host object inside this binary's image. */
static inline uint64_t addr_hva2gva_image(struct kvm_vm *vm, const void *hva)
{
	return GUEST_IMAGE_GPA + ((uintptr_t)hva - vm->image_base);
}

/* A page-aligned block of guest memory; returns its guest address. */
static inline uint64_t vm_vaddr_alloc(struct kvm_vm *vm, uint64_t size)
{
	uint64_t gva = vm->heap_next;

	size = (size + GUEST_PAGE_SIZE - 1) & ~(GUEST_PAGE_SIZE - 1);
	TEST_ASSERT(size <= GUEST_HEAP_END - gva,
		    "guest heap exhausted: %#llx bytes wanted, %#llx left",
		    (unsigned long long)size,
		    (unsigned long long)(GUEST_HEAP_END - gva));
	vm->heap_next += size;
	return gva;
}

/*
 * Copy a string the guest points at out of guest memory, bounded by
 * guest memory and @len: the guest is not trusted to terminate it.
 */
static inline void guest_strncpy(struct kvm_vm *vm, char *dst, size_t len,
				 uint64_t gva)
{
	const char *src = __addr_gpa2hva(vm, gva, 1);
	size_t n;

	if (!src) {
		snprintf(dst, len, "<bad guest pointer %#llx>",
			 (unsigned long long)gva);
		return;
	}
	n = strnlen(src, vm->mem_size - gva);
	if (n >= len)
		n = len - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

struct __guest_image_ctx {
	struct kvm_vm *vm;
	int err;
};

/*
 * n bytes of the test binary's own image, as they are. kvm_hostile links
 * the sanitizers (SAN=1) for the devices it runs, and then memcpy is
 * AddressSanitizer's, which stops at the first redzone between two
 * globals: the image is read whole here on purpose. The volatile read
 * keeps the compiler from making the loop a memcpy call again.
 */
static inline void __guest_image_bytes(uint8_t *dst, const void *src, size_t n)
{
	const volatile uint8_t *s = src;

	for (size_t i = 0; i < n; i++)
		dst[i] = s[i];
}

static inline int __guest_image_copy(struct dl_phdr_info *info, size_t size,
				     void *data)
{
	struct __guest_image_ctx *ctx = data;
	struct kvm_vm *vm = ctx->vm;
	int i;

	/* glibc visits the main program first. */
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		if (ph->p_vaddr > GUEST_IMAGE_MAX ||
		    ph->p_memsz > GUEST_IMAGE_MAX - ph->p_vaddr) {
			ctx->err = -EFBIG;
			return 1;
		}
		__guest_image_bytes(
			vm->mem + GUEST_IMAGE_GPA + ph->p_vaddr,
			(const void *)(info->dlpi_addr + ph->p_vaddr),
			ph->p_memsz);
	}
	vm->image_base = info->dlpi_addr;
	return 1;
}

static inline void vm_load_image(struct kvm_vm *vm)
{
	struct __guest_image_ctx ctx = { .vm = vm };

	dl_iterate_phdr(__guest_image_copy, &ctx);
	TEST_ASSERT(!ctx.err, "test binary does not fit in %#llx bytes",
		    (unsigned long long)GUEST_IMAGE_MAX);
	TEST_ASSERT(vm->image_base, "test binary image not found");
}

/*
 * Identity map the first 1 GiB with 2 MiB pages: one page each of PML4,
 * PDPT and PD, filled in @pt (3 * GUEST_PAGE_SIZE bytes, laid out as at
 * GUEST_PML4_GPA).
 */
_Static_assert(GUEST_PDPT_GPA == GUEST_PML4_GPA + GUEST_PAGE_SIZE &&
		       GUEST_PD_GPA == GUEST_PDPT_GPA + GUEST_PAGE_SIZE,
	       "the page tables are three pages in a row");

static inline void vm_fill_page_tables(uint64_t *pt)
{
	uint64_t *pml4 = pt, *pdpt = pt + 512, *pd = pt + 1024;
	const uint64_t present = 1, writable = 2, huge = 0x80;
	int i;

	memset(pt, 0, 3 * GUEST_PAGE_SIZE);
	pml4[0] = GUEST_PDPT_GPA | present | writable;
	pdpt[0] = GUEST_PD_GPA | present | writable;
	for (i = 0; i < 512; i++)
		pd[i] = ((uint64_t)i << 21) | present | writable | huge;
}

#define GDT_CODE64_SEL 0x08
#define GDT_DATA_SEL   0x10
#define GDT_TSS_SEL    0x18
#define GDT_ENTRIES    5 /* the TSS descriptor takes two */
#define TSS_LIMIT      0x67

/* The same descriptors the vCPUs get through KVM_SET_SREGS. */
static inline void vm_fill_gdt(uint64_t *gdt)
{
	uint64_t base = GUEST_TSS_GPA;

	gdt[0] = 0;
	gdt[1] = 0x00af9b000000ffffULL; /* code: P, DPL 0, L, exec/read */
	gdt[2] = 0x00cf93000000ffffULL; /* data: P, DPL 0, D/B, G, r/w */
	gdt[3] = TSS_LIMIT | (base & 0xffffff) << 16 |
		 0xbULL << 40 | /* busy 64-bit TSS */
		 1ULL << 47 |	/* present */
		 ((base >> 24) & 0xff) << 56;
	gdt[4] = base >> 32;
}

/* 64-bit interrupt gates to the guest_exc_stubs, on the current stack. */
static inline void vm_fill_idt(struct kvm_vm *vm, uint64_t *idt)
{
	uint64_t stub;
	int v;

	for (v = 0; v < GUEST_IDT_VECTORS; v++) {
		stub = addr_hva2gva_image(vm, guest_exc_stubs) + 16 * v;
		idt[2 * v] = (stub & 0xffff) | (uint64_t)GDT_CODE64_SEL << 16 |
			     0x8eULL << 40 | /* present, DPL 0, int gate */
			     ((stub >> 16) & 0xffff) << 48;
		idt[2 * v + 1] = stub >> 32;
	}
}

/*
 * What a guest of these tests never writes and a vCPU needs to take an
 * exception: the page tables, GDT, TSS and IDT, and the guest's code. A
 * guest that triple-faulted with all of them as vm_create() left them
 * (and its stack pointer in its stack, which the vCPU's reset state hides)
 * did not do it through memory: neither the guest's code nor a device
 * writing guest RAM broke them. Returns 0, or -1 with what differs in
 * @what.
 */
#define PTE_ACCESSED_DIRTY ((1ULL << 5) | (1ULL << 6)) /* A, D */

static inline int vm_check_fixed(struct kvm_vm *vm, char *what, size_t len)
{
	uint64_t want[3 * GUEST_PAGE_SIZE / 8];
	size_t text = (size_t)(__stop_guest_text - __start_guest_text);
	const char *bad = NULL;

	const uint64_t *pt = addr_gpa2hva(vm, GUEST_PML4_GPA);
	unsigned int i;

	vm_fill_page_tables(want);
	/* The CPU sets Accessed and Dirty as it walks and writes. */
	for (i = 0; i < sizeof(want) / sizeof(want[0]) && !bad; i++)
		if ((pt[i] & ~PTE_ACCESSED_DIRTY) != want[i])
			bad = "page tables";
	memset(want, 0, sizeof(want));
	vm_fill_gdt(want);
	if (!bad &&
	    memcmp(addr_gpa2hva(vm, GUEST_GDT_GPA), want, GDT_ENTRIES * 8))
		bad = "GDT";
	memset(want, 0, sizeof(want));
	if (!bad &&
	    memcmp(addr_gpa2hva(vm, GUEST_TSS_GPA), want, TSS_LIMIT + 1))
		bad = "TSS";
	vm_fill_idt(vm, want);
	if (!bad && memcmp(addr_gpa2hva(vm, GUEST_IDT_GPA), want,
			   GUEST_IDT_VECTORS * 16))
		bad = "IDT";
	if (!bad && text &&
	    memcmp(addr_gva2hva(vm, addr_hva2gva_image(vm, __start_guest_text)),
		   __start_guest_text, text))
		bad = "guest code";
	if (!bad)
		return 0;
	snprintf(what, len, "the guest's %s changed", bad);
	return -1;
}

static inline struct kvm_vm *vm_create(void)
{
	struct kvm_userspace_memory_region region = { 0 };
	struct kvm_vm *vm;
	uint8_t *guarded;
	int ret;

	vm = calloc(1, sizeof(*vm));
	TEST_ASSERT(vm, "out of memory");
	vm->fd = -1;
	vm->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (vm->kvm_fd < 0) {
		int err = errno;

		free(vm);
		ksft_test_skip("/dev/kvm: %s", strerror(err));
	}
	ret = __kvm_ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0);
	TEST_ASSERT(ret == KVM_API_VERSION, "KVM API version %d, want %d", ret,
		    KVM_API_VERSION);
	vm->fd = kvm_ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	vm->run_size = kvm_ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	TEST_ASSERT(vm->run_size >= sizeof(struct kvm_run),
		    "kvm_run mmap size %zu too small", vm->run_size);

	vm->mem_size = GUEST_MEM_SIZE;
	guarded = mmap(NULL, vm->mem_size + 2 * GUEST_MEM_GUARD_SIZE, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	TEST_ASSERT(guarded != MAP_FAILED, "mmap of %#llx bytes: %s",
		    (unsigned long long)vm->mem_size, strerror(errno));
	vm->mem = guarded + GUEST_MEM_GUARD_SIZE;
	TEST_ASSERT(!mprotect(vm->mem, vm->mem_size, PROT_READ | PROT_WRITE),
		    "mprotect of guest memory: %s", strerror(errno));
	region.slot = 0;
	region.guest_phys_addr = 0;
	region.memory_size = vm->mem_size;
	region.userspace_addr = (uintptr_t)vm->mem;
	vm_ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region);

	vm->heap_next = GUEST_HEAP_GPA;
	vm_fill_gdt(addr_gpa2hva(vm, GUEST_GDT_GPA));
	vm_fill_page_tables(addr_gpa2hva(vm, GUEST_PML4_GPA));
	vm_load_image(vm);
	vm_fill_idt(vm, addr_gpa2hva(vm, GUEST_IDT_GPA));
	return vm;
}

static inline void vcpu_set_cpuid(struct kvm_vcpu *vcpu)
{
	struct kvm_cpuid2 *cpuid;
	unsigned int nent = 64;

	for (;;) {
		cpuid = calloc(1, sizeof(*cpuid) +
					  nent * sizeof(cpuid->entries[0]));
		TEST_ASSERT(cpuid, "out of memory");
		cpuid->nent = nent;
		if (!__kvm_ioctl(vcpu->vm->kvm_fd, KVM_GET_SUPPORTED_CPUID,
				 cpuid))
			break;
		TEST_ASSERT(errno == E2BIG && nent < 4096,
			    "KVM_GET_SUPPORTED_CPUID, nent %u: %s", nent,
			    strerror(errno));
		free(cpuid);
		nent *= 2;
	}
	/* Long mode (EFER.LME) is refused unless CPUID says LM. */
	vcpu_ioctl(vcpu, KVM_SET_CPUID2, cpuid);
	free(cpuid);
}

static inline void vcpu_setup_long_mode(struct kvm_vcpu *vcpu)
{
	struct kvm_segment code = {
		.base = 0,
		.limit = 0xffffffff,
		.selector = GDT_CODE64_SEL,
		.type = 0xb,
		.present = 1,
		.dpl = 0,
		.db = 0,
		.s = 1,
		.l = 1,
		.g = 1,
	};
	struct kvm_segment data = {
		.base = 0,
		.limit = 0xffffffff,
		.selector = GDT_DATA_SEL,
		.type = 0x3,
		.present = 1,
		.dpl = 0,
		.db = 1,
		.s = 1,
		.l = 0,
		.g = 1,
	};
	struct kvm_segment tss = {
		.base = GUEST_TSS_GPA,
		.limit = TSS_LIMIT,
		.selector = GDT_TSS_SEL,
		.type = 0xb,
		.present = 1,
		.s = 0,
	};
	struct kvm_sregs sregs;

	vcpu_ioctl(vcpu, KVM_GET_SREGS, &sregs);
	sregs.cs = code;
	sregs.ds = data;
	sregs.es = data;
	sregs.fs = data;
	sregs.gs = data;
	sregs.ss = data;
	sregs.tr = tss;
	sregs.gdt.base = GUEST_GDT_GPA;
	sregs.gdt.limit = GDT_ENTRIES * 8 - 1;
	sregs.idt.base = GUEST_IDT_GPA;
	sregs.idt.limit = GUEST_IDT_VECTORS * 16 - 1;
	sregs.cr3 = GUEST_PML4_GPA;
	sregs.cr4 = 0x20 |	    /* PAE */
		    0x200 |	    /* OSFXSR: GCC may use SSE in guest code */
		    0x400;	    /* OSXMMEXCPT */
	sregs.cr0 = 0x80000000 |    /* PG */
		    0x10000 |	    /* WP */
		    0x20 | 0x10 |   /* NE, ET */
		    0x2 | 0x1;	    /* MP, PE */
	sregs.efer = 0x100 | 0x400; /* LME, LMA */
	vcpu_ioctl(vcpu, KVM_SET_SREGS, &sregs);
}

/*
 * Add a vCPU that starts in @guest_code (a __guest_code function of this
 * binary) with its own stack; a return from @guest_code is reported as a
 * guest failure.
 */
static inline struct kvm_vcpu *vm_vcpu_add(struct kvm_vm *vm,
					   void (*guest_code)(void))
{
	uintptr_t fn = (uintptr_t)guest_code;
	struct kvm_regs regs = { 0 };
	struct kvm_vcpu *vcpu;
	uint64_t stack_top, *ret_addr;

	TEST_ASSERT(vm->nr_vcpus < KVM_TEST_MAX_VCPUS, "too many vCPUs");
	TEST_ASSERT(__start_guest_text && fn >= (uintptr_t)__start_guest_text &&
			    fn < (uintptr_t)__stop_guest_text,
		    "guest entry %p is not marked __guest_code", guest_code);
	vcpu = calloc(1, sizeof(*vcpu));
	TEST_ASSERT(vcpu, "out of memory");
	vcpu->vm = vm;
	vcpu->id = vm->nr_vcpus;
	vcpu->fd = vm_ioctl(vm, KVM_CREATE_VCPU, (unsigned long)vcpu->id);
	vm->vcpus[vm->nr_vcpus++] = vcpu;
	vcpu->run = mmap(NULL, vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 vcpu->fd, 0);
	TEST_ASSERT(vcpu->run != MAP_FAILED, "mmap of kvm_run: %s",
		    strerror(errno));

	vcpu_set_cpuid(vcpu);
	vcpu_setup_long_mode(vcpu);

	stack_top = GUEST_MEM_SIZE - vcpu->id * GUEST_STACK_SIZE;
	/* At function entry the ABI wants rsp + 8 16-byte aligned. */
	regs.rsp = stack_top - 24;
	ret_addr = addr_gva2hva(vm, regs.rsp);
	*ret_addr = addr_hva2gva_image(vm, (const void *)guest_code_returned);
	regs.rip = addr_hva2gva_image(vm, (const void *)fn);
	regs.rflags = 0x2; /* reserved bit 1; interrupts off */
	vcpu_ioctl(vcpu, KVM_SET_REGS, &regs);
	return vcpu;
}

static inline struct kvm_vm *vm_create_with_one_vcpu(struct kvm_vcpu **vcpu,
						     void (*guest_code)(void))
{
	struct kvm_vm *vm = vm_create();

	*vcpu = vm_vcpu_add(vm, guest_code);
	return vm;
}

/* Pass up to six integer arguments to the guest entry function. */
static inline void vcpu_args_set(struct kvm_vcpu *vcpu, unsigned int n, ...)
{
	struct kvm_regs regs;
	__u64 *slot[] = { &regs.rdi, &regs.rsi, &regs.rdx,
			  &regs.rcx, &regs.r8,	&regs.r9 };
	unsigned int i;
	va_list ap;

	TEST_ASSERT(n <= 6, "at most 6 guest arguments, not %u", n);
	vcpu_ioctl(vcpu, KVM_GET_REGS, &regs);
	va_start(ap, n);
	for (i = 0; i < n; i++)
		*slot[i] = va_arg(ap, uint64_t);
	va_end(ap);
	vcpu_ioctl(vcpu, KVM_SET_REGS, &regs);
}

/* KVM_RUN, retried on EINTR; returns 0 or -errno. Safe from any thread. */
static inline int __vcpu_run(struct kvm_vcpu *vcpu)
{
	int ret;

	do {
		ret = __vcpu_ioctl(vcpu, KVM_RUN, 0);
	} while (ret < 0 && errno == EINTR);
	return ret < 0 ? -errno : 0;
}

static inline void vcpu_run(struct kvm_vcpu *vcpu)
{
	int ret = __vcpu_run(vcpu);

	TEST_ASSERT(!ret, "KVM_RUN on vCPU %u: %s", vcpu->id, strerror(-ret));
}

/*
 * Decode the last exit as a ucall. Returns its command, or UCALL_NONE if
 * the exit was something else. The ucall struct is read from guest memory
 * at the address the guest wrote, checked against guest memory.
 */
static inline uint64_t get_ucall(struct kvm_vcpu *vcpu, struct ucall *uc)
{
	struct kvm_run *run = vcpu->run;
	const void *src;
	uint32_t gva;

	memset(uc, 0, sizeof(*uc));
	if (run->exit_reason != KVM_EXIT_IO || run->io.port != UCALL_PIO_PORT ||
	    run->io.direction != KVM_EXIT_IO_OUT || run->io.size != 4 ||
	    run->io.count != 1)
		return UCALL_NONE;
	TEST_ASSERT(run->io.data_offset <= vcpu->vm->run_size - 4,
		    "io.data_offset %llu outside kvm_run",
		    (unsigned long long)run->io.data_offset);
	memcpy(&gva, (const uint8_t *)run + run->io.data_offset, sizeof(gva));
	src = __addr_gpa2hva(vcpu->vm, gva, sizeof(*uc));
	TEST_ASSERT(src, "ucall at bad guest address %#x", gva);
	memcpy(uc, src, sizeof(*uc));
	if (uc->nargs > UCALL_MAX_ARGS)
		uc->nargs = UCALL_MAX_ARGS;
	return uc->cmd;
}

/* One line describing why the vCPU stopped, for failure messages. */
static inline const char *vcpu_describe_exit(struct kvm_vcpu *vcpu, char *buf,
					     size_t len)
{
	struct kvm_run *run = vcpu->run;
	struct kvm_regs regs;

	if (__vcpu_ioctl(vcpu, KVM_GET_REGS, &regs))
		memset(&regs, 0, sizeof(regs));
	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		snprintf(buf, len, "IO %s port %#x size %u at rip %#llx",
			 run->io.direction == KVM_EXIT_IO_OUT ? "out" : "in",
			 run->io.port, run->io.size, regs.rip);
		break;
	case KVM_EXIT_MMIO:
		snprintf(buf, len, "MMIO at %#llx from rip %#llx",
			 run->mmio.phys_addr, regs.rip);
		break;
	case KVM_EXIT_FAIL_ENTRY:
		snprintf(buf, len, "FAIL_ENTRY, reason %#llx",
			 run->fail_entry.hardware_entry_failure_reason);
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		snprintf(buf, len, "INTERNAL_ERROR, suberror %u",
			 run->internal.suberror);
		break;
	default:
		snprintf(buf, len, "%s (%u) at rip %#llx",
			 exit_reason_str(run->exit_reason), run->exit_reason,
			 regs.rip);
		break;
	}
	return buf;
}

/* Text of a ucall: "SYNC(1, 2)", "DONE", "ABORT file:line: expr ...". */
static inline const char *
ucall_describe(struct kvm_vm *vm, const struct ucall *uc, char *buf, size_t len)
{
	char file[128], expr[128];

	switch (uc->cmd) {
	case UCALL_SYNC:
		if (uc->nargs >= 2)
			snprintf(buf, len, "SYNC(%llu, %llu)",
				 (unsigned long long)uc->args[0],
				 (unsigned long long)uc->args[1]);
		else
			snprintf(buf, len, "SYNC(%llu)",
				 (unsigned long long)uc->args[0]);
		break;
	case UCALL_DONE:
		snprintf(buf, len, "DONE");
		break;
	case UCALL_ABORT:
		guest_strncpy(vm, file, sizeof(file), uc->file);
		guest_strncpy(vm, expr, sizeof(expr), uc->expr);
		if (uc->nargs >= 2)
			snprintf(buf, len,
				 "guest assertion failed at %s:%llu: %s (%#llx "
				 "vs %#llx)",
				 file, (unsigned long long)uc->line, expr,
				 (unsigned long long)uc->args[0],
				 (unsigned long long)uc->args[1]);
		else
			snprintf(buf, len,
				 "guest assertion failed at %s:%llu: %s", file,
				 (unsigned long long)uc->line, expr);
		break;
	case UCALL_EXCEPTION:
		snprintf(buf, len,
			 "guest exception %llu, error code %#llx, at rip %#llx "
			 "(offset %#llx in the test binary), cr2 %#llx",
			 (unsigned long long)uc->args[0],
			 (unsigned long long)uc->args[1],
			 (unsigned long long)uc->args[2],
			 (unsigned long long)(uc->args[2] - GUEST_IMAGE_GPA),
			 (unsigned long long)uc->args[3]);
		break;
	default:
		snprintf(buf, len, "unknown ucall %llu",
			 (unsigned long long)uc->cmd);
		break;
	}
	return buf;
}

/*
 * Run @vcpu until its next ucall and return the command. Any other exit
 * fails the test, as does a failed guest assertion or a guest exception
 * unless @abort_ok.
 */
static inline uint64_t __vcpu_run_ucall(struct kvm_vcpu *vcpu, struct ucall *uc,
					bool abort_ok)
{
	char buf[512];
	uint64_t cmd;

	vcpu_run(vcpu);
	cmd = get_ucall(vcpu, uc);
	TEST_ASSERT(cmd != UCALL_NONE, "vCPU %u: unexpected exit: %s", vcpu->id,
		    vcpu_describe_exit(vcpu, buf, sizeof(buf)));
	TEST_ASSERT((cmd != UCALL_ABORT && cmd != UCALL_EXCEPTION) || abort_ok,
		    "vCPU %u: %s", vcpu->id,
		    ucall_describe(vcpu->vm, uc, buf, sizeof(buf)));
	return cmd;
}

static inline uint64_t vcpu_run_ucall(struct kvm_vcpu *vcpu, struct ucall *uc)
{
	return __vcpu_run_ucall(vcpu, uc, false);
}

/* Accepts NULL and a half-built VM. */
static inline void kvm_vm_free(struct kvm_vm *vm)
{
	unsigned int i;

	if (!vm)
		return;
	for (i = 0; i < vm->nr_vcpus; i++) {
		struct kvm_vcpu *vcpu = vm->vcpus[i];

		if (vcpu->run && vcpu->run != MAP_FAILED)
			munmap(vcpu->run, vm->run_size);
		close(vcpu->fd);
		free(vcpu);
	}
	if (vm->mem)
		munmap(vm->mem - GUEST_MEM_GUARD_SIZE,
		       vm->mem_size + 2 * GUEST_MEM_GUARD_SIZE);
	if (vm->fd >= 0)
		close(vm->fd);
	close(vm->kvm_fd);
	free(vm);
}

#endif /* KILN_SELFTESTS_KVM_UTIL_H */
