// SPDX-License-Identifier: GPL-2.0
/*
 * Control API strings from the guest: its bytes as JSON strings (invalid
 * UTF-8 replaced) and, where the exact bytes matter, also in base64.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "vmm/api/api-internal.h"

/* Length of the valid UTF-8 sequence at p (RFC 3629), 0 if invalid. */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, cp = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, cp = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool utf8_valid(const uint8_t *p, size_t n)
{
	size_t i, l;

	for (i = 0; i < n; i += l) {
		l = utf8_seq(p + i, n - i);
		if (!l || !p[i])
			return false;
	}
	return true;
}

/* Bytes as a JSON string, each invalid byte (and NUL) as U+FFFD. */
json_t *api_json_lossy(const uint8_t *p, size_t n)
{
	char *s = malloc(n * 3 + 1);
	size_t i, l, o = 0;
	json_t *j;

	if (!s)
		return NULL;
	for (i = 0; i < n; i += l) {
		l = utf8_seq(p + i, n - i);
		if (l && p[i]) {
			memcpy(s + o, p + i, l);
			o += l;
		} else {
			memcpy(s + o, "\xef\xbf\xbd", 3);
			o += 3;
			l = 1;
		}
	}
	j = json_stringn_nocheck(s, o);
	free(s);
	return j;
}

/* A C string, as lossy as any guest bytes. */
json_t *api_json_str(const char *s)
{
	return api_json_lossy((const uint8_t *)s, strlen(s));
}

json_t *api_json_base64(const void *p, size_t n)
{
	char *s = malloc(base64__encoded_len(n) + 1);
	json_t *j;

	if (!s)
		return NULL;
	base64__encode(p, n, s);
	j = json_stringn_nocheck(s, base64__encoded_len(n));
	free(s);
	return j;
}

/*
 * A name or target from the guest: obj.key as UTF-8, and when the bytes
 * are not valid UTF-8 also obj.keyBytes, the exact bytes in base64.
 */
void api_json_guest_bytes(json_t *obj, const char *key, const uint8_t *p,
			  size_t n)
{
	char bkey[64];

	json_object_set_new(obj, key, api_json_lossy(p, n));
	if (utf8_valid(p, n))
		return;
	snprintf(bkey, sizeof(bkey), "%sBytes", key);
	json_object_set_new(obj, bkey, api_json_base64(p, n));
}

/*
 * What j weighs in an answer: its strings, keys and numbers as they
 * will be sent, plus a little per value for what jansson keeps. Entries
 * are flat (an object of strings and numbers), so no deep recursion.
 */
size_t api_json_weight(const json_t *j)
{
	const char *key;
	size_t w = 16, i;
	json_t *v;

	switch (json_typeof(j)) {
	case JSON_STRING:
		return w + json_string_length(j);
	case JSON_OBJECT:
		json_object_foreach((json_t *)j, key, v)
		{
			w += strlen(key) + api_json_weight(v);
		}
		return w;
	case JSON_ARRAY:
		json_array_foreach(j, i, v)
		{
			w += api_json_weight(v);
		}
		return w;
	default:
		return w + 8;
	}
}
