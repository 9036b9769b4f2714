// SPDX-License-Identifier: GPL-2.0
/*
 * Decimal counts and byte sizes (parse.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/compiler.h"
#include "lib/parse.h"

int parse__uint(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno)
		return -ERANGE;
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static const struct {
	const char *suffix;
	unsigned int shift;
} size_suffixes[] = {
	{ "", 0 },   { "K", 10 },   { "KiB", 10 }, { "M", 20 },	  { "MiB", 20 },
	{ "G", 30 }, { "GiB", 30 }, { "T", 40 },   { "TiB", 40 },
};

int parse__size(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	size_t i;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	for (i = 0; i < ARRAY_SIZE(size_suffixes); i++)
		if (!strcmp(end, size_suffixes[i].suffix))
			break;
	if (i == ARRAY_SIZE(size_suffixes))
		return -EINVAL;
	if (errno || v > max >> size_suffixes[i].shift)
		return -ERANGE;
	*out = (uint64_t)v << size_suffixes[i].shift;
	return 0;
}
