// SPDX-License-Identifier: GPL-2.0
/*
 * The monitor's start-up and tear-down traced by itself: a timestamp per
 * phase (vmm/trace-startup.h), the first mark of each winning, read by
 * vm.metrics while the VM runs and written to --trace-startup FILE as
 * the process exits. The origin is main()'s first line: what comes
 * before it (exec, the dynamic loader) is seen only from outside, which
 * is why each line also carries the absolute CLOCK_MONOTONIC time
 * (tools/bench-boot puts its spawn time beside it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "vmm/trace-startup.h"

static const char *const names[TRACE_NR] = {
	[TRACE_START] = "start",
	[TRACE_OPTIONS] = "options",
	[TRACE_KVM] = "kvm",
	[TRACE_DEVICES] = "devices",
	[TRACE_LOADED] = "loaded",
	[TRACE_BUILT] = "built",
	[TRACE_RELEASED] = "released",
	[TRACE_FIRST_RUN] = "firstRun",
	[TRACE_FIRST_OUTPUT] = "firstOutput",
	[TRACE_AGENT_READY] = "agentReady",
	[TRACE_POWER_OFF] = "powerOff",
	[TRACE_DRAINED] = "drained",
	[TRACE_EXIT] = "exit",
};

/* Reached only when the guest does something: not in the chain. */
static bool guest_event(enum trace_phase p)
{
	return p == TRACE_FIRST_OUTPUT || p == TRACE_AGENT_READY;
}

uint64_t startup_trace__monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void startup_trace__init(struct startup_trace *t, uint64_t (*clock)(void))
{
	t->clock = clock ? clock : startup_trace__monotonic;
	for (unsigned int i = 0; i < TRACE_NR; i++)
		atomic_init(&t->at[i], 0);
	t->fd = -1;
	startup_trace__mark(t, TRACE_START);
}

void startup_trace__exit(struct startup_trace *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}

int startup_trace__open(struct startup_trace *t, const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (t->fd >= 0)
		close(t->fd);
	t->fd = fd;
	return 0;
}

void startup_trace__mark(struct startup_trace *t, enum trace_phase phase)
{
	uint64_t none = 0;

	if (!t || phase <= TRACE_NONE || phase >= TRACE_NR)
		return;
	/* The first wins; relaxed: each stamp stands alone. */
	if (atomic_load_explicit(&t->at[phase], memory_order_relaxed))
		return;
	atomic_compare_exchange_strong_explicit(
		&t->at[phase], &none, t->clock(), memory_order_relaxed,
		memory_order_relaxed);
}

const char *startup_trace__name(enum trace_phase phase)
{
	if (phase <= TRACE_NONE || phase >= TRACE_NR)
		return NULL;
	return names[phase];
}

static uint64_t at(const struct startup_trace *t, enum trace_phase phase)
{
	return atomic_load_explicit(&t->at[phase], memory_order_relaxed);
}

int64_t startup_trace__us(const struct startup_trace *t, enum trace_phase phase)
{
	uint64_t t0, t1;

	if (phase <= TRACE_NONE || phase >= TRACE_NR)
		return -1;
	t0 = at(t, TRACE_START);
	t1 = at(t, phase);
	if (!t0 || !t1)
		return -1;
	/* Another thread's stamp, taken before ours: never below zero. */
	return t1 < t0 ? 0 : (int64_t)((t1 - t0) / 1000);
}

json_t *startup_trace__json(const struct startup_trace *t)
{
	json_t *o = json_object();
	int64_t us;

	for (int p = TRACE_START; o && p <= TRACE_AGENT_READY; p++) {
		us = startup_trace__us(t, p);
		if (us >= 0 &&
		    json_object_set_new(o, names[p], json_integer(us))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

int startup_trace__check(const struct startup_trace *t, enum trace_phase last,
			 char *err, size_t len)
{
	uint64_t prev = 0, run = at(t, TRACE_FIRST_RUN);
	int prev_p = TRACE_NONE;

	if (last <= TRACE_NONE || last >= TRACE_NR)
		return errf(err, len, -EINVAL, "no such phase %d", (int)last);
	for (int p = TRACE_START; p <= (int)last; p++) {
		uint64_t ns = at(t, p);

		if (guest_event(p)) {
			if (ns && run && ns < run)
				return errf(err, len, -EINVAL,
					    "%s before firstRun", names[p]);
			continue;
		}
		if (!ns)
			return errf(err, len, -EINVAL, "%s not reached",
				    names[p]);
		if (ns < prev)
			return errf(err, len, -EINVAL,
				    "%s (%llu ns) before %s (%llu ns)",
				    names[p], (unsigned long long)ns,
				    names[prev_p], (unsigned long long)prev);
		prev = ns;
		prev_p = p;
	}
	return 0;
}

int startup_trace__write(const struct startup_trace *t, int fd)
{
	char line[128];
	int n;

	for (int p = TRACE_START; p < TRACE_NR; p++) {
		if (!at(t, p))
			continue;
		n = snprintf(line, sizeof(line),
			     "{\"phase\":\"%s\",\"us\":%lld,\"monoNs\":%llu}\n",
			     names[p], (long long)startup_trace__us(t, p),
			     (unsigned long long)at(t, p));
		if (n < 0 || (size_t)n >= sizeof(line))
			return -EOVERFLOW;
		/* A regular file: a short write is an error. */
		errno = 0;
		if (write(fd, line, n) != n)
			return errno ? -errno : -EIO;
	}
	return 0;
}
