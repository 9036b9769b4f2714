// SPDX-License-Identifier: GPL-2.0
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/log.h"

/*
 * The one piece of process-wide state: which lines are written, how, and
 * where. It is set once from the command line before any thread starts.
 */
static struct {
	enum log_level level;
	enum log_format format;
	int fd; /* -1: stderr */
} log_state = { .level = LOG_INFO, .fd = -1 };

/* A message; escaped (every byte \u00XX at worst); a line with it. */
#define LOG_MSG_MAX	1024
#define LOG_ESCAPED_MAX (LOG_MSG_MAX * 6 + 1)
#define LOG_LINE_MAX	(LOG_ESCAPED_MAX + 128)

const char *const log__level_names[] = {
	[LOG_ERR] = "error",
	[LOG_WARN] = "warn",
	[LOG_INFO] = "info",
	[LOG_DEBUG] = "debug",
	NULL,
};

const char *const log__format_names[] = {
	[LOG_FORMAT_TEXT] = "text",
	[LOG_FORMAT_JSON] = "json",
	NULL,
};

void log__set_verbose(bool verbose)
{
	log_state.level = verbose ? LOG_DEBUG : LOG_INFO;
}

bool log__debug_enabled(void)
{
	return log_state.level >= LOG_DEBUG;
}

void log__set_level(enum log_level level)
{
	log_state.level = level;
}

void log__set_format(enum log_format format)
{
	log_state.format = format;
}

int log__open(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);

	if (fd < 0)
		return -errno;
	log__close();
	log_state.fd = fd;
	return 0;
}

void log__close(void)
{
	if (log_state.fd >= 0)
		close(log_state.fd);
	log_state.fd = -1;
}

static const char *const log_prefix[] = {
	[LOG_ERR] = "",
	[LOG_WARN] = "warning: ",
	[LOG_INFO] = "",
	[LOG_DEBUG] = "debug: ",
};

/* Bytes in the UTF-8 sequence at s (1 to 4), 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n, i;
	uint32_t c;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		n = 2, c = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3, c = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		n = 4, c = s[0] & 0x07;
	else
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and past U+10FFFF are not UTF-8. */
	if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) ||
	    (n == 4 && c < 0x10000) || (c >= 0xd800 && c <= 0xdfff) ||
	    c > 0x10ffff)
		return 0;
	return n;
}

/*
 * s as a JSON string's contents: quote, backslash and control characters
 * escaped, a byte that is not UTF-8 replaced by U+FFFD, so that every
 * line parses whatever a message quoted.
 */
static size_t json_escape(char *out, size_t len, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t at = 0, n;
	char esc[8];

	while (*p) {
		n = utf8_len(p);
		if (*p == '"' || *p == '\\')
			snprintf(esc, sizeof(esc), "\\%c", *p);
		else if (*p == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (*p == '\t')
			snprintf(esc, sizeof(esc), "\\t");
		else if (*p < 0x20)
			snprintf(esc, sizeof(esc), "\\u%04x", *p);
		else if (!n)
			snprintf(esc, sizeof(esc), "\\ufffd");
		else
			esc[0] = '\0';
		if (esc[0]) {
			n = 1;
			if (at + strlen(esc) < len)
				at += snprintf(out + at, len - at, "%s", esc);
		} else if (at + n < len) {
			memcpy(out + at, p, n);
			at += n;
		}
		p += n;
	}
	if (len)
		out[at < len ? at : len - 1] = '\0';
	return at;
}

size_t log__format_line(char *buf, size_t len, enum log_format format,
			enum log_level level, const char *msg,
			const struct timespec *ts)
{
	char when[32], text[LOG_ESCAPED_MAX];
	struct timespec now;
	struct tm tm;
	int n;

	if (format == LOG_FORMAT_TEXT) {
		n = snprintf(buf, len, "vmm: %s%s\n", log_prefix[level], msg);
		return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
	}
	if (!ts) {
		clock_gettime(CLOCK_REALTIME, &now);
		ts = &now;
	}
	gmtime_r(&ts->tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	json_escape(text, sizeof(text), msg);
	n = snprintf(buf, len,
		     "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"pid\":%d,"
		     "\"msg\":\"%s\"}\n",
		     when, ts->tv_nsec / 1000000, log__level_names[level],
		     (int)getpid(), text);
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

void log__print(enum log_level level, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX], line[LOG_LINE_MAX];
	va_list ap;
	size_t n;

	if (level > log_state.level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = log__format_line(line, sizeof(line), log_state.format, level, msg,
			     NULL);
	/* One write per line so vCPU threads never interleave halves. */
	if (write(log_state.fd >= 0 ? log_state.fd : STDERR_FILENO, line, n) <
	    0)
		(void)0;
}
