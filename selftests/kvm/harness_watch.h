/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SELFTESTS_KVM_HARNESS_WATCH_H
#define KILN_SELFTESTS_KVM_HARNESS_WATCH_H

/*
 * The KVM tests' environment watch (struct ksft_environment_watch in
 * selftests/kselftest.h), on inside the nested harness only
 * (KILN_IN_HARNESS, set by tools/vmtest). Before each test it moves to
 * the end of the harness kernel's log, /dev/kmsg; after a test that
 * failed or timed out it reads what the kernel logged meanwhile. It
 * prints the warnings and worse as "# harness kernel: ..." lines, the
 * only account CI keeps of them, and blames the environment when one of
 * them is the kernel's own report of a CPU or task making no progress:
 * the harness's nested SVM under TCG has been seen to lock its CPUs up
 * for minutes (Documentation/harness.md).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "selftests/kselftest.h"

/* Of the kernel's log levels (the low 3 bits of a record's priority). */
#define HARNESS_KMSG_WARNING 4
/* At most this many records read, and printed, per failed test. */
#define HARNESS_KMSG_READ_MAX  10000
#define HARNESS_KMSG_PRINT_MAX 16

/* The kernel's own words for a CPU or task stuck (watchdog, RCU, hung task). */
static const char *const harness_stall_words[] = {
	"soft lockup",		 "hard LOCKUP",
	"self-detected stall",	 "detected stalls on CPUs",
	"blocked for more than",
};

/* /dev/kmsg, opened by the first start(); the runner's process only. */
static int harness_kmsg_fd = -1;

static void harness_watch__start(void)
{
	if (harness_kmsg_fd < 0)
		harness_kmsg_fd =
			open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (harness_kmsg_fd >= 0)
		lseek(harness_kmsg_fd, 0, SEEK_END);
}

static bool harness_stall_said(const char *msg)
{
	for (size_t i = 0;
	     i < sizeof(harness_stall_words) / sizeof(harness_stall_words[0]);
	     i++)
		if (strstr(msg, harness_stall_words[i]))
			return true;
	return false;
}

/* A record is "PRI,SEQ,USECS,FLAGS;MESSAGE\n" then continuation lines. */
static bool harness_watch__check(char *why, size_t len)
{
	int shown = 0, level;
	bool stalled = false;
	char rec[2048], *msg;
	ssize_t n;

	if (harness_kmsg_fd < 0)
		return false;
	for (int i = 0; i < HARNESS_KMSG_READ_MAX; i++) {
		n = read(harness_kmsg_fd, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue; /* records overwritten: on from the oldest */
		if (n <= 0)
			break;
		rec[n] = '\0';
		msg = strchr(rec, ';');
		if (!msg || sscanf(rec, "%d", &level) != 1)
			continue;
		msg++;
		msg[strcspn(msg, "\n")] = '\0';
		if ((level & 7) > HARNESS_KMSG_WARNING)
			continue;
		if (shown++ < HARNESS_KMSG_PRINT_MAX)
			printf("# harness kernel: %s\n", msg);
		if (!stalled && harness_stall_said(msg)) {
			snprintf(why, len,
				 "the harness kernel reported \"%.160s\"", msg);
			stalled = true;
		}
	}
	fflush(stdout);
	return stalled;
}

static const struct ksft_environment_watch harness_watch = {
	.start = harness_watch__start,
	.check = harness_watch__check,
};

__attribute__((constructor)) static void harness_watch__init(void)
{
	if (getenv("KILN_IN_HARNESS"))
		ksft_watch_environment(&harness_watch);
}

#endif
