// SPDX-License-Identifier: GPL-2.0
/*
 * Control API request parameters: each reader answers the request with
 * API_E_INVALID_PARAMS and returns false when its parameter is wrong.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "vmm/api/api-internal.h"

bool param_error(struct rpc *r, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	client_reply_error(r->c, r->id, API_E_INVALID_PARAMS, NULL, "%s", msg);
	return false;
}

bool param_str(struct rpc *r, const char *key, bool required, const char **s,
	       size_t *len)
{
	json_t *v = json_object_get(r->params, key);

	*s = NULL;
	*len = 0;
	if (!v)
		return required ? param_error(r, "%s: missing", key) : true;
	if (!json_is_string(v))
		return param_error(r, "%s: expected a string", key);
	*s = json_string_value(v);
	*len = json_string_length(v);
	if (strlen(*s) != *len)
		return param_error(r, "%s: contains NUL", key);
	return true;
}

/* *out keeps its default when the key is absent. */
bool param_uint(struct rpc *r, const char *key, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(r->params, key);

	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return param_error(r, "%s: expected an integer from 0 to %llu",
				   key, (unsigned long long)max);
	*out = json_integer_value(v);
	return true;
}

bool param_bool(struct rpc *r, const char *key, bool *out)
{
	json_t *v = json_object_get(r->params, key);

	if (!v)
		return true;
	if (!json_is_boolean(v))
		return param_error(r, "%s: expected true or false", key);
	*out = json_is_true(v);
	return true;
}

/* Base64 bytes (malloc'ed, *out NULL when absent). */
bool param_b64(struct rpc *r, const char *key, uint8_t **out, size_t *len)
{
	const char *s;
	size_t n;
	ssize_t got;

	*out = NULL;
	*len = 0;
	if (!param_str(r, key, false, &s, &n))
		return false;
	if (!s)
		return true;
	*out = malloc(base64__decoded_max(n));
	if (!*out)
		return param_error(r, "%s: out of memory", key);
	got = base64__decode(s, n, *out);
	if (got < 0) {
		free(*out);
		*out = NULL;
		return param_error(r, "%s: not base64", key);
	}
	*len = got;
	return true;
}
