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
 * A read-only root disk mounted at @root (before the switch) that lacks
 * a mount's directory gets it without a write to the disk: a small
 * tmpfs holding the missing directories (and copies of the image's
 * directories above them) is stacked over the disk as a read-only
 * overlay, which becomes @root. Only for paths whose every existing
 * component is a directory, and not inside another mount (that mount's
 * own directories are made in it). Nothing missing: nothing changes.
 * 0, or -errno after saying why on stderr.
 */
int init_mounts__make_points(struct init_mounts *m, const char *root);
/*
 * The paths init_mounts__make_points() made, NULL-terminated, for the
 * guest agent's facts; NULL when it made none.
 */
const char *const *init_mounts__made(const struct init_mounts *m);
/*
 * Mount each one (in the final root, before the command runs), making
 * its directory (and parents) as needed. NULL: nothing to do. The first
 * failure is reported on stderr; returns 0 or -errno.
 */
int init_mounts__mount(const struct init_mounts *m);

#endif
