// SPDX-License-Identifier: GPL-2.0
#include <stdarg.h>
#include <stdio.h>

#include "lib/log.h"

/*
 * The one piece of process-wide state: whether debug lines are printed. It
 * is set once from the command line before any thread starts.
 */
static bool log_verbose;

void log__set_verbose(bool verbose)
{
	log_verbose = verbose;
}

bool log__debug_enabled(void)
{
	return log_verbose;
}

static const char *const log_prefix[] = {
	[LOG_ERR] = "",
	[LOG_WARN] = "warning: ",
	[LOG_INFO] = "",
	[LOG_DEBUG] = "debug: ",
};

void log__print(enum log_level level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (level == LOG_DEBUG && !log_verbose)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line so vCPU threads never interleave halves. */
	fprintf(stderr, "vmm: %s%s\n", log_prefix[level], line);
}
