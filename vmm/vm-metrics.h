/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VM_METRICS_H
#define KILN_VM_METRICS_H

/* vmm/vm-metrics.c: a build step, and the metrics object. */
#include <jansson.h>

#include "lib/compiler.h"

struct vm;

int __must_check vm_metrics__init(struct vm *vm);
void vm_metrics__exit(struct vm *vm);
/* Everything but the API's "agent" member, added to o; any thread. */
void vm__metrics_fill(struct vm *vm, json_t *o);
/* One line to the --metrics file, if there is one; main loop. */
void vm__metrics_write(struct vm *vm);

#endif
