// SPDX-License-Identifier: GPL-2.0
/*
 * End to end on KVM: `vmm run` boots our guest kernel and initramfs, runs a
 * command and returns its status. KILN_VMM names the vmm (build/vmm) and
 * KILN_GUEST_DIR the guest build (build/guest).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/kvm.h>

#include "selftests/kselftest.h"
#include "selftests/kvm/vmm_util.h"

TEST_TIMEOUT(uname_one_vcpu, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("uname", "-a"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_TRUE(strstr(r.out, "Linux sandbox ") != NULL);
	EXPECT_TRUE(strstr(r.out, "x86_64") != NULL);
}

TEST_TIMEOUT(nproc_one, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "1"), ARGS("nproc"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("1\n", r.out);
}

TEST_TIMEOUT(nproc_four, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "4"), ARGS("nproc"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("4\n", r.out);
}

TEST_TIMEOUT(nproc_eight, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "8"), ARGS("nproc"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("8\n", r.out);
}

/* CPUID topology: one package of N cores, APIC ID = vCPU index. */
TEST_TIMEOUT(cpu_topology, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "4"),
	     ARGS("sh", "-c",
		  "grep -E '^(apicid|cpu cores|physical id)' "
		  "/proc/cpuinfo | tr -d '\\t' | sort | uniq -c | "
		  "tr -s ' ' | tr '\\n' ';'"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(" 1 apicid: 0; 1 apicid: 1; 1 apicid: 2; 1 apicid: 3;"
		     " 4 cpu cores: 4; 4 physical id: 0;",
		     r.out);
}

/*
 * The CPUID leaves Linux reads topology from, as a guest program sees them
 * (selftests/helpers/cpuid-dump.c, packed next to the vmm): leaf 0xb's
 * core level (subleaf 1: 2 logical processors, x2APIC ID = vCPU index),
 * which KVM lists only as far as the host's own topology goes, and on AMD
 * leaf 0x8000001e's extended APIC ID, which KVM zeroes. QEMU's guests
 * see both (Documentation/harness.md, "The guests' CPUID").
 */
TEST_TIMEOUT(cpuid_topology_leaves, BOOT_TIMEOUT)
{
	const char *vmm = getenv("KILN_VMM") ? getenv("KILN_VMM") : "build/vmm";
	const char *slash = strrchr(vmm, '/');
	char dir[64], cpio[300], initrd[300];
	char cmd[900], want[80];
	struct spawn_result r;
	struct guest g;
	bool amd, ext;

	test_tmp_name(dir, sizeof(dir), "kiln-cpuid-XXXXXX");
	guest_paths(&g);
	snprintf(cpio, sizeof(cpio), "%.*s/selftests/helpers/cpuid-dump.cpio",
		 slash ? (int)(slash - vmm) : 1, slash ? vmm : ".");
	ASSERT_EQ(0, access(cpio, R_OK))
	TH_LOG("%s missing: make selftests", cpio);
	ASSERT_NE(NULL, mkdtemp(dir));
	snprintf(initrd, sizeof(initrd), "%s/initrd.cpio", dir);
	snprintf(cmd, sizeof(cmd), "cat '%s' '%s' > '%s'", g.initrd, cpio,
		 initrd);
	ASSERT_EQ(0, system(cmd));
	BOOT_SPEC((&(struct boot_spec){ .initrd = initrd,
					.opts = ARGS("--cpus", "2"),
					.cmd = ARGS("cpuid-dump") }),
		  &r);
	unlink(initrd);
	rmdir(dir);
	EXPECT_EQ(0, r.status);
	/* "AuthenticAMD": EBX "Auth", EDX "enti", ECX "cAMD". */
	amd = strstr(r.out, "cpu0 00000000.00 ") &&
	      strstr(strstr(r.out, "cpu0 00000000.00 "),
		     " 68747541 444d4163 69746e65\n");
	ext = strstr(r.out, "cpu0 8000001e.00 ") != NULL;
	for (int cpu = 0; cpu < 2; cpu++) {
		snprintf(want, sizeof(want),
			 "cpu%d 0000000b.01 00000001 00000002 00000201 %08x\n",
			 cpu, cpu);
		EXPECT_NE(NULL, strstr(r.out, want)) TH_LOG("no '%s'", want);
		if (!amd || !ext)
			continue;
		snprintf(want, sizeof(want), "cpu%d 8000001e.00 %08x %08x ",
			 cpu, cpu, cpu);
		EXPECT_NE(NULL, strstr(r.out, want)) TH_LOG("no '%s'", want);
	}
}

/*
 * The TSC-deadline timer, on every vCPU, whenever KVM can emulate it (it
 * is never in KVM_GET_SUPPORTED_CPUID): Linux then arms its timer with one
 * WRMSR instead of LAPIC MMIO writes.
 */
