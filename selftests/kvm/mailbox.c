// SPDX-License-Identifier: GPL-2.0
/*
 * mailbox - the guest/host ucall mailbox of kvm_util.h, end to end.
 *
 * Each test builds a VM, runs freestanding guest code from this binary and
 * checks what the guest reports through GUEST_SYNC/GUEST_DONE/GUEST_ASSERT.
 * Without /dev/kvm every test skips.
 */
#include <pthread.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/kvm_util.h"

#define NR_WORDS 1000
#define NR_VCPUS 4

FIXTURE(vm)
{
	struct kvm_vm *vm;
	struct kvm_vcpu *vcpu;
	struct ucall uc;
	char buf[512];
};

FIXTURE_SETUP(vm)
{
	self->vm = vm_create();
}

FIXTURE_TEARDOWN(vm)
{
	kvm_vm_free(self->vm);
}

/* ---- (a) the guest sums host data and checks the host's reply ------- */

static void __guest_code guest_sum(const uint64_t *words, uint64_t n,
				   volatile uint64_t *reply)
{
	uint64_t sum = 0, i;

	GUEST_SYNC(n);
	for (i = 0; i < n; i++)
		sum += words[i];
	GUEST_SYNC2(sum, words[n - 1]);
	/* The host answers in guest memory before resuming us. */
	GUEST_ASSERT_EQ(*reply, sum * 2);
	GUEST_SYNC(*reply + 1);
	GUEST_DONE();
}

TEST_F(vm, guest_sums_host_array)
{
	uint64_t words_gva, reply_gva, *words, *reply, sum = 0;
	int i;

	self->vcpu = vm_vcpu_add(self->vm, (void (*)(void))guest_sum);
	words_gva = vm_vaddr_alloc(self->vm, NR_WORDS * sizeof(*words));
	reply_gva = vm_vaddr_alloc(self->vm, sizeof(*reply));
	words = addr_gva2hva(self->vm, words_gva);
	reply = addr_gva2hva(self->vm, reply_gva);
	for (i = 0; i < NR_WORDS; i++) {
		words[i] = (uint64_t)i * i + 7;
		sum += words[i];
	}
	vcpu_args_set(self->vcpu, 3, words_gva, (uint64_t)NR_WORDS, reply_gva);

	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(1, self->uc.nargs);
	ASSERT_EQ(NR_WORDS, self->uc.args[0]);

	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(2, self->uc.nargs);
	ASSERT_EQ(sum, self->uc.args[0]);
	ASSERT_EQ(words[NR_WORDS - 1], self->uc.args[1]);

	*reply = sum * 2;
	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(sum * 2 + 1, self->uc.args[0]);

	ASSERT_EQ(UCALL_DONE, vcpu_run_ucall(self->vcpu, &self->uc));
}

/* ---- (a2) guest code may use .rodata: constant tables, jump tables -- */

static const uint32_t guest_primes[] = { 2, 3, 5, 7, 11, 13, 17, 19 };

static uint64_t __guest_code guest_classify(uint64_t x)
{
	/* Dense enough for GCC to emit a jump table in .rodata. */
	switch (x) {
	case 0:
		return 100;
	case 1:
		return 101;
	case 2:
		return 107;
	case 3:
		return 131;
	case 4:
		return 149;
	case 5:
		return 163;
	case 6:
		return 173;
	default:
		return 0;
	}
}

static void __guest_code guest_rodata(void)
{
	uint64_t sum = 0, i;

	for (i = 0; i < sizeof(guest_primes) / sizeof(guest_primes[0]); i++)
		sum += guest_primes[i];
	GUEST_SYNC(sum);
	for (i = 0; i < 8; i++)
		GUEST_SYNC(guest_classify(i));
	GUEST_DONE();
}

TEST_F(vm, guest_reads_rodata)
{
	static const uint64_t classes[] = {
		100, 101, 107, 131, 149, 163, 173, 0
	};
	unsigned int i;

	self->vcpu = vm_vcpu_add(self->vm, guest_rodata);
	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(77, self->uc.args[0]);
	for (i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
		ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
		EXPECT_EQ(classes[i], self->uc.args[0]);
	}
	ASSERT_EQ(UCALL_DONE, vcpu_run_ucall(self->vcpu, &self->uc));
}

/* ---- (b) a failing GUEST_ASSERT is decoded with file and line ------- */

enum { guest_assert_line = __LINE__ + 5 };
static void __guest_code guest_assert_fails(uint64_t x)
{
	GUEST_SYNC(x);
	/* Fails on purpose: the host passes 41. Line is guest_assert_line. */
	GUEST_ASSERT(x == 42);
	GUEST_DONE();
}

