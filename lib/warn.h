/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_WARN_H
#define KILN_LIB_WARN_H

#include <stdarg.h>
#include <stdbool.h>

/*
 * Say it once: a guest (or a host peer) that breaks a rule in a loop must
 * not flood the log. The first call with *warned clear logs one warning,
 * "<who>: <message><suffix>", and sets it; later calls are dropped. The
 * owner keeps the flag where it makes "once" mean what it should (per
 * device, per queue, ...). Not atomic: callers serialise on the flag.
 */
void warn__once(bool *warned, const char *who, const char *suffix,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void warn__vonce(bool *warned, const char *who, const char *suffix,
		 const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif
