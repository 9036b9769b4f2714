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
 *
 * A test that times out is looked at before it is killed: each thread of
 * each vmm in its process group is looked at HARNESS_SPIN_LOOKS times
 * over HARNESS_SPIN_SECS, and its state, kernel wait channel, how many
 * looks found it runnable and its guest time go into the log. A vCPU
 * thread (one that has run a guest: only vCPU threads have guest time)
 * found runnable (state R) at every look, with the test still stuck at
 * its timeout, is a guest that never halts: how a nested guest stuck on
 * its CPU looks under the harness's emulated SVM (seen with the vmm's
 * own threads idle, and QEMU's own guests hang there too:
 * Documentation/harness.md). The test runs once more. The verdict rests
 * on states, not on shares of CPU time: a busy machine slows a spinning
 * vCPU thread but never puts it to sleep, and a halted vCPU sleeps in
 * the kernel (halt polling is off) however idle the machine is.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "selftests/kselftest.h"

/* Of the kernel's log levels (the low 3 bits of a record's priority). */
#define HARNESS_KMSG_WARNING 4
/* At most this many records read, and printed, per failed test. */
#define HARNESS_KMSG_READ_MAX  10000
#define HARNESS_KMSG_PRINT_MAX 16

/* Sampling a timed-out test's vmm threads. */
#define HARNESS_SPIN_SECS   2
#define HARNESS_SPIN_LOOKS  20
#define HARNESS_THREADS_MAX 64
/* Waiting for a stuck vmm's report of its devices (SIGUSR2). */
#define HARNESS_REPORT_SECS 2
/* A report written to a log file: polled, done once it stops growing. */
#define HARNESS_FILE_POLL_MS  50
#define HARNESS_FILE_QUIET_MS 500
#define HARNESS_CONSOLE_LINES 20

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

struct harness_task {
	pid_t pid, tid;
	long guest; /* guest_time, in ticks, at the first look */
};

/* Field numbers in /proc/PID/stat (proc(5)), counted from 1. */
#define STAT_STATE	3
#define STAT_PGRP	5
#define STAT_GUEST_TIME 43

/*
 * From /proc/@path/stat: state, process group, guest time (time a vCPU
 * thread spent running its guest, in ticks) and the command. The command
 * (in parentheses) may hold spaces: fields count from its ')'.
 */
static bool harness_stat(const char *path, char *state, pid_t *pgrp,
			 long *guest, char *comm, size_t comm_len)
{
	char buf[1024], *open_paren, *close_paren, *field, *save;
	FILE *f = fopen(path, "r");
	int nr = STAT_STATE, got = 0;
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	open_paren = strchr(buf, '(');
	close_paren = strrchr(buf, ')');
	if (!open_paren || !close_paren || close_paren < open_paren)
		return false;
	snprintf(comm, comm_len, "%.*s", (int)(close_paren - open_paren - 1),
		 open_paren + 1);
	for (field = strtok_r(close_paren + 1, " ", &save); field;
	     field = strtok_r(NULL, " ", &save), nr++) {
		if (nr == STAT_STATE)
			*state = field[0], got++;
		else if (nr == STAT_PGRP)
			*pgrp = atoi(field), got++;
		else if (nr == STAT_GUEST_TIME)
			*guest = atol(field), got++;
	}
	return got == 3;
}

/*
 * The threads of the vmm processes in process group @pgid (or, with @only,
 * of that vmm alone), at most @max.
 */
static int harness_vmm_threads(pid_t pgid, pid_t only, struct harness_task *t,
			       int max)
{
	char path[96], comm[64], state;
	struct dirent *p, *q;
	DIR *procs, *tasks;
	long guest;
	pid_t pg;
	int n = 0;

	procs = opendir("/proc");
	if (!procs)
		return 0;
	while ((p = readdir(procs)) && n < max) {
		pid_t pid = atoi(p->d_name);

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if (pid <= 0 || (only && pid != only) ||
		    !harness_stat(path, &state, &pg, &guest, comm,
				  sizeof(comm)) ||
		    (!only && pg != pgid) || strcmp(comm, "vmm"))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
		tasks = opendir(path);
		while (tasks && (q = readdir(tasks)) && n < max) {
			pid_t tid = atoi(q->d_name);

			snprintf(path, sizeof(path), "/proc/%d/task/%d/stat",
				 (int)pid, (int)tid);
			if (tid > 0 && harness_stat(path, &state, &pg, &guest,
						    comm, sizeof(comm)))
				t[n++] = (struct harness_task){ pid, tid,
								guest };
		}
		if (tasks)
			closedir(tasks);
	}
	closedir(procs);
	return n;
}

/* A thread's state and guest time now; false if it is gone. */
static bool harness_task_stat(const struct harness_task *t, char *state,
			      long *guest)
{
	char path[96], comm[64];
	pid_t pg;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)t->pid,
		 (int)t->tid);
	return harness_stat(path, state, &pg, guest, comm, sizeof(comm));
}

/*
 * The state of a stuck vmm's devices: SIGUSR2 makes it log each virtio
 * device and ring (vmm/vm-run.c). Its stderr is a pipe the test reads, so
 * the test is stopped first (it is killed next anyway) and the pipe is
 * read from here, through /proc, for up to HARNESS_REPORT_SECS; the lines
 * from the report's first on are printed as "# vmm state: ...".
 */
/* The last lines the guest wrote to its console and the test did not read. */
static void harness_console_tail(pid_t vmm)
{
	char path[64], buf[8192], *p;
	ssize_t n, got = 0;
	int fd, lines = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd/1", (int)vmm);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	/* Keep the last buffer's worth. */
	while ((n = read(fd, buf, sizeof(buf) - 1)) > 0)
		got = n;
	close(fd);
	if (got <= 0)
		return;
	buf[got] = '\0';
	for (p = buf + got; p > buf && lines <= HARNESS_CONSOLE_LINES; p--)
		lines += p[-1] == '\n';
	for (char *line = p, *end; line && *line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		if (*line)
			printf("# guest console: %d: %s\n", (int)vmm, line);
	}
}

/*
 * One line of a vmm's report, judged: does it show a part that still
 * owes the guest something? *vcpus counts the vCPU lines (each must say
 * halted). A device must have its interrupt line low (status 0) with as
 * many lowers as raises (the driver read and acknowledged every one) and
 * no request in hand ("busy 0" where the device says; virtio-vsock:
 * "replies 0", "owing 0"); a ready queue must have taken every buffer
 * made available (no kick missed; the receive and event queues, q0 and
 * q2, of a vsock device that owes nothing may keep buffers it has no use
 * for: *rx_idle, set by the device's own line, which comes before its
 * queues'), used
 * every one it took, decided on each, and told the driver of a used
 * index past its used_event, unless the driver saw them all (used_event
 * at used idx). *unread is set by a queue whose driver was told of used
 * buffers it has not read: a guest sitting on completions it was
 * interrupted for, not one waiting for something else (a sleep, the
 * host's input).
 */
