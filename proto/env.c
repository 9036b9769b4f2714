// SPDX-License-Identifier: GPL-2.0
/* PROC_START's environment entries (see env.h). */
#include <string.h>

#include "proto/env.h"

bool kiln_env__name_ok(const char *name, size_t len)
{
	return len && !memchr(name, '=', len) && !memchr(name, '\0', len);
}

size_t kiln_env__name_len(const char *entry, size_t len)
{
	const char *eq = memchr(entry, '=', len);

	return eq ? (size_t)(eq - entry) : len;
}

const char *kiln_env__entry_error(const char *entry, size_t len)
{
	size_t n = kiln_env__name_len(entry, len);

	if (n == len)
		return "no '=' (expected NAME=value)";
	if (!n)
		return "an empty name";
	if (memchr(entry, '\0', len))
		return "a NUL byte";
	return NULL;
}

void kiln_env__show(const char *s, size_t len, char *out, size_t max)
{
	size_t i;

	if (!max)
		return;
	if (len > max - 1)
		len = max - 1;
	for (i = 0; i < len; i++) {
		unsigned char c = s[i];

		out[i] = c < 0x20 || c == 0x7f ? '?' : c;
	}
	out[len] = '\0';
}
