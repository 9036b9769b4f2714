/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_ROOTFS_CMD_INTERNAL_H
#define KILN_ROOTFS_CMD_INTERNAL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "vmm/rootfs.h"

/*
 * What vmm/rootfs-cmd.c (describe, bytes, dispatch) and
 * vmm/rootfs-flatten.c (flatten) share. Every function fills err with
 * one line on failure and returns -errno.
 */

#define ROOTFS_CMD_ERR_LEN 1024
#define ROOTFS_CMD_MAX_POS 2 /* positional arguments */

/*
 * Options, then positionals anywhere between them, into pos (at most
 * ROOTFS_CMD_MAX_POS). Returns the option, -1 at the end, '?' with err
 * set. Set optind = 1 before the first call.
 */
int rootfs_cmd__next_arg(int argc, char **argv, const struct option *lo,
			 const char **pos, int *npos, char *err, size_t len);

/* A size option: min..max bytes (K, M suffixes), a power of two if pow2. */
int __must_check rootfs_cmd__parse_bytes(const char *opt, const char *s,
					 uint64_t min, uint64_t max, bool pow2,
					 uint64_t *out, char *err, size_t len);

/*
 * Read fd from its start to its end, chunk bytes at a time, hashing it
 * into digest ("sha256:<hex>") and, with out >= 0, writing it there.
 * *total: bytes read. A write to a reader that is gone returns
 * ROOTFS_CMD_EPIPE with err untouched.
 */
int __must_check rootfs_cmd__stream(int fd, int out, size_t chunk,
				    const char *what,
				    char digest[ROOTFS_DIGEST_LEN + 1],
				    uint64_t *total, char *err, size_t len);

/* The file's name without its directory and last extension; malloc'ed. */
char *rootfs_cmd__default_name(const char *path);

/* `vmm rootfs flatten` (vmm/rootfs-flatten.c); argv[0] is "flatten". */
int rootfs_cmd__flatten(int argc, char **argv, char *err, size_t len);

#endif