TEST_F(vm, guest_assert_decoded)
{
	const char *file = "selftests/kvm/mailbox.c";
	char str[256];

	self->vcpu = vm_vcpu_add(self->vm, (void (*)(void))guest_assert_fails);
	vcpu_args_set(self->vcpu, 1, 41ULL);
	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(41, self->uc.args[0]);

	ASSERT_EQ(UCALL_ABORT, __vcpu_run_ucall(self->vcpu, &self->uc, true));
	EXPECT_EQ(guest_assert_line, self->uc.line);
	guest_strncpy(self->vm, str, sizeof(str), self->uc.file);
	EXPECT_STREQ(file, str);
	guest_strncpy(self->vm, str, sizeof(str), self->uc.expr);
	EXPECT_STREQ("x == 42", str);
	snprintf(str, sizeof(str), "guest assertion failed at %s:%d: x == 42",
		 file, guest_assert_line);
	EXPECT_STREQ(str, ucall_describe(self->vm, &self->uc, self->buf,
					 sizeof(self->buf)));

	/* After an assertion the guest halts rather than carrying on. */
	vcpu_run(self->vcpu);
	EXPECT_EQ(KVM_EXIT_HLT, self->vcpu->run->exit_reason);
}

enum { guest_assert_eq_line = __LINE__ + 3 };
static void __guest_code guest_assert_eq_fails(uint64_t x)
{
	GUEST_ASSERT_EQ(x + 1, 0x1234);
	GUEST_DONE();
}

TEST_F(vm, guest_assert_eq_values)
{
	self->vcpu =
		vm_vcpu_add(self->vm, (void (*)(void))guest_assert_eq_fails);
	vcpu_args_set(self->vcpu, 1, 0x99ULL);
	ASSERT_EQ(UCALL_ABORT, __vcpu_run_ucall(self->vcpu, &self->uc, true));
	EXPECT_EQ(guest_assert_eq_line, self->uc.line);
	ASSERT_EQ(2, self->uc.nargs);
	EXPECT_EQ(0x9a, self->uc.args[0]);
	EXPECT_EQ(0x1234, self->uc.args[1]);
	EXPECT_NE(NULL, strstr(ucall_describe(self->vm, &self->uc, self->buf,
					      sizeof(self->buf)),
			       "x + 1 == 0x1234 (0x9a vs 0x1234)"))
	TH_LOG("%s", self->buf);
}

/* A guest entry function that returns is a failure, not a silent hang. */
static void __guest_code guest_returns(void)
{
	GUEST_SYNC(1);
}

TEST_F(vm, guest_return_reported)
{
	self->vcpu = vm_vcpu_add(self->vm, guest_returns);
	ASSERT_EQ(UCALL_SYNC, vcpu_run_ucall(self->vcpu, &self->uc));
	ASSERT_EQ(UCALL_ABORT, __vcpu_run_ucall(self->vcpu, &self->uc, true));
	EXPECT_NE(NULL, strstr(ucall_describe(self->vm, &self->uc, self->buf,
					      sizeof(self->buf)),
			       "guest entry function returned"))
	TH_LOG("%s", self->buf);
}

/* A guest exception is reported with its vector, rip and cr2. */
#define UNMAPPED_GVA (3ULL << 30) /* beyond the 1 GiB identity map */

static void __guest_code guest_page_fault(void)
{
	GUEST_SYNC(*(volatile uint64_t *)UNMAPPED_GVA);
}

TEST_F(vm, guest_exception_reported)
{
	self->vcpu = vm_vcpu_add(self->vm, guest_page_fault);
	ASSERT_EQ(UCALL_EXCEPTION,
		  __vcpu_run_ucall(self->vcpu, &self->uc, true));
	EXPECT_EQ(14, self->uc.args[0]);	   /* #PF */
	EXPECT_EQ(0, self->uc.args[1]);		   /* read, not present */
	EXPECT_EQ(UNMAPPED_GVA, self->uc.args[3]); /* cr2 */
	/* The faulting instruction is in the guest function. */
	EXPECT_LE(addr_hva2gva_image(self->vm, (const void *)guest_page_fault),
		  self->uc.args[2]);
	EXPECT_GT(addr_hva2gva_image(self->vm, __stop_guest_text),
		  self->uc.args[2]);
	TH_LOG("%s", ucall_describe(self->vm, &self->uc, self->buf,
				    sizeof(self->buf)));
}

/*
 * A triple fault, and what vm_check_fixed() makes of the guest's memory
 * after it: a guest that loads an empty IDT and faults leaves its tables
 * as vm_create() made them (the loss is in the vCPU, which is what the
 * hostile tests blame on the nested harness); one that zeroes its IDT in
 * memory first is named for it.
 */
static void __guest_code guest_triple_fault(uint64_t scribble)
{
	struct {
		uint16_t limit;
		uint64_t base;
	} __attribute__((packed)) empty = { 0, 0 };
	volatile uint64_t *idt = (volatile uint64_t *)GUEST_IDT_GPA;
	uint64_t i;

	if (scribble)
		for (i = 0; i < GUEST_IDT_VECTORS * 2; i++)
			idt[i] = 0;
	else
		asm volatile("lidt %0" : : "m"(empty));
	asm volatile("ud2");
	GUEST_DONE();
}

