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
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "net/hook-internal.h"
#include "net/policy.h"

/* "255.255.255.255:65535" and its NUL. */
#define HOOK_ADDR_STRLEN (INET_ADDRSTRLEN + sizeof(":65535") - 1)
/* The largest id a JSON reader holding numbers as doubles keeps exact. */
#define HOOK_ID_MAX ((1ULL << 53) - 1)
#define ASCII_FIRST ' '
#define ASCII_LAST  '~'
#define ASCII_DEL   0x7f
/* What one field costs in a question line at most: each byte escaped. */
#define FIELD_COST(nlen, vlen) (2 * ((nlen) + (vlen)) + 8)
/* UTF-8 (RFC 3629 3): U+0080 to U+00FF take two bytes, 110xxxxx 10xxxxxx. */
#define LATIN1_TWO_BYTES 0x80U
#define UTF8_LEAD2	 0xc0U
#define UTF8_CONT	 0x80U
#define UTF8_CONT_BITS	 6U
#define UTF8_CONT_MASK	 0x3fU
#define UTF8_LEAD_LATIN1 0xc3U /* the last lead byte of U+0080..U+00FF */

static void addr_port(const struct sockaddr_in *a, char out[HOOK_ADDR_STRLEN])
{
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, HOOK_ADDR_STRLEN, "%s:%u", ip, ntohs(a->sin_port));
}

/*
 * o (taken over) as one line into buf: no indent, ", " and ": " between
 * items, then '\n'. Its length, -ENOSPC, or -ENOMEM.
 */
static int dump_line(json_t *o, char *buf, size_t len)
{
	size_t n = json_dumpb(o, buf, len, 0);

	json_decref(o);
	if (!n)
		return -ENOMEM;
	if (n + 1 > len)
		return -ENOSPC;
	buf[n] = '\n';
	return (int)(n + 1);
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
	return dump_line(q, buf, len);
}

/*
 * n bytes of s as a JSON string, each byte the character of its code
 * (ISO 8859-1: a byte from 0x80 on becomes two bytes of UTF-8), so the
 * hook gets every byte back (Python: value.encode("latin-1")). NULL:
 * ENOMEM.
 */
static json_t *bytes_json(const char *s, size_t n)
{
	char *t = malloc(2 * n + 1);
	size_t k = 0;
	json_t *j;

	if (!t)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (c < LATIN1_TWO_BYTES) {
			t[k++] = c;
			continue;
		}
		t[k++] = UTF8_LEAD2 | c >> UTF8_CONT_BITS;
		t[k++] = UTF8_CONT | (c & UTF8_CONT_MASK);
	}
	j = json_stringn(t, k);
	explicit_bzero(t, k);
	free(t);
	return j;
}

static bool same_nocase(const char *a, size_t alen, const char *b)
{
	return alen == strlen(b) && !strncasecmp(a, b, alen);
}

/*
 * Whether a field's value stays out of the question: the guest's own
 * credentials (the hook decides on who asks what where, and never needs
 * them), and the fields the grant sets (replaced upstream anyway).
 */
static bool value_omitted(const struct hook_http_question *q,
			  const struct http_header *h)
{
	const struct net_http_decision *g = q->grant_fields;

	if (same_nocase(h->name, h->name_len, "authorization") ||
	    same_nocase(h->name, h->name_len, "proxy-authorization") ||
	    same_nocase(h->name, h->name_len, "cookie"))
		return true;
	for (unsigned int i = 0;
	     g && i < g->nr_headers && i < NET_HTTP_MAX_HEADERS; i++)
		if (g->headers[i].name < sizeof(g->buf) &&
		    same_nocase(h->name, h->name_len,
				g->buf + g->headers[i].name))
			return true;
	return false;
}

/* The fields as [name, value] pairs, and the omitted names, as fit. */
static int fields_json(const struct hook_http_question *q, size_t budget,
		       json_t *fields, json_t *omitted, bool *truncated)
{
	size_t used = 0;

	*truncated = false;
	for (unsigned int i = 0; i < q->nr_fields; i++) {
		const struct http_header *h = &q->fields[i];
		bool omit = value_omitted(q, h);
		size_t cost = FIELD_COST(h->name_len, omit ? 0 : h->value_len);
		json_t *v;

		if (used + cost > budget) {
			*truncated = true;
			return 0;
		}
		used += cost;
		if (omit)
			v = bytes_json(h->name, h->name_len);
		else
			v = json_pack("[o, o]",
				      bytes_json(h->name, h->name_len),
				      bytes_json(h->value, h->value_len));
		if (json_array_append_new(omit ? omitted : fields, v))
			return -ENOMEM;
	}
	return 0;
}

