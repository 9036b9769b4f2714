/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LOG_H
#define KILN_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/*
 * Messages go to stderr, one line each, prefixed with "vmm: ". Errors are
 * reported once, at the edge that gives up, with the object they concern.
 * --log FILE sends them to a file instead, --log-level picks which,
 * --log-format json makes each line one JSON object (Documentation/cli.md,
 * "The vmm's log").
 */
enum log_level {
	LOG_ERR,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG, /* printed only with --verbose (--log-level debug) */
};

enum log_format {
	LOG_FORMAT_TEXT, /* "vmm: warning: MESSAGE" */
	LOG_FORMAT_JSON, /* {"time", "level", "pid", "msg"} */
};

/* "error", "warn", "info", "debug" by enum log_level, NULL-terminated. */
extern const char *const log__level_names[];
/* "text", "json" by enum log_format, NULL-terminated. */
extern const char *const log__format_names[];

void log__print(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define pr_err(...)   log__print(LOG_ERR, __VA_ARGS__)
#define pr_warn(...)  log__print(LOG_WARN, __VA_ARGS__)
#define pr_info(...)  log__print(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) log__print(LOG_DEBUG, __VA_ARGS__)

/*
 * The log's settings are the process's one piece of mutable global
 * state: set them before any thread starts, never after.
 */
void log__set_verbose(bool verbose); /* level debug, or back to info */
bool log__debug_enabled(void);
/* Lines above level are dropped (default LOG_INFO). */
void log__set_level(enum log_level level);
void log__set_format(enum log_format format);
/*
 * Lines go to path (created 0640, appended to) instead of stderr; the
 * file is the log's until log__close. 0 or -errno.
 */
int __attribute__((warn_unused_result)) log__open(const char *path);
/* Back to stderr; the file, if any, closed. */
void log__close(void);

/*
 * One line as the log writes it, newline included, into buf (truncated
 * to len, always terminated); its length. ts NULL: now. For the tests.
 */
size_t log__format_line(char *buf, size_t len, enum log_format format,
			enum log_level level, const char *msg,
			const struct timespec *ts);

#endif
