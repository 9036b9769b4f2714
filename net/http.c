// SPDX-License-Identifier: GPL-2.0
/*
 * The rules HTTP/1.1 and HTTP/2 interception share (http.h,
 * http-internal.h): a decision's header edits, which fields it may edit,
 * a refusal's reason made safe for the guest, and whether an authority
 * names the flow's trusted host and port.
 */
#include <errno.h>
#include <http_parser.h>
#include <string.h>

#include "net/http-internal.h"
#include "net/http.h"

#define HTTP_DEFAULT_PORT  80U
#define HTTPS_DEFAULT_PORT 443U
#define PORT_DIGITS_MAX	   5U
#define PORT_MAX	   65535U
#define ASCII_DEL	   0x7fU
#define LEAK_RUN	   8U /* bytes a reason may share with a set value */

/* ---- syntax ------------------------------------------------------- */

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static char ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

bool http__same_nocase(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (ascii_lower(a[i]) != ascii_lower(b[i]))
			return false;
	return true;
}

static bool is_name(const char *a, size_t alen, const char *lit)
{
	return http__same_nocase(a, alen, lit, strlen(lit));
}

/* RFC 9110 5.6.2: tchar. */
static bool is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c);
}

bool http__is_token(const char *s, size_t len)
{
	if (!len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_tchar((unsigned char)s[i]))
			return false;
	return true;
}

/* A field value: visible bytes, blanks and obs-text; no control bytes. */
bool http__is_value(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = s[i];

		if ((c < ' ' && c != '\t') || c == ASCII_DEL)
			return false;
	}
	return true;
}

/* Fields a decision may not edit: they frame or route the message. */
static bool is_framing_name(const char *s, size_t len)
{
	static const char *const names[] = {
		"host",	      "content-length", "transfer-encoding",
		"connection", "upgrade",	"te",
		"trailer",    "keep-alive",
	};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (is_name(s, len, names[i]))
			return true;
	return false;
}

bool http__editable_name(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	return http__is_token(name, len) && !is_framing_name(name, len);
}

bool http__echoes_request(const char *method)
{
	size_t len = method ? strlen(method) : 0;

	return is_name(method, len, "TRACE") || is_name(method, len, "TRACK");
}

/* Printable ASCII only, truncated: what may reach the guest as text. */
void http__text_copy(char *dst, size_t size, const char *src)
{
	size_t i;

	for (i = 0; src && src[i] && i + 1 < size; i++)
		dst[i] = src[i] >= ' ' && src[i] < (char)ASCII_DEL ? src[i] :
								     '?';
	dst[i] = '\0';
}

/* ---- edits ------------------------------------------------------- */

int http_edits__find(const struct http_edits *e, const char *name, size_t len)
{
	for (unsigned int i = 0; i < e->nr; i++)
		if (http__same_nocase(e->buf + e->e[i].name_off,
				      e->e[i].name_len, name, len))
			return i;
	return -1;
}

static int edit_add(struct http_edits *e, const char *name, const char *value,
		    bool remove)
{
	size_t nlen = name ? strlen(name) : 0;
	size_t vlen = value ? strlen(value) : 0;
	struct http_edit *ed;
	int i;

	if (!http__is_token(name, nlen) || is_framing_name(name, nlen) ||
	    !http__is_value(value, vlen))
		return -EINVAL;
	if (e->used + nlen + vlen > sizeof(e->buf))
		return -ENOSPC;
	i = http_edits__find(e, name, nlen);
	if (i < 0) {
		if (e->nr == HTTP_MAX_EDITS)
			return -ENOSPC;
		i = e->nr++;
	} else {
		/* A name edited again: the last edit stands. */
		explicit_bzero(e->buf + e->e[i].value_off, e->e[i].value_len);
	}
	ed = &e->e[i];
	ed->remove = remove;
	ed->written = false;
	ed->name_off = e->used;
	ed->name_len = nlen;
	memcpy(e->buf + e->used, name, nlen);
	e->used += nlen;
	ed->value_off = e->used;
	ed->value_len = vlen;
	memcpy(e->buf + e->used, value, vlen);
	e->used += vlen;
	return 0;
}

int http_edits__set(struct http_edits *e, const char *name, const char *value)
{
	if (!value)
		return -EINVAL;
	return edit_add(e, name, value, false);
}

int http_edits__remove(struct http_edits *e, const char *name)
{
	return edit_add(e, name, "", true);
}

int http_edits__refuse(struct http_edits *e, unsigned int status,
		       const char *reason)
{
	if (status < HTTP_STATUS_BAD_REQUEST || status > 599)
		status = HTTP_STATUS_FORBIDDEN;
	e->status = status;
	http__text_copy(e->reason, sizeof(e->reason),
			reason ? reason : "refused");
	return HTTP_REFUSE;
}

bool http_edits__sets(const struct http_edits *e)
{
	for (unsigned int i = 0; i < e->nr; i++)
		if (!e->e[i].remove)
			return true;
	return false;
}

void http_edits__wipe_values(struct http_edits *e)
{
	for (unsigned int i = 0; i < e->nr; i++)
		explicit_bzero(e->buf + e->e[i].value_off, e->e[i].value_len);
}

void http_edits__reset(struct http_edits *e)
{
	explicit_bzero(e->buf, e->used);
	e->nr = 0;
	e->used = 0;
	e->status = 0;
	e->reason[0] = '\0';
}

/*
 * The reason shares LEAK_RUN bytes in a row with a value the decision
 * set (all of a shorter one): it might carry a secret, or part of one
 * ("Bearer <token>" set, the token named), so it must not go out.
 */
bool http_edits__reason_leaks(const struct http_edits *e, const char *reason)
{
	size_t rlen = strlen(reason);

	for (unsigned int i = 0; i < e->nr; i++) {
		const struct http_edit *ed = &e->e[i];
		const char *v = e->buf + ed->value_off;
		size_t run = min_size(ed->value_len, LEAK_RUN);

		if (ed->remove || !run)
			continue;
		for (size_t at = 0; at + run <= rlen; at++)
			if (memmem(v, ed->value_len, reason + at, run))
				return true;
	}
	return false;
}

/* ---- authorities ------------------------------------------------- */

/* An authority's port: none (the default port), or 1-5 digits. */
bool http__port_is(uint16_t want, uint16_t dflt, const char *s, size_t len,
		   bool given)
{
	unsigned int port = 0;

	if (!given)
		return want == dflt;
	if (!len || len > PORT_DIGITS_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		port = port * 10 + (s[i] - '0');
	}
	return port <= PORT_MAX && port == want;
}

/* Host: uri-host [ ":" port ], uri-host a name or an [IPv6] literal. */
bool http__authority_matches(const char *hostname, uint16_t port, bool tls,
			     const char *v, size_t len)
{
	uint16_t dflt = tls ? HTTPS_DEFAULT_PORT : HTTP_DEFAULT_PORT;
	const char *name = v, *rest;
	size_t name_len;

	if (len && v[0] == '[') {
		const char *close = memchr(v, ']', len);

		if (!close)
			return false;
		name = v + 1;
		name_len = close - name;
		rest = close + 1;
	} else {
		const char *colon = memchr(v, ':', len);

		name_len = colon ? (size_t)(colon - v) : len;
		rest = v + name_len;
	}
	if (!http__same_nocase(name, name_len, hostname, strlen(hostname)))
		return false;
	if (rest == v + len)
		return http__port_is(port, dflt, NULL, 0, false);
	if (*rest != ':')
		return false;
	return http__port_is(port, dflt, rest + 1, v + len - rest - 1, true);
}