/* scheme://host[:port]path, byte for byte (bytes_json). */
static json_t *url_json(const struct hook_http_question *q)
{
	bool dflt = q->port == (q->tls ? 443 : 80);
	size_t n = q->path_len + strlen(q->host) + sizeof("https://:65535");
	char *u = malloc(n);
	json_t *j;
	int at;

	if (!u)
		return NULL;
	at = snprintf(u, n, "%s://%s", q->tls ? "https" : "http", q->host);
	if (!dflt)
		at += snprintf(u + at, n - at, ":%u", q->port);
	memcpy(u + at, q->path, q->path_len);
	j = bytes_json(u, at + q->path_len);
	free(u);
	return j;
}

/* {"ip": "A.B.C.D", "port": N}; NULL: ENOMEM. */
static json_t *endpoint_json(const struct sockaddr_in *a)
{
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	return json_pack("{s:s, s:i}", "ip", ip, "port", ntohs(a->sin_port));
}

/*
 * What the seed's SandboxHttpRequest has besides the request: where
 * ("destination": the guest's address and port, the original
 * destination's, the trusted hostname), its TLS ("tls": the server name
 * and the protocol the guest chose by ALPN; null: clear text), and
 * which grant: the hook's of the flow ("flow": its question's id) or
 * the policy's ("grant": its index). 0 or -ENOMEM.
 */
static int http_context(json_t *o, const struct net_flow *f,
			const struct hook_http_question *q)
{
	json_t *tls = json_null(), *dst;
	int ret = 0;

	if (q->tls)
		tls = json_pack("{s:o, s:o}", "sni",
				bytes_json(q->sni ? q->sni : "",
					   q->sni ? strlen(q->sni) : 0),
				"alpn",
				q->alpn ? json_string(q->alpn) : json_null());
	dst = json_pack("{s:o, s:o, s:o}", "src", endpoint_json(&f->src), "dst",
			endpoint_json(&f->dst), "hostname",
			bytes_json(q->host, strlen(q->host)));
	if (q->flow)
		ret |= json_object_set_new(o, "flow",
					   json_integer((json_int_t)q->flow));
	else
		ret |= json_object_set_new(o, "grant",
					   json_integer((json_int_t)q->grant));
	ret |= json_object_set_new(o, "tls", tls);
	ret |= json_object_set_new(o, "destination", dst);
	return ret ? -ENOMEM : 0;
}

int hook_msg__http_question(char *buf, size_t len, uint64_t id,
			    const struct net_flow *f,
			    const struct hook_http_question *q)
{
	char src[HOOK_ADDR_STRLEN], dst[HOOK_ADDR_STRLEN];
	/* The host in "host", "url", "destination" and "tls" (its SNI). */
	size_t fixed =
		HOOK_HTTP_FIXED +
		2 * (q->path_len + 4 * strlen(q->host) + strlen(q->method));
	json_t *o, *fields = json_array(), *omitted = json_array();
	bool truncated;
	int ret;

	if (!fields || !omitted) {
		ret = -ENOMEM;
		goto out_free;
	}
	ret = fixed < len ?
		      fields_json(q, len - fixed, fields, omitted, &truncated) :
		      -ENOSPC;
	if (ret)
		goto out_free;
	addr_port(&f->src, src);
	addr_port(&f->dst, dst);
	/* "o" takes each over, on failure too. */
	o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:o, "
		      "s:o, s:b}",
		      "id", (json_int_t)id, "type", "http", "proto", "tcp",
		      "src", src, "dst", dst, "host",
		      bytes_json(q->host, strlen(q->host)), "method",
		      bytes_json(q->method, strlen(q->method)), "url",
		      url_json(q), "protocol", q->protocol, "headers", fields,
		      "omitted", omitted, "truncated", truncated);
	if (!o)
		return -ENOMEM;
	if (http_context(o, f, q)) {
		json_decref(o);
		return -ENOMEM;
	}
	return dump_line(o, buf, len);

out_free:
	json_decref(fields);
	json_decref(omitted);
	return ret;
}

