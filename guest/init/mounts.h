/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_INIT_MOUNTS_H
#define KILN_INIT_MOUNTS_H

/*
 * The host's virtio-fs mounts (vmm/mounts.h): /kiln/mounts in the
 * initramfs holds, per mount, its tag, its guest path and "ro" or "rw",
 * each NUL-terminated, parents before children.
 */
#define KILN_MOUNTS_FILE "/kiln/mounts"

struct init_mounts;

/* Read the manifest (before the root switch: it is in the initramfs). */
struct init_mounts *init_mounts__load(void);
/*
 * Mount each one (in the final root, before the command runs), making
 * its directory (and parents) as needed. NULL: nothing to do. The first
 * failure is reported on stderr; returns 0 or -errno.
 */
int init_mounts__mount(const struct init_mounts *m);

#endif
