/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_PARSE_H
#define KILN_LIB_PARSE_H

#include <stdint.h>

#include "lib/compiler.h"

/*
 * Numbers as options and configuration files spell them: the vmm's
 * config, the network section and the mounts all read counts and sizes
 * the same way, so they share these.
 */

/* Parse a decimal count with no sign, junk or overflow. */
int __must_check parse__uint(const char *s, uint64_t max, uint64_t *out);
/*
 * Parse a byte count: decimal, optionally followed by K, M, G or T (powers
 * of 1024, also spelled KiB, MiB, GiB, TiB). -EINVAL for junk, -ERANGE
 * above max.
 */
int __must_check parse__size(const char *s, uint64_t max, uint64_t *out);

#endif
