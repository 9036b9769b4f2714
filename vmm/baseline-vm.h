/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_BASELINE_VM_H
#define KILN_BASELINE_VM_H

/*
 * vmm/baseline-vm.c: start --baseline-cache DIR (Documentation/
 * snapshots.md, "Baselines"). vm__baseline_open, a build step after the
 * identity and before restore-check: the cache checked (an unsafe one
 * is an error), the identity looked up (a valid entry leased and set as
 * vm->restore; an invalid one discarded with one line), the bounds
 * enforced, and a capture prepared when there was no entry.
 * vm__baseline_capture, on the API thread when the agent is first
 * ready (before any request reaches it): the snapshot saved into the
 * cache. vm__baseline_failed: a restore from the entry failed; logs
 * why, discards it and returns VM_BASELINE_COLD, on which main() builds
 * the VM once more with cfg->baseline.no_lookup.
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>

#include "lib/compiler.h"

struct vm;

#define VM_BASELINE_COLD (-ESTALE)
int __must_check vm__baseline_open(struct vm *vm);
void vm__baseline_close(struct vm *vm);
bool vm__baseline_restoring(const struct vm *vm);
int __must_check vm__baseline_failed(struct vm *vm, int err);
/* A capture is planned: the API thread renames (seccomp needs). */
bool vm__baseline_needs_publish(const struct vm *vm);
void vm__baseline_capture(struct vm *vm);
/*
 * A VM with mounts: the agent detached them for the capture (err 0: it
 * runs now), or could not (-errno, why: nothing is saved).
 */
void vm__baseline_capture_detached(struct vm *vm, int err, const char *why);
/* A VM restored from the cache whose mounts could not be attached. */
void vm__baseline_attach_failed(struct vm *vm, const char *why);
/* vm.status's "baseline" object; NULL without a cache. */
json_t *vm__baseline_status(const struct vm *vm);

#endif
