/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LOG_H
#define KILN_LOG_H

#include <stdbool.h>

/*
 * Messages go to stderr, one line each, prefixed with "vmm: ". Errors are
 * reported once, at the edge that gives up, with the object they concern.
 */
void pr_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pr_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pr_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void log__set_verbose(bool verbose);

#define __must_check __attribute__((warn_unused_result))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
