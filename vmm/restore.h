/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_RESTORE_H
#define KILN_RESTORE_H

/*
 * vmm/restore.c: start --restore DIR (Documentation/snapshots.md,
 * "Restore"), two build steps. vm__restore_open, before KVM is touched:
 * the snapshot verified against this monitor and config and read
 * (vm->restore); any mismatch is one error line naming the file or the
 * field. vm__restore_state, once the vCPUs and devices exist: the
 * vCPUs', the VM's and the devices' state set. The memory step maps
 * memory.raw instead of anonymous memory, and the boot step loads
 * nothing. The VM is then CREATED as a booted one is (vmm/vm-state.h).
 */
#include "lib/compiler.h"

struct vm;

int __must_check vm__restore_open(struct vm *vm);
void vm__restore_close(struct vm *vm);
int __must_check vm__restore_state(struct vm *vm);

#endif
