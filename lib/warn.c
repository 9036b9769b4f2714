// SPDX-License-Identifier: GPL-2.0
/* Warn once (see warn.h). */
#include <stdio.h>

#include "lib/log.h"
#include "lib/warn.h"

void warn__vonce(bool *warned, const char *who, const char *suffix,
		 const char *fmt, va_list ap)
{
	char why[256];

	if (*warned)
		return;
	*warned = true;
	vsnprintf(why, sizeof(why), fmt, ap);
	pr_warn("%s: %s%s", who, why, suffix);
}

void warn__once(bool *warned, const char *who, const char *suffix,
		const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	warn__vonce(warned, who, suffix, fmt, ap);
	va_end(ap);
}
