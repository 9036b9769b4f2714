/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_SNAPSHOT_LOAD_H
#define KILN_SNAPSHOT_LOAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "snapshot/file.h"

/*
 * What a restore reads of a snapshot directory before it touches KVM
 * (Documentation/snapshots.md, "Restore"): the directory verified
 * (snap_dir__verify: modes, format, every part's size and digest), the
 * manifest matched against what this monitor and this config expect,
 * the small parts read into memory and their digests checked again on
 * the bytes read (so what is used is what was verified), and the memory
 * file opened for a MAP_PRIVATE mapping.
 */

#define SNAP_MAX_VCPUS 255U /* "vcpu254.state": what a snapshot names */

struct snap_expect {
	const char *vmm;	     /* this monitor's version */
	const char *identity_digest; /* "sha256:<hex>" of this config */
	unsigned int vcpus;
	uint64_t memory_bytes;
	bool root_layer; /* an ephemeral root: SNAP_LAYER_FILE is needed */
	/*
	 * This config's identity object, whose digest is identity_digest;
	 * NULL: a digest that differs is reported without saying what of
	 * it differs.
	 */
	const json_t *identity;
};

struct snap_blob {
	uint8_t *p;
	size_t len;
};

struct snap_load {
	json_t *manifest;
	json_t *devices; /* devices.json: an array, one object per device */
	struct snap_blob vm_state;
	struct snap_blob *vcpu_state; /* vcpus of them, by id */
	unsigned int vcpus;
	int mem_fd; /* memory.raw, O_RDONLY; -1: none */
	uint64_t mem_bytes;
	int layer_fd; /* SNAP_LAYER_FILE, O_RDONLY, rehashed; -1: none */
	uint64_t layer_bytes;
};

/*
 * 0 with everything in l (snap_load__close releases it), or -errno
 * with one line in err naming the file or the manifest's field and why:
 * -EPERM (modes), -EINVAL (a manifest that is not of this format, this
 * monitor's version, or this config: identity, vCPUs, memory; a part it
 * lacks), -EBADMSG (a digest or size that does not match), another
 * (I/O).
 */
int __must_check snap_load__open(struct snap_load *l, const char *dir,
				 const struct snap_expect *want, char *err,
				 size_t len);
void snap_load__close(struct snap_load *l);

#endif
