// SPDX-License-Identifier: GPL-2.0
/*
 * The hook's JSON lines (hook-internal.h): a question written from a
 * flow, an answer read and checked. The answer is the orchestrator's
 * bytes: only a JSON object with the keys we know, of the types we
 * expect, is an answer; what its texts say reaches the log only as
 * printable ASCII.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "vmm/hook-internal.h"

/* "255.255.255.255:65535" and its NUL. */
#define HOOK_ADDR_STRLEN (INET_ADDRSTRLEN + sizeof(":65535") - 1)
/* The largest id a JSON reader holding numbers as doubles keeps exact. */
#define HOOK_ID_MAX ((1ULL << 53) - 1)
#define ASCII_FIRST ' '
#define ASCII_LAST  '~'

static void addr_port(const struct sockaddr_in *a, char out[HOOK_ADDR_STRLEN])
{
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, HOOK_ADDR_STRLEN, "%s:%u", ip, ntohs(a->sin_port));
}

static json_t *hostnames_json(const struct net_ask *a)
{
	json_t *arr = json_array();
	unsigned int n = a->nr_hostnames;

	if (n > NET_ASK_MAX_HOSTNAMES)
		n = NET_ASK_MAX_HOSTNAMES;
	for (unsigned int i = 0; arr && i < n; i++) {
		if (json_array_append_new(arr, json_string(a->hostnames[i]))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

int hook_msg__question(char *buf, size_t len, uint64_t id,
		       const struct net_flow *f, const struct net_ask *a)
{
	char src[HOOK_ADDR_STRLEN], dst[HOOK_ADDR_STRLEN];
	json_t *q, *names;
	size_t n;

	addr_port(&f->src, src);
	addr_port(&f->dst, dst);
	names = hostnames_json(a);
	if (!names)
		return -ENOMEM;
	/* "o" takes names over, on failure too. */
	q = json_pack("{s:I, s:s, s:s, s:s, s:s, s:o}", "id", (json_int_t)id,
		      "proto", f->proto == IPPROTO_TCP ? "tcp" : "udp", "src",
		      src, "dst", dst, "class", a->class_name, "hostnames",
		      names);
	if (!q)
		return -ENOMEM;
	/* One line: no indent, ", " and ": " between items. */
	n = json_dumpb(q, buf, len, 0);
	json_decref(q);
	if (!n)
		return -ENOMEM;
	if (n + 1 > len)
		return -ENOSPC;
	buf[n] = '\n';
	return (int)(n + 1);
}

/* s as printable ASCII into out, cut short. */
static void printable(const char *s, char out[HOOK_DETAIL_MAX])
{
	size_t i;

	for (i = 0; s[i] && i + 1 < HOOK_DETAIL_MAX; i++)
		out[i] = s[i] >= ASCII_FIRST && s[i] <= ASCII_LAST ? s[i] : '?';
	out[i] = '\0';
}

static int read_answer(json_t *o, struct hook_answer *a)
{
	json_t *id = json_object_get(o, "id");
	json_t *verdict = json_object_get(o, "verdict");
	json_t *reason = json_object_get(o, "reason");
	const char *v;

	if (!json_is_integer(id) || json_integer_value(id) < 1 ||
	    (unsigned long long)json_integer_value(id) > HOOK_ID_MAX)
		return -EBADMSG;
	if (!json_is_string(verdict) || (reason && !json_is_string(reason)))
		return -EBADMSG;
	a->id = json_integer_value(id);
	v = json_string_value(verdict);
	if (!strcmp(v, "grant"))
		a->verdict = HOOK_VERDICT_GRANT;
	else if (!strcmp(v, "deny"))
		a->verdict = HOOK_VERDICT_DENY;
	else
		a->verdict = HOOK_VERDICT_UNKNOWN;
	printable(v, a->verdict_text);
	printable(reason ? json_string_value(reason) : "", a->reason);
	return 0;
}

int hook_msg__answer(const char *line, size_t n, struct hook_answer *a)
{
	json_error_t err;
	json_t *o;
	int ret;

	*a = (struct hook_answer){ 0 };
	/* Neither NULs in strings nor anything after the object. */
	o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &err);
	if (!o)
		return -EBADMSG;
	ret = json_is_object(o) ? read_answer(o, a) : -EBADMSG;
	json_decref(o);
	return ret;
}