static bool harness_line_settled(const char *line, int *vcpus, bool *unread,
				 bool *rx_idle)
{
	unsigned int a, t, u, sig, nt, ev, rd, ae, sz, fl, uf;
	unsigned long long raised, lowered;
	const char *q;

	if ((q = strstr(line, ": vcpu")) && strchr(q + 6, ':')) {
		(*vcpus)++;
		return strstr(line, ": halted, ") != NULL;
	}
	if ((q = strstr(line, " isr "))) {
		/*
		 * virtio-vsock says what it owes the guest: replies, and
		 * connections with something to send. Owing nothing, its
		 * receive queue (q0) may hold buffers it has no use for.
		 */
		*rx_idle = strstr(line, "| replies 0;") &&
			   strstr(line, " owing 0;") &&
			   !strstr(line, " more") && !strstr(line, " rx-held");
		if (sscanf(q, " isr %x (line raised %llu, lowered %llu)", &a,
			   &raised, &lowered) != 3)
			return false;
		if (a || raised != lowered)
			return false;
		if (strstr(line, " owing ") && !*rx_idle)
			return false;
		q = strstr(line, " busy ");
		return !q || (sscanf(q, " busy %u", &a) == 1 && !a);
	}
	if ((q = strstr(line, ": size "))) {
		char bare[512];
		char *none;

		/* A queue never decided on: "signalled 0 (none yet)". */
		snprintf(bare, sizeof(bare), "%s", q);
		none = strstr(bare, " (none yet)");
		if (none)
			memmove(none, none + 11, strlen(none + 11) + 1);
		q = bare;
		if (sscanf(q,
			   ": size %u avail idx %u flags %x taken %u | used "
			   "idx %u flags %x signalled %u notified %u | "
			   "used_event %u (last read %u) avail_event %u",
			   &sz, &a, &fl, &t, &u, &uf, &sig, &nt, &ev, &rd,
			   &ae) != 11)
			return false;
		/* Buffers not taken: a lost kick, unless nothing is owed. */
		if (a != t &&
		    !(*rx_idle &&
		      (strstr(line, " q0: ") || strstr(line, " q2: ")) &&
		      (uint16_t)(a - t) <= sz))
			return false;
		if (u != t || u != sig)
			return false;
		if (u == ev)
			return true;
		/* Told of used entries it has not read: the guest's move. */
		*unread = true;
		return (uint16_t)(nt - ev - 1) < (uint16_t)(u - ev);
	}
	return strstr(line, ": not ready") || strstr(line, "SIGUSR2:");
}

static bool harness_vmm_report(pid_t pgid, pid_t vmm)
{
	char path[64], buf[16384], *line, *end;
	struct pollfd p = { .events = POLLIN };
	bool on = false, settled = true, unread = false, rx_idle = false;
	bool is_file;
	struct stat st;
	size_t got = 0;
	int vcpus = 0;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/fd/2", (int)vmm);
	p.fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (p.fd < 0)
		return false;
	/*
	 * A pipe (vmm run under spawn__run) gives what is written from now
	 * on; a log file (vmm start, spawn_logged) is read from its end.
	 */
	is_file = !fstat(p.fd, &st) && S_ISREG(st.st_mode);
	if (is_file)
		lseek(p.fd, 0, SEEK_END);
	kill(pgid, SIGSTOP);
	harness_console_tail(vmm);
	kill(vmm, SIGUSR2);
	for (int quiet = 0; got < sizeof(buf) - 1;) {
		if (!is_file && poll(&p, 1, HARNESS_REPORT_SECS * 1000) != 1)
			break;
		n = read(p.fd, buf + got, sizeof(buf) - 1 - got);
		if (n > 0) {
			got += (size_t)n;
			quiet = 0;
			continue;
		}
		if (!is_file || n < 0)
			break;
		/* A file has no end to wait on: until it stops growing. */
		if (++quiet * HARNESS_FILE_POLL_MS >=
		    (got ? HARNESS_FILE_QUIET_MS : HARNESS_REPORT_SECS * 1000))
			break;
		usleep(HARNESS_FILE_POLL_MS * 1000);
	}
	close(p.fd);
	buf[got] = '\0';
	for (line = buf; line && *line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		on = on || strstr(line, "SIGUSR2:");
		if (!on || !*line)
			continue;
		printf("# vmm state: %d: %s\n", (int)vmm, line);
		settled =
			harness_line_settled(line, &vcpus, &unread, &rx_idle) &&
			settled;
	}
	fflush(stdout);
	return on && vcpus > 0 && settled && unread;
}

/*
 * The kernel stack of a thread (/proc/PID/task/TID/stack, root only),
 * one line a frame: where a thread that spins without running its guest
 * is stuck in the harness kernel.
 */
static void harness_print_kstack(pid_t pid, pid_t tid)
{
	char path[96], line[160];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stack", (int)pid,
		 (int)tid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		printf("# harness watch: vmm %d thread %d kernel stack: %s",
		       (int)pid, (int)tid, line);
	fclose(f);
}

/*
 * Looks at threads @t HARNESS_SPIN_LOOKS times over HARNESS_SPIN_SECS and
 * prints each one's state, wait channel, looks runnable and guest time;
 * true, with why (@what says when), if one ran non-stop: in its guest,
 * or, when its guest time did not move, in the harness kernel (its
 * kernel stack is printed: ci49 had such a vCPU thread, and SIGKILL
 * never ended it).
 */
