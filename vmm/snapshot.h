/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_VMM_SNAPSHOT_H
#define KILN_VMM_SNAPSHOT_H

/*
 * vmm/snapshot.c: vm.snapshot, and the identity a snapshot of this VM
 * has (Documentation/snapshots.md). The on-disk format is snapshot/.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/compiler.h"

struct vm;

/* The boot step, before it releases the files: keep what identity needs. */
int __must_check vm__snapshot_keep_boot(struct vm *vm);
void vm__snapshot_drop_boot(struct vm *vm);
/*
 * The identity digest a snapshot of this VM would have ("sha256:<hex>"
 * into out), from what vm__snapshot_keep_boot kept: what a restore
 * compares with the manifest's. With identity, also the object hashed (a
 * reference for the caller, which says what differs when the digests do).
 * 0 or -errno.
 */
#define VM_IDENTITY_DIGEST_LEN 80 /* "sha256:" + 64 hex + NUL, rounded */
int __must_check vm__snapshot_identity_digest(struct vm *vm, char *out,
					      size_t len, json_t **identity);

/*
 * vm.snapshot, on the control API's thread: pauses a running VM first
 * (vm__pause); leaves it paused unless resume (or on a failure, when it
 * was running before). 0 or -errno with one line in err: as vm__pause,
 * or -EOPNOTSUPP (a device without a save hook, named), -EPERM (the
 * directory's modes), another (I/O, KVM).
 */
int __must_check vm__snapshot(struct vm *vm, const char *dir, bool resume,
			      char *err, size_t len);

#endif
