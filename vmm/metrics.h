/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_METRICS_H
#define KILN_METRICS_H

/*
 * vm.metrics and --metrics FILE (Documentation/api.md, "vm.metrics"):
 * the pieces of the metrics object, built from plain snapshots of the
 * counters so that they need no VM, and the file the monitor appends one
 * object per line to. Gathering the snapshots from a running VM is
 * vmm/vm-metrics.c's.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "devices/virtio/device.h"
#include "lib/log.h"

#define METRICS_DEFAULT_INTERVAL_MS 1000U
#define METRICS_MIN_INTERVAL_MS	    100U     /* a line per 100 ms at most */
#define METRICS_MAX_INTERVAL_MS	    3600000U /* an hour */
/* /proc/self/status is about 1.5 KiB; the fields we read come first. */
#define METRICS_PROC_STATUS_MAX 4096U

/* Why a vCPU left KVM_RUN, by kind (the names in metrics__exit_names). */
enum vcpu_exit_kind {
	VCPU_EXIT_IO,		/* port I/O: the UART, the exit device */
	VCPU_EXIT_MMIO,		/* a virtio-mmio register, unclaimed MMIO */
	VCPU_EXIT_HLT,		/* HLT with no in-kernel LAPIC to take it */
	VCPU_EXIT_SHUTDOWN,	/* triple fault */
	VCPU_EXIT_SYSTEM_EVENT, /* reset, shutdown, crash */
	VCPU_EXIT_INTR,		/* a kick: a signal interrupted KVM_RUN */
	VCPU_EXIT_OTHER,	/* anything else (KVM failures) */
	VCPU_EXIT_NR,
};

extern const char *const metrics__exit_names[VCPU_EXIT_NR];

struct vcpu_stats {
	uint64_t exits[VCPU_EXIT_NR];
	uint64_t cpu_ns; /* the vCPU thread's CPU time, guest and host */
};

/* The monitor process's memory, from /proc/self/status; bytes. */
struct proc_mem {
	uint64_t rss;  /* VmRSS */
	uint64_t anon; /* RssAnon: guest RAM it touched, heap, stacks */
};

/* {"id", "cpuNs", "exits": {kind: count, ..., "total"}} */
json_t *metrics__vcpu_json(unsigned int id, const struct vcpu_stats *s);
/* {"name", "type", "requests", "completed", "inFlight", ...} */
json_t *metrics__device_json(const char *name, const char *type,
			     const struct virtio_device_stats *s);
/* {"bytes": used, "limitBytes": max (0: none)} */
json_t *metrics__usage_json(uint64_t used, uint64_t max);
/*
 * VmRSS and RssAnon out of /proc/self/status text (len bytes, need not
 * be NUL-terminated): 0, or -EINVAL when either line is missing.
 */
int __must_check metrics__parse_status(const char *text, size_t len,
				       struct proc_mem *m);
/* The same from fd, /proc/self/status opened before the filter (pread). */
int __must_check metrics__read_status(int fd, struct proc_mem *m);
/* {"rssBytes", "anonBytes"} */
json_t *metrics__process_json(const struct proc_mem *m);

/*
 * The --metrics file: one JSON object per line, appended. Opened
 * O_APPEND | O_NONBLOCK (a FIFO whose reader is slow or gone drops the
 * line instead of holding up the monitor); each line is one write(2),
 * nothing is queued, so the monitor's memory does not grow with the
 * file. A failed or short write drops the line (a short write is ended
 * with a newline so the next line starts clean), is counted, and is
 * reported once; the VM goes on.
 */
struct metrics_file;

/* Creates FILE 0600 if need be. -errno, reported here with the path. */
int __must_check metrics_file__open(struct metrics_file **out,
				    const char *path);
/* Appends obj (not stolen) as one line. 0 or the write's -errno. */
int metrics_file__write(struct metrics_file *f, const json_t *obj);
/* Lines written, and lines dropped (failed, short or refused writes). */
uint64_t metrics_file__lines(const struct metrics_file *f);
uint64_t metrics_file__dropped(const struct metrics_file *f);
void metrics_file__close(struct metrics_file *f); /* NULL ok */

#endif