/* s as printable ASCII into out, cut short. */
static void printable(const char *s, char out[HOOK_DETAIL_MAX])
{
	size_t i;

	for (i = 0; s[i] && i + 1 < HOOK_DETAIL_MAX; i++)
		out[i] = s[i] >= ASCII_FIRST && s[i] <= ASCII_LAST ? s[i] : '?';
	out[i] = '\0';
}

/* n bytes of a value a field may carry: no control byte but tab. */
static bool value_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] < ' ' && s[i] != '\t') ||
		    s[i] == ASCII_DEL)
			return false;
	return true;
}

/*
 * A JSON string's UTF-8 (n bytes, valid: jansson checked it) back to
 * the bytes bytes_json() makes of a field, into out (n bytes at most):
 * their count, or -1 when a character is past U+00FF.
 */
static ssize_t latin1_bytes(const char *s, size_t n, char *out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (c < LATIN1_TWO_BYTES) {
			out[k++] = c;
			continue;
		}
		if (c > UTF8_LEAD_LATIN1 || i + 1 == n)
			return -1;
		out[k++] = (c & ~UTF8_LEAD2) << UTF8_CONT_BITS |
			   (s[++i] & UTF8_CONT_MASK);
	}
	return k;
}

/* Which rule an answer's fields broke: the field's name, or a limit. */
struct edit_error {
	const char *what; /* the field's name; NULL: a limit */
	unsigned int limit;
	const char *unit; /* the limit's: "fields", "bytes" */
};

/* One field of a grant-http into d: NULL, or the rule it broke (*e). */
static const char *edit_add(struct net_http_decision *d, size_t *used,
			    const char *name, json_t *jv, struct edit_error *e)
{
	const char *value = jv ? json_string_value(jv) : "";
	size_t nlen = strlen(name), vlen = jv ? json_string_length(jv) : 0;
	unsigned int k = d->nr_headers;
	ssize_t n;

	e->what = name;
	if (!http__editable_name(name))
		return "field not editable";
	for (unsigned int i = 0; i < k; i++)
		if (!strcasecmp(d->buf + d->headers[i].name, name))
			return "field named twice";
	e->what = NULL;
	e->unit = "fields";
	e->limit = NET_HTTP_MAX_HEADERS;
	if (k == NET_HTTP_MAX_HEADERS)
		return "too many fields";
	/* Its bytes are as many as its UTF-8's at most. */
	e->unit = "bytes";
	e->limit = NET_HTTP_HEADERS_MAX;
	if (*used + nlen + vlen + 2 > sizeof(d->buf))
		return "fields too large";
	d->headers[k].name = *used;
	for (size_t i = 0; i <= nlen; i++)
		d->buf[*used + i] = tolower((unsigned char)name[i]);
	*used += nlen + 1;
	n = latin1_bytes(value, vlen, d->buf + *used);
	e->what = name;
	if (n < 0)
		return "field value past U+00FF";
	if (!value_valid(d->buf + *used, n))
		return "field value with a control byte";
	d->headers[k].value = *used;
	d->buf[*used + n] = '\0';
	*used += n + 1;
	d->headers[k].hook = false;
	d->headers[k].remove = false;
	d->nr_headers++;
	return NULL;
}

/* "set" and "remove" into d: NULL, or the rule they broke (edit_add). */
static const char *read_edits(json_t *o, struct net_http_decision *d,
			      struct edit_error *e)
{
	json_t *set = json_object_get(o, "set");
	json_t *remove = json_object_get(o, "remove");
	json_t *clear = json_object_get(o, "clearText");
	const char *why = NULL, *key;
	size_t used = 0, i;
	json_t *v;

	*e = (struct edit_error){ 0 };
	d->verdict = NET_VERDICT_ALLOW;
	d->nr_headers = 0;
	/* "set" on a clear-text flow needs it (intercept-request.c). */
	d->clear_text = json_is_true(clear);
	if ((set && !json_is_object(set)) || (remove && !json_is_array(remove)))
		return "set not an object or remove not an array";
	if (clear && !json_is_boolean(clear))
		return "clearText not true or false";
	json_object_foreach(set, key, v)
	{
		if (!json_is_string(v)) {
			*e = (struct edit_error){ .what = key };
			return "set value not a string";
		}
		why = edit_add(d, &used, key, v, e);
		if (why)
			return why;
	}
	json_array_foreach(remove, i, v)
	{
		if (!json_is_string(v)) {
			*e = (struct edit_error){ 0 };
			return "remove entry not a string";
		}
		why = edit_add(d, &used, json_string_value(v), NULL, e);
		if (why)
			return why;
		d->headers[d->nr_headers - 1].remove = true;
	}
	return NULL;
}

