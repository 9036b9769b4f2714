/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_ROOTFS_CMD_H
#define KILN_ROOTFS_CMD_H

/*
 * `vmm rootfs describe | bytes | flatten`: root images handled offline,
 * without a VM or /dev/kvm (Documentation/rootfs.md, "Images out of a
 * machine"). argv[0] is "rootfs". Returns 0; ROOTFS_CMD_EPIPE when bytes
 * found its reader gone (nothing is said: the reader chose to stop);
 * another -errno once one line on stderr said what and why.
 */
#define ROOTFS_CMD_EPIPE (-EPIPE)

int rootfs_cmd__main(int argc, char **argv);

#endif
