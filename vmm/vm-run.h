/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_RUN_H
#define KILN_VM_RUN_H

/*
 * vmm/vm-run.c: running the VM vm__create built, and the lifecycle
 * transitions the control API asks for (Documentation/snapshots.md).
 */
#include <stddef.h>

#include "lib/compiler.h"

struct vm;
struct control_ops;

/*
 * Runs the guest to completion; returns the process exit code. ops: what
 * the control API may ask of the VM, given to it as it starts.
 * parent_fd: --die-with-parent's pidfd of the process that ran the vmm
 * (borrowed; -1: none): once it exits, the VM is shut down.
 */
int vm__run(struct vm *vm, const struct control_ops *ops, int parent_fd);

#endif