static void run_to_triple_fault(struct __test_metadata *_metadata,
				FIXTURE_DATA(vm) * self, uint64_t scribble)
{
	self->vcpu = vm_vcpu_add(self->vm, (void (*)(void))guest_triple_fault);
	vcpu_args_set(self->vcpu, 1, scribble);
	ASSERT_EQ(0, __vcpu_run(self->vcpu));
	ASSERT_EQ(KVM_EXIT_SHUTDOWN, self->vcpu->run->exit_reason)
	TH_LOG("%s",
	       vcpu_describe_exit(self->vcpu, self->buf, sizeof(self->buf)));
}

TEST_F(vm, triple_fault_with_tables_intact)
{
	run_to_triple_fault(_metadata, self, 0);
	EXPECT_EQ(0, vm_check_fixed(self->vm, self->buf, sizeof(self->buf)))
	TH_LOG("%s", self->buf);
}

TEST_F(vm, triple_fault_names_what_changed)
{
	run_to_triple_fault(_metadata, self, 1);
	ASSERT_EQ(-1, vm_check_fixed(self->vm, self->buf, sizeof(self->buf)));
	EXPECT_STREQ("the guest's IDT changed", self->buf);
}

/* ---- (c) several vCPUs, each on its own thread, report their id ----- */

static void __guest_code guest_report_id(uint64_t id, volatile uint64_t *slots)
{
	slots[id] = 0x1000 + id;
	GUEST_SYNC2(id, slots[id]);
	GUEST_DONE();
}

struct vcpu_thread {
	struct kvm_vcpu *vcpu;
	pthread_t thread;
	int err;
	uint64_t cmds[2];
	struct ucall uc;
	struct ucall sync; /* the first ucall, expected SYNC(id, slot) */
};

/* No TEST_ASSERT here: only the test's main thread may fail the test. */
static void *vcpu_thread_fn(void *arg)
{
	struct vcpu_thread *t = arg;
	int i;

	for (i = 0; i < 2; i++) {
		t->err = __vcpu_run(t->vcpu);
		if (t->err)
			break;
		t->cmds[i] = get_ucall(t->vcpu, &t->uc);
		if (i == 0)
			t->sync = t->uc;
		if (t->cmds[i] != UCALL_SYNC)
			break;
	}
	return NULL;
}

TEST_F(vm, vcpus_report_ids)
{
	struct vcpu_thread threads[NR_VCPUS] = { 0 };
	uint64_t sync_args[NR_VCPUS][2];
	uint64_t slots_gva, *slots;
	unsigned int i;
	int max;

	max = __kvm_ioctl(self->vm->kvm_fd, KVM_CHECK_EXTENSION,
			  KVM_CAP_MAX_VCPUS);
	if (max > 0 && max < NR_VCPUS)
		SKIP(return, "KVM allows %d vCPUs, the test needs %d", max,
			   NR_VCPUS);
	slots_gva = vm_vaddr_alloc(self->vm, NR_VCPUS * sizeof(*slots));
	slots = addr_gva2hva(self->vm, slots_gva);
	for (i = 0; i < NR_VCPUS; i++) {
		threads[i].vcpu =
			vm_vcpu_add(self->vm, (void (*)(void))guest_report_id);
		vcpu_args_set(threads[i].vcpu, 2, (uint64_t)i, slots_gva);
	}
	for (i = 0; i < NR_VCPUS; i++)
		ASSERT_EQ(0, pthread_create(&threads[i].thread, NULL,
					    vcpu_thread_fn, &threads[i]));
	for (i = 0; i < NR_VCPUS; i++)
		pthread_join(threads[i].thread, NULL);

	for (i = 0; i < NR_VCPUS; i++) {
		struct vcpu_thread *t = &threads[i];

		ASSERT_EQ(0, t->err)
		TH_LOG("vCPU %u: KVM_RUN: %s", i, strerror(-t->err));
		ASSERT_EQ(UCALL_SYNC, t->cmds[0])
		TH_LOG("vCPU %u: %s", i,
		       vcpu_describe_exit(t->vcpu, self->buf,
					  sizeof(self->buf)));
		sync_args[i][0] = t->sync.args[0];
		sync_args[i][1] = t->sync.args[1];
		EXPECT_EQ(UCALL_DONE, t->cmds[1]);
	}
	for (i = 0; i < NR_VCPUS; i++) {
		EXPECT_EQ(i, sync_args[i][0]);
		EXPECT_EQ(0x1000 + i, sync_args[i][1]);
		EXPECT_EQ(0x1000 + i, slots[i]);
	}
}

TEST_HARNESS_MAIN