TEST_TIMEOUT(tsc_deadline_timer, BOOT_TIMEOUT)
{
	struct spawn_result r;
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int cap;

	ASSERT_LE(0, kvm);
	cap = ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_TSC_DEADLINE_TIMER);
	close(kvm);
	BOOT(NULL, ARGS("--cpus", "2"),
	     ARGS("sh", "-c",
		  "grep -c '^flags.* tsc_deadline_timer' "
		  "/proc/cpuinfo; true"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ(cap > 0 ? "2\n" : "0\n", r.out);
}

/*
 * Output still queued in the serial driver when the command exits must
 * reach the host: the command is not the console's session leader, so its
 * exit does not hang the tty up and flush it.
 */
TEST_TIMEOUT(output_tail_survives_exit, BOOT_TIMEOUT)
{
	struct spawn_result r;
	const char *tail;

	BOOT(NULL, ARGS("--cpus", "4"), ARGS("seq", "1", "2000"), NULL, &r);
	EXPECT_EQ(0, r.status);
	ASSERT_TRUE(strlen(r.out) > 10);
	tail = r.out + strlen(r.out) - 10;
	EXPECT_STREQ("1999\n2000\n", tail);
	EXPECT_EQ(0, strncmp(r.out, "1\n2\n3\n", 6));
}

TEST_TIMEOUT(arguments_survive_verbatim, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("printf", "[%s]", "a b", "", "'q\"", "--", "-x"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("[a b][]['q\"][--][-x]", r.out);
}

TEST_TIMEOUT(exit_status_one, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "exit 1"), NULL, &r);
	EXPECT_EQ(1, r.status);
}

TEST_TIMEOUT(exit_status_seven, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "echo before; exit 7"), NULL, &r);
	EXPECT_EQ(7, r.status);
	EXPECT_STREQ("before\n", r.out);
}

TEST_TIMEOUT(death_by_signal, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "kill -9 $$"), NULL, &r);
	EXPECT_EQ(128 + 9, r.status);
}

TEST_TIMEOUT(command_not_found, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("/no/such/command"), NULL, &r);
	EXPECT_EQ(127, r.status);
	EXPECT_TRUE(strstr(r.out, "/no/such/command") != NULL);
}

TEST_TIMEOUT(guest_panic, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "echo c > /proc/sysrq-trigger"), NULL,
	     &r);
	EXPECT_EQ(VMM_EXIT_GUEST_CRASH, r.status);
	EXPECT_TRUE(strstr(r.err, "before reporting a status") != NULL);
}

/* busybox poweroff/halt/reboot signal PID 1: a clean end, status 0. */
TEST_TIMEOUT(guest_poweroff, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("sh", "-c", "poweroff; sleep 100"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_EQ(0, (int)r.err_len);
}

TEST_TIMEOUT(guest_reboot_request, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "2"), ARGS("sh", "-c", "reboot; sleep 100"),
	     NULL, &r);
	EXPECT_EQ(0, r.status);
}

/*
 * poweroff -f and halt -f halt every CPU with interrupts off (no ACPI):
 * the vmm's halt probe ends the VM, cleanly.
 */
TEST_TIMEOUT(guest_forced_poweroff, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "2"), ARGS("poweroff", "-f"), NULL, &r);
	EXPECT_EQ(0, r.status);
	BOOT(NULL, NULL, ARGS("halt", "-f"), NULL, &r);
	EXPECT_EQ(0, r.status);
}

/* An idle guest (all vCPUs in HLT, interrupts on) is not powered off. */
TEST_TIMEOUT(idle_guest_keeps_running, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, ARGS("--cpus", "2"), ARGS("sh", "-c", "sleep 4; exit 5"),
	     NULL, &r);
	EXPECT_EQ(5, r.status);
}

/*
 * Lock contention makes vCPUs halt with interrupts off for a moment (PV
 * spinlocks); the halt probe must not take that for a power off.
 */
TEST_TIMEOUT(busy_smp_guest_is_not_powered_off, BOOT_TIMEOUT)
{
	struct spawn_result r;

	/*
	 * Kept light: heavier SMP load has crashed the nested-SVM harness
	 * (QEMU TCG) itself, which says nothing about vmm.
	 */
	BOOT(NULL, ARGS("--cpus", "2"),
	     ARGS("sh", "-c",
		  "for i in 1 2 3; do (while :; do cat /proc/cpuinfo "
		  "/proc/interrupts >/dev/null; done) & done; sleep 3; "
		  "echo done; exit 3"),
	     NULL, &r);
	EXPECT_EQ(3, r.status);
	EXPECT_STREQ("done\n", r.out);
}

