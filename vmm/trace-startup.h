/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_TRACE_STARTUP_H
#define KILN_TRACE_STARTUP_H

/*
 * vmm/trace-startup.c: the monitor's own start-up and tear-down, phase by
 * phase, on CLOCK_MONOTONIC (vm.metrics' "startup", --trace-startup FILE;
 * Documentation/api.md, Documentation/cli.md). One trace per process,
 * owned by cmd_run (vmm/main.c), borrowed by the VM (struct vm's trace):
 * it outlives the VM, so that the tear-down is traced too.
 */
#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"

/* In the order a boot reaches them; TRACE_NONE marks nothing. */
enum trace_phase {
	TRACE_NONE,
	TRACE_START,	    /* main() entered: the origin */
	TRACE_OPTIONS,	    /* options parsed and checked */
	TRACE_KVM,	    /* the KVM VM and its guest memory made */
	TRACE_DEVICES,	    /* every device built and attached */
	TRACE_LOADED,	    /* kernel, initrd, boot data in guest memory */
	TRACE_BUILT,	    /* vCPUs made and set (or a snapshot restored) */
	TRACE_RELEASED,	    /* threads started, filters in: vCPUs let go */
	TRACE_FIRST_RUN,    /* the first vCPU's first KVM_RUN */
	TRACE_FIRST_OUTPUT, /* the guest's first console byte (if any) */
	TRACE_AGENT_READY,  /* the guest agent answered (if there is one) */
	TRACE_POWER_OFF,    /* the run loop saw the VM stop */
	TRACE_DRAINED,	    /* vCPUs joined, devices stopped, VM freed */
	TRACE_EXIT,	    /* the process returns from main() */
	TRACE_NR
};

struct startup_trace {
	/* ns on CLOCK_MONOTONIC, never 0; a test gives a fake one */
	uint64_t (*clock)(void);
	/* ns on the clock when each phase was first reached; 0: not yet */
	_Atomic uint64_t at[TRACE_NR];
	int fd; /* --trace-startup FILE, written at exit; -1: none */
};

/* CLOCK_MONOTONIC in ns: the default clock. */
uint64_t startup_trace__monotonic(void);
/* Empty, on clock (NULL: CLOCK_MONOTONIC); marks TRACE_START now. */
void startup_trace__init(struct startup_trace *t, uint64_t (*clock)(void));
/* Closes the file, if any. */
void startup_trace__exit(struct startup_trace *t);
/* --trace-startup FILE: created 0600 or truncated, written at exit. */
int __must_check startup_trace__open(struct startup_trace *t, const char *path);
/*
 * phase reached now: the first mark of a phase wins (any thread; later
 * marks of it are ignored). t NULL: nothing.
 */
void startup_trace__mark(struct startup_trace *t, enum trace_phase phase);
/* The phase's name in the JSON ("firstRun"); NULL for none. */
const char *startup_trace__name(enum trace_phase phase);
/* µs from TRACE_START to phase, or -1 if either is not reached. */
int64_t startup_trace__us(const struct startup_trace *t,
			  enum trace_phase phase);
/*
 * vm.metrics' "startup": {name: µs from start} of the start-up phases
 * reached so far (TRACE_START to TRACE_AGENT_READY). NULL: no memory.
 */
json_t *startup_trace__json(const struct startup_trace *t);
/*
 * Every phase from TRACE_START to last reached, except the two that
 * depend on the guest (first output, agent ready), and none earlier than
 * the one before it; those two, if reached, no earlier than the first
 * KVM_RUN. 0, or -EINVAL with why in err.
 */
int __must_check startup_trace__check(const struct startup_trace *t,
				      enum trace_phase last, char *err,
				      size_t len);
/*
 * One JSON line per phase reached, in phase order, to fd:
 * {"phase":"firstRun","us":12345,"monoNs":...}. 0 or -errno.
 */
int __must_check startup_trace__write(const struct startup_trace *t, int fd);

#endif
