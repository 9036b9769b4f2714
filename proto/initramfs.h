/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_PROTO_INITRAMFS_H
#define KILN_PROTO_INITRAMFS_H

/*
 * The files the vmm appends to the guest's initramfs as a cpio archive
 * (bootloader/initrd.c) and the guest init reads before anything else
 * (guest/init): names inside the archive, without the leading slash.
 */
#define KILN_INITRAMFS_DIR  "kiln"
#define KILN_INITRAMFS_ARGV KILN_INITRAMFS_DIR "/argv" /* the command */
#define KILN_INITRAMFS_MOUNTS \
	KILN_INITRAMFS_DIR "/mounts"		       /* virtio-fs mounts */
#define KILN_INITRAMFS_CA KILN_INITRAMFS_DIR "/ca.pem" /* the interception CA */
/*
 * With the CA: its OpenSSL subject hash, KILN_CA_HASH_LEN lowercase hex
 * digits, no newline (the name of its file in /etc/ssl/certs).
 */
#define KILN_INITRAMFS_CA_HASH KILN_INITRAMFS_DIR "/ca.hash"
#define KILN_CA_HASH_LEN       8U /* "%08x" of X509_NAME_hash */
/* The boot's identity (vmm/identity.h): the bytes, no newline, no NUL. */
#define KILN_INITRAMFS_HOSTNAME KILN_INITRAMFS_DIR "/hostname" /* always */
#define KILN_INITRAMFS_CWD	KILN_INITRAMFS_DIR "/cwd"      /* with --cwd */

#endif
