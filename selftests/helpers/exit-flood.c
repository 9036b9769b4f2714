// SPDX-License-Identifier: GPL-2.0
/*
 * exit-flood - the control for selftests/kvm/hostile.c's notify flood:
 * the same guest exits with no Kiln code under them (Documentation/
 * harness.md, "A test guest's triple fault and its control").
 *
 * A kvm_util VM (selftests/kvm/kvm_util.h) whose guest writes a virtio-mmio
 * QueueNotify register NOTIFIES times, bound as a KVM ioeventfd with
 * datamatch 0 on an eventfd a host thread drains (as a device's event
 * loop would), then BAD times with another value, which no ioeventfd
 * matches, so each is an MMIO exit to this process (answered as nothing
 * there). That is what hostile.blk_notify_flood's guest does, less its one
 * read request. Each of RUNS runs is a new VM; a run ends "done", or with
 * the exit that ended it and, for a triple fault, whether the guest's page
 * tables, GDT, TSS, IDT and code were intact (vm_check_fixed()).
 *
 * Usage: exit-flood [--runs RUNS] [--notifies NOTIFIES] [--bad BAD]
 * Exit: 0 when every run was done, 1 when one was not, 2 on bad usage.
 * Without /dev/kvm it says so and exits 2. Run it inside tools/vmtest.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <linux/virtio_mmio.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/kvm_util.h"

/* Where hostile.c puts its device window: above RAM, inside the map. */
#define FLOOD_MMIO_GPA 0x30000000ULL
#define FLOOD_NOTIFY   (FLOOD_MMIO_GPA + VIRTIO_MMIO_QUEUE_NOTIFY)

static void __guest_code guest_flood(uint64_t notifies, uint64_t bad)
{
	volatile uint32_t *notify = (volatile uint32_t *)FLOOD_NOTIFY;
	uint64_t i;

	for (i = 0; i < notifies; i++)
		*notify = 0;
	for (i = 0; i < bad; i++)
		*notify = 1 + (uint32_t)(i % 5);
	GUEST_DONE();
}

struct drain {
	int efd;
	int stop; /* atomic */
	uint64_t kicks;
};

/* The device loop's part: wake on the eventfd and empty it. */
static void *drain_thread(void *arg)
{
	struct drain *d = arg;
	struct pollfd p = { .fd = d->efd, .events = POLLIN };
	uint64_t v;

	while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (read(d->efd, &v, sizeof(v)) == sizeof(v))
			d->kicks += v;
	}
	return NULL;
}

/* One run; returns 0 when the guest was done, 1 otherwise. */
static int flood_once(unsigned int run_nr, uint64_t notifies, uint64_t bad)
{
	struct drain d = { .efd = -1 };
	struct kvm_ioeventfd e = {
		.addr = FLOOD_NOTIFY,
		.len = 4,
		.datamatch = 0,
		.flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
	};
	struct kvm_vcpu *vcpu;
	struct kvm_vm *vm;
	struct kvm_run *run;
	struct timespec t0, t1;
	uint64_t exits = 0;
	char buf[256], why[128] = "";
	struct ucall uc;
	pthread_t thread;
	int ret, done = 0;

	vm = vm_create_with_one_vcpu(&vcpu, (void (*)(void))guest_flood);
	vcpu_args_set(vcpu, 2, notifies, bad);
	d.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	TEST_ASSERT(d.efd >= 0, "eventfd: %s", strerror(errno));
	e.fd = d.efd;
	vm_ioctl(vm, KVM_IOEVENTFD, &e);
	TEST_ASSERT(!pthread_create(&thread, NULL, drain_thread, &d),
		    "pthread_create");
	run = vcpu->run;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ret = __vcpu_run(vcpu);
		if (ret) {
			snprintf(buf, sizeof(buf), "KVM_RUN: %s",
				 strerror(-ret));
			break;
		}
		if (run->exit_reason == KVM_EXIT_MMIO) {
			/* Nothing there: reads see all ones. */
			if (!run->mmio.is_write)
				memset(run->mmio.data, 0xff,
				       sizeof(run->mmio.data));
			exits++;
			continue;
		}
		if (get_ucall(vcpu, &uc) == UCALL_DONE) {
			done = 1;
			break;
		}
		vcpu_describe_exit(vcpu, buf, sizeof(buf));
		if (run->exit_reason == KVM_EXIT_SHUTDOWN &&
		    !vm_check_fixed(vm, why, sizeof(why)))
			snprintf(why, sizeof(why),
				 "page tables, GDT, TSS, IDT and code intact");
		break;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	__atomic_store_n(&d.stop, 1, __ATOMIC_RELEASE);
	pthread_join(thread, NULL);
	printf("run %u: %s%s%s; %llu MMIO exits, %llu kicks drained, %.1f s\n",
	       run_nr, done ? "done" : buf, why[0] ? "; " : "", why,
	       (unsigned long long)exits, (unsigned long long)d.kicks,
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	fflush(stdout);
	close(d.efd);
	kvm_vm_free(vm);
	return !done;
}

static unsigned long long number(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end) {
		fprintf(stderr, "exit-flood: %s: not a number: %s\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runs", required_argument, NULL, 'r' },
		{ "notifies", required_argument, NULL, 'n' },
		{ "bad", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long long runs = 10, notifies = 1000000, bad = 100000;
	unsigned int i, failed = 0;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			runs = number(optarg, "--runs");
			break;
		case 'n':
			notifies = number(optarg, "--notifies");
			break;
		case 'b':
			bad = number(optarg, "--bad");
			break;
		default:
			fprintf(stderr, "usage: exit-flood [--runs N] "
					"[--notifies N] [--bad N]\n");
			return 2;
		}
	}
	if (access("/dev/kvm", R_OK | W_OK)) {
		fprintf(stderr,
			"exit-flood: /dev/kvm: %s (run it inside "
			"tools/vmtest)\n",
			strerror(errno));
		return 2;
	}
	for (i = 1; i <= runs; i++)
		failed += flood_once(i, notifies, bad);
	printf("%u of %llu runs not done\n", failed, runs);
	return failed ? 1 : 0;
}