static bool harness_spinning(struct harness_task *t, int n, const char *what,
			     char *why, size_t len)
{
	int runnable[HARNESS_THREADS_MAX] = { 0 };
	int looked[HARNESS_THREADS_MAX] = { 0 };
	char path[96], wchan[64], state = '?';
	bool spun = false;
	long guest = 0;
	FILE *f;

	for (int look = 0; look < HARNESS_SPIN_LOOKS; look++) {
		usleep(HARNESS_SPIN_SECS * 1000000 / HARNESS_SPIN_LOOKS);
		for (int i = 0; i < n; i++) {
			if (!harness_task_stat(&t[i], &state, &guest))
				continue;
			looked[i]++;
			runnable[i] += state == 'R';
		}
	}
	for (int i = 0; i < n; i++) {
		if (!harness_task_stat(&t[i], &state, &guest))
			continue;
		wchan[0] = '\0';
		snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan",
			 (int)t[i].pid, (int)t[i].tid);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(wchan, sizeof(wchan), f))
				wchan[0] = '\0';
			fclose(f);
		}
		printf("# harness watch: vmm %d thread %d: state %c, wait %s, "
		       "runnable at %d of %d looks in %d s, guest time %ld "
		       "ticks (+%ld)\n",
		       (int)t[i].pid, (int)t[i].tid, state,
		       wchan[0] ? wchan : "-", runnable[i], looked[i],
		       HARNESS_SPIN_SECS, guest, guest - t[i].guest);
		if (!spun && guest > 0 && looked[i] == HARNESS_SPIN_LOOKS &&
		    runnable[i] == looked[i]) {
			bool in_kernel = guest == t[i].guest;

			if (in_kernel)
				harness_print_kstack(t[i].pid, t[i].tid);
			snprintf(why, len,
				 "vmm thread %d %s (runnable at each of %d "
				 "looks) %s",
				 (int)t[i].tid,
				 in_kernel ? "spun in the harness kernel, its "
					     "guest time still" :
					     "ran its guest non-stop",
				 looked[i], what);
			spun = true;
		}
	}
	fflush(stdout);
	return spun;
}

/*
 * The same for vmm @pid whose guest never answered (a start whose agent
 * was not ready in time): the spinning guest of a test at its timeout.
 */
static __attribute__((unused)) bool harness_vmm_spinning(pid_t pid, char *why,
							 size_t len)
{
	struct harness_task t[HARNESS_THREADS_MAX];
	int n = harness_vmm_threads(0, pid, t, HARNESS_THREADS_MAX);

	return n && harness_spinning(t, n, "while its agent never became ready",
				     why, len);
}

static bool harness_watch__timed_out(pid_t pgid, char *why, size_t len)
{
	struct harness_task t[HARNESS_THREADS_MAX];
	int n = harness_vmm_threads(pgid, 0, t, HARNESS_THREADS_MAX);
	bool spun;

	if (!n)
		return false;
	spun = harness_spinning(t, n, "with the test stuck at its timeout", why,
				len);
	for (int i = 0; i < n; i++) {
		if (t[i].tid != t[i].pid ||
		    !harness_vmm_report(pgid, t[i].pid) || spun)
			continue;
		snprintf(
			why, len,
			"vmm %d stopped with every vCPU halted and every virtio "
			"ring settled (all buffers taken and used, the driver "
			"told of each, every interrupt acknowledged) and "
			"completions the guest was told of left unread: a "
			"wakeup lost inside the nested guest",
			(int)t[i].pid);
		spun = true;
	}
	return spun;
}

static const struct ksft_environment_watch harness_watch = {
	.start = harness_watch__start,
	.timed_out = harness_watch__timed_out,
	.check = harness_watch__check,
};

__attribute__((constructor)) static void harness_watch__init(void)
{
	if (getenv("KILN_IN_HARNESS"))
		ksft_watch_environment(&harness_watch);
}

#endif
