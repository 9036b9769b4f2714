/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_ERRF_H
#define KILN_LIB_ERRF_H

#include <stddef.h>

/*
 * Format "what: why" into err (len bytes, truncated, always terminated)
 * and return ret, so a parser can fail in one line:
 *	return errf(err, len, -EINVAL, "\"%s\" must be a string", key);
 */
int errf(char *err, size_t len, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