/*
 * A grant-http's "tls" and "ask", as a flow's answer reads them
 * (hook_answer); a request's ignores them.
 */
static void read_flow_grant(json_t *o, struct hook_answer *a)
{
	json_t *tls = json_object_get(o, "tls");
	json_t *ask = json_object_get(o, "ask");
	json_t *host = json_object_get(o, "host");
	const char *t = json_string_value(tls), *k = json_string_value(ask);
	bool wildcard;

	a->tls = HOOK_TLS_AUTO;
	a->each_request = true;
	if (json_is_boolean(tls))
		a->tls = json_is_true(tls) ? HOOK_TLS_YES : HOOK_TLS_NO;
	else if (tls && !(t && !strcmp(t, "auto")))
		a->flow_invalid = "tls not true, false or \"auto\"";
	if (k && !strcmp(k, "connection"))
		a->each_request = false;
	else if (ask && !(k && !strcmp(k, "request")))
		a->flow_invalid = "ask not \"request\" or \"connection\"";
	if (host && (!json_is_string(host) ||
		     net_hostname__normalize(json_string_value(host), a->host,
					     false, &wildcard)))
		a->flow_invalid = "host not a hostname";
	if (json_object_get(o, "set") || json_object_get(o, "remove"))
		a->flow_invalid = "set or remove in a flow's grant-http";
}

/* An integer from 1 to HOOK_ID_MAX into *out; else false. */
static bool read_id(json_t *j, uint64_t *out)
{
	if (!json_is_integer(j) || json_integer_value(j) < 1 ||
	    (unsigned long long)json_integer_value(j) > HOOK_ID_MAX)
		return false;
	*out = json_integer_value(j);
	return true;
}

static int read_answer(json_t *o, struct hook_answer *a,
		       struct net_http_decision *edits)
{
	json_t *flow = json_object_get(o, "flow");
	json_t *verdict = json_object_get(o, "verdict");
	json_t *reason = json_object_get(o, "reason");
	char text[HOOK_DETAIL_MAX];
	struct edit_error e;
	const char *v, *why;

	if (!read_id(json_object_get(o, "id"), &a->id) ||
	    (flow && !read_id(flow, &a->flow)))
		return -EBADMSG;
	if (!json_is_string(verdict) || (reason && !json_is_string(reason)))
		return -EBADMSG;
	v = json_string_value(verdict);
	if (!strcmp(v, "grant"))
		a->verdict = HOOK_VERDICT_GRANT;
	else if (!strcmp(v, "deny"))
		a->verdict = HOOK_VERDICT_DENY;
	else if (!strcmp(v, "grant-http"))
		a->verdict = HOOK_VERDICT_GRANT_HTTP;
	else
		a->verdict = HOOK_VERDICT_UNKNOWN;
	printable(v, a->verdict_text);
	printable(reason ? json_string_value(reason) : "", a->reason);
	if (a->verdict != HOOK_VERDICT_GRANT_HTTP)
		return 0;
	read_flow_grant(o, a);
	why = edits ? read_edits(o, edits, &e) : NULL;
	if (!why)
		return 0;
	explicit_bzero(edits, sizeof(*edits));
	a->verdict = HOOK_VERDICT_INVALID;
	if (e.what)
		snprintf(text, sizeof(text), "%s: %s", why, e.what);
	else if (e.unit)
		snprintf(text, sizeof(text), "%s: at most %u %s", why, e.limit,
			 e.unit);
	else
		snprintf(text, sizeof(text), "%s", why);
	printable(text, a->reason);
	return 0;
}

int hook_msg__answer(const char *line, size_t n, struct hook_answer *a,
		     struct net_http_decision *edits)
{
	json_error_t err;
	json_t *o;
	int ret;

	*a = (struct hook_answer){ 0 };
	/* Neither NULs in strings nor anything after the object. */
	o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &err);
	if (!o)
		return -EBADMSG;
	ret = json_is_object(o) ? read_answer(o, a, edits) : -EBADMSG;
	json_decref(o);
	return ret;
}
