// SPDX-License-Identifier: GPL-2.0
/* Base64 for the control API and vmmctl (see base64.h). */
#include <errno.h>
#include <stdbool.h>

#include "lib/base64.h"

static const char alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void base64__encode(const void *in, size_t n, char *out)
{
	const uint8_t *p = in;
	size_t i;

	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = p[i] << 16 | p[i + 1] << 8 | p[i + 2];

		*out++ = alphabet[v >> 18];
		*out++ = alphabet[(v >> 12) & 63];
		*out++ = alphabet[(v >> 6) & 63];
		*out++ = alphabet[v & 63];
	}
	if (i < n) {
		uint32_t v = p[i] << 16 | (i + 1 < n ? p[i + 1] << 8 : 0);

		*out++ = alphabet[v >> 18];
		*out++ = alphabet[(v >> 12) & 63];
		*out++ = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
		*out++ = '=';
	}
	*out = '\0';
}

static int value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

ssize_t base64__decode(const char *in, size_t n, uint8_t *out)
{
	size_t i, len = 0;

	if (n % 4)
		return -EINVAL;
	for (i = 0; i < n; i += 4) {
		int a = value(in[i]), b = value(in[i + 1]);
		int c = value(in[i + 2]), d = value(in[i + 3]);
		bool last = i + 4 == n;

		if (a < 0 || b < 0)
			return -EINVAL;
		out[len++] = a << 2 | b >> 4;
		if (last && in[i + 2] == '=' && in[i + 3] == '=') {
			if (b & 15)
				return -EINVAL; /* non-canonical */
			break;
		}
		if (c < 0)
			return -EINVAL;
		out[len++] = (b & 15) << 4 | c >> 2;
		if (last && in[i + 3] == '=') {
			if (c & 3)
				return -EINVAL;
			break;
		}
		if (d < 0)
			return -EINVAL;
		out[len++] = (c & 3) << 6 | d;
	}
	return len;
}
