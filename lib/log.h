/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LOG_H
#define KILN_LOG_H

#include <stdbool.h>

/*
 * Messages go to stderr, one line each, prefixed with "vmm: ". Errors are
 * reported once, at the edge that gives up, with the object they concern.
 */
enum log_level {
	LOG_ERR,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG, /* printed only with --verbose */
};

void log__print(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define pr_err(...)   log__print(LOG_ERR, __VA_ARGS__)
#define pr_warn(...)  log__print(LOG_WARN, __VA_ARGS__)
#define pr_info(...)  log__print(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) log__print(LOG_DEBUG, __VA_ARGS__)

void log__set_verbose(bool verbose);
bool log__debug_enabled(void);

#endif