/* reboot -f goes through the i8042 reset line: no status was reported. */
TEST_TIMEOUT(guest_forced_reboot, BOOT_TIMEOUT)
{
	struct spawn_result r;

	BOOT(NULL, NULL, ARGS("reboot", "-f"), NULL, &r);
	EXPECT_EQ(VMM_EXIT_GUEST_CRASH, r.status);
	EXPECT_TRUE(strstr(r.err, "guest reset the machine") != NULL);
}

TEST_TIMEOUT(stdin_reaches_the_command, BOOT_TIMEOUT)
{
	char path[64];
	static const char text[] = "one\ntwo\nthree\n";
	struct spawn_result r;
	int fd;

	test_tmp_name(path, sizeof(path), "kiln-stdin-XXXXXX");
	fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	ASSERT_EQ((ssize_t)sizeof(text) - 1, write(fd, text, sizeof(text) - 1));
	close(fd);
	BOOT(NULL, NULL, ARGS("sh", "-c", "wc -l; cat; wc -c"), path, &r);
	unlink(path);
	EXPECT_EQ(0, r.status);
	/* Three lines counted, nothing echoed, every reader sees the end. */
	EXPECT_STREQ("3\n0\n", r.out);
}

TEST_TIMEOUT(bzimage_boots, BOOT_TIMEOUT)
{
	struct spawn_result r;
	struct guest g;

	guest_paths(&g);
	BOOT(g.bzimage, ARGS("--cpus", "2"), ARGS("nproc"), NULL, &r);
	EXPECT_EQ(0, r.status);
	EXPECT_STREQ("2\n", r.out);
}

TEST_TIMEOUT(memory_above_the_mmio_gap, BOOT_TIMEOUT)
{
	struct spawn_result r;
	long kib = 0;

	BOOT(NULL, ARGS("--memory", "3500"),
	     ARGS("sh", "-c", "grep MemTotal /proc/meminfo"), NULL, &r);
	EXPECT_EQ(0, r.status);
	ASSERT_EQ(1, sscanf(r.out, "MemTotal: %ld kB", &kib));
	/* 3 GiB below the gap plus 428 MiB above it, less the kernel. */
	EXPECT_GT(kib, 3300L * 1024);
	EXPECT_LE(kib, 3500L * 1024);
}

TEST_TIMEOUT(json_config, BOOT_TIMEOUT)
{
	char path[64], doc[1024], opt[300];
	struct spawn_result r;
	struct guest g;
	int fd;

	test_tmp_name(path, sizeof(path), "kiln-vm-XXXXXX");
	fd = mkstemp(path);
	guest_paths(&g);
	ASSERT_GE(fd, 0);
	snprintf(doc, sizeof(doc),
		 "{\"kernel\": \"%s\", \"initrd\": \"%s\", \"cpus\": 2,"
		 " \"memoryMiB\": 192, \"command\": [\"sh\", \"-c\","
		 " \"nproc; exit 3\"]}",
		 g.vmlinux, g.initrd);
	ASSERT_EQ((ssize_t)strlen(doc), write(fd, doc, strlen(doc)));
	close(fd);
	snprintf(opt, sizeof(opt), "%s", path);
	BOOT(NULL, ARGS("--config", opt), NULL, NULL, &r);
	unlink(path);
	EXPECT_EQ(3, r.status);
	EXPECT_STREQ("2\n", r.out);
}

/*
 * Whoever reads the console stops reading: the guest's writes block the
 * vCPU (backpressure), but SIGTERM must still stop the VM promptly.
 */
TEST_TIMEOUT(sigterm_with_stuck_stdout_reader, BOOT_TIMEOUT)
{
	int out[2], queued = 0, i;
	pid_t pid;

	if (access("/dev/kvm", R_OK | W_OK))
		SKIP(return, "no usable /dev/kvm (run through tools/vmtest)");
	ASSERT_EQ(0, pipe(out));
	/* A one-page pipe fills fast even at serial-console speed. */
	ASSERT_GT(fcntl(out[1], F_SETPIPE_SZ, 4096), 0);
	pid = start_vmm_stdout(ARGS("sh", "-c", "while :; do echo stuck; done"),
			       out[1]);
	ASSERT_GT(pid, 0);
	close(out[1]);
	for (i = 0; i < 1200 && queued < 4096; i++) {
		usleep(100000);
		ASSERT_EQ(0, ioctl(out[0], FIONREAD, &queued));
	}
	ASSERT_GE(queued, 4096) TH_LOG("the guest never filled the pipe");
	usleep(500000);
	kill(pid, SIGTERM);
	EXPECT_EQ(128 + SIGTERM, wait_exit(pid, 30));
	close(out[0]);
}

TEST_HARNESS_MAIN
