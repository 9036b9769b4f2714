// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP/1.1 interception of one guest connection (http1.h).
 *
 * Debian's http_parser is built without HTTP_PARSER_STRICT: it takes any
 * two bytes after a chunk's data as its CRLF, "2 " as a chunk size, a
 * space before a field's colon. So nothing the guest framed goes upstream
 * as it came: the head is written anew from what the parser understood,
 * and so is a chunked body's framing (size lines, CRLFs, trailers) around
 * its data bytes, which pass as they are. Upstream then frames the
 * stream exactly as we did, whatever the guest meant: no smuggling
 * through a difference of opinion.
 *
 * The parser is paused in on_headers_complete (the head is decided
 * between two feeds of it) and in on_message_complete (the next head
 * starts fresh). Pieces of the target, of field names and of values
 * arrive in as many callbacks as the guest split them; they are copied
 * into one arena, and a piece of a value that does not start where the
 * last one ended is a folded line (obs-fold), refused.
 */
#include <errno.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/bytequeue.h"
#include "net/http-internal.h"
#include "net/http1.h"

#define HTTP_DEFAULT_PORT  80U
#define HTTPS_DEFAULT_PORT 443U
#define VERSION_LEN	   8U /* "HTTP/1.1" */
#define CRLF		   "\r\n"
#define CRLF_LEN	   2U
#define FIELD_SEP	   ": "
#define FIELD_SEP_LEN	   2U
#define CHUNK_LINE_MAX	   (16U + CRLF_LEN) /* a 64-bit size in hex */
#define ASCII_DEL	   0x7fU
#define PROXY_PREFIX	   "proxy-"

enum piece_kind { PIECE_NONE, PIECE_URL, PIECE_FIELD, PIECE_VALUE };

enum req_state {
	REQ_HEAD,    /* reading a request head */
	REQ_PENDING, /* a complete head waits for its decision */
	REQ_BODY,    /* a forwarded request's body (or just its end) */
	REQ_OPAQUE,  /* after an allowed upgrade: bytes pass as they are */
	REQ_CLOSED,  /* after a request that ended the connection */
	REQ_DEAD,    /* refused, or out of memory: feed fails */
};

/* Where a string sits in the arena. */
struct span {
	uint32_t off, len;
};

struct field {
	struct span name, value;
};

struct http1_req {
	char hostname[HTTP_HOSTNAME_MAX + 1];
	size_t hostname_len;
	uint16_t port;
	bool tls;
	int (*on_request)(void *opaque, const struct http_request *req,
			  struct http_edits *edits);
	void *opaque;

	http_parser parser;
	enum req_state state;
	ssize_t dead_ret; /* what feed returns once dead */

	/* The head being read, or a chunked body's trailers. */
	struct bytequeue arena; /* target, names and values */
	struct span url;
	struct field fields[HTTP1_MAX_HEADERS];
	unsigned int nr_fields;
	size_t head_bytes;     /* taken of this head */
	enum piece_kind kind;  /* the last piece's */
	const char *piece_end; /* where it ended, in this input; or NULL */
	bool piece_at_end;     /* it ended the last input */

	/* The request being forwarded. */
	bool chunked;
	bool upgrading; /* an allowed upgrade: opaque after it */
	bool last;	/* the connection ends with it */

	struct bytequeue out;
	struct http_edits edits;
	struct http1_refusal refusal;

	/* Forwarded heads; answered by the tracker (http1_resp). */
	uint64_t forwarded, answered;
	bool tracked;
	bool was_head[HTTP1_MAX_PIPELINE]; /* by forwarded index, a ring */
};

struct http1_resp {
	struct http1_req *req; /* borrowed */
	http_parser parser;
	unsigned int status;
	bool in_message;
	bool opaque; /* after a 101 */
	bool dead;
};

/* ---- small helpers ------------------------------------------------ */

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static bool is_name(const char *a, size_t alen, const char *lit)
{
	return http__same_nocase(a, alen, lit, strlen(lit));
}

static bool is_proxy_name(const char *s, size_t len)
{
	size_t plen = strlen(PROXY_PREFIX);

	return len >= plen && http__same_nocase(s, plen, PROXY_PREFIX, plen);
}

/* ---- refusals ----------------------------------------------------- */

/* Kills the transformer; the first refusal is the one reported. */
static ssize_t refuse(struct http1_req *h, unsigned int status,
		      const char *reason)
{
	if (h->state == REQ_DEAD)
		return h->dead_ret;
	h->refusal.head_sent = h->state == REQ_BODY;
	h->refusal.request = h->forwarded - h->refusal.head_sent;
	h->refusal.status = status;
	http__text_copy(h->refusal.reason, sizeof(h->refusal.reason), reason);
	h->state = REQ_DEAD;
	h->dead_ret = -EPROTO;
	return h->dead_ret;
}

static ssize_t fail_nomem(struct http1_req *h)
{
	refuse(h, HTTP_STATUS_INTERNAL_SERVER_ERROR, "out of memory");
	h->dead_ret = -ENOMEM;
	return h->dead_ret;
}

/* A parser error the callbacks did not refuse already. */
static ssize_t refuse_parse(struct http1_req *h, enum http_errno e)
{
	switch (e) {
	case HPE_HEADER_OVERFLOW:
		return refuse(h, HTTP_STATUS_REQUEST_HEADER_FIELDS_TOO_LARGE,
			      "request head too large");
	case HPE_UNEXPECTED_CONTENT_LENGTH:
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "conflicting content-length");
	case HPE_INVALID_TRANSFER_ENCODING:
		return refuse(h, HTTP_STATUS_NOT_IMPLEMENTED,
			      "transfer-encoding not supported");
	default:
		return refuse(h, HTTP_STATUS_BAD_REQUEST, "malformed request");
	}
}

/* ---- output ------------------------------------------------------- */

static int out_put(struct http1_req *h, const void *p, size_t len)
{
	if (bytequeue__append(&h->out, p, len))
		return fail_nomem(h);
	return 0;
}

static size_t out_room(const struct http1_req *h)
{
	return h->out.len < HTTP1_OUTPUT_MAX ? HTTP1_OUTPUT_MAX - h->out.len :
					       0;
}

/* ---- the arena of pieces ------------------------------------------ */

static const char *arena_at(const struct http1_req *h, struct span s)
{
	return (const char *)bytequeue__peek(&h->arena) + s.off;
}

static void head_reset(struct http1_req *h)
{
	bytequeue__consume(&h->arena, h->arena.len);
	memset(&h->url, 0, sizeof(h->url));
	h->nr_fields = 0;
	h->head_bytes = 0;
	h->kind = PIECE_NONE;
	h->piece_end = NULL;
	h->piece_at_end = false;
}

/* The request line as forwarded: method SP target SP version CRLF. */
static size_t request_line_len(const http_parser *p, size_t target_len)
{
	return strlen(http_method_str(p->method)) + 1 + target_len + 1 +
	       VERSION_LEN + CRLF_LEN;
}

/*
 * A piece of the target, a field name or a value. A piece of the kind
 * before it continues that string only where it ended: anything else
 * is a folded line (or a parser we do not understand), refused.
 */
static int piece(http_parser *p, enum piece_kind kind, const char *at,
		 size_t len)
{
	struct http1_req *h = p->data;
	bool trailer = h->state == REQ_BODY;
	struct span *s;

	if (!len && kind == h->kind)
		return 0;
	if (h->arena.len + len > HTTP1_HEAD_MAX) {
		refuse(h, HTTP_STATUS_REQUEST_HEADER_FIELDS_TOO_LARGE,
		       trailer ? "trailers too large" :
				 "request head too large");
		return 1;
	}
	if (kind == h->kind && at != h->piece_end) {
		refuse(h, HTTP_STATUS_BAD_REQUEST,
		       kind == PIECE_VALUE ? "folded header line" :
					     "malformed request");
		return 1;
	}
	if (kind == PIECE_URL) {
		s = &h->url;
	} else if (kind == PIECE_FIELD) {
		if (h->kind != PIECE_FIELD) {
			if (h->nr_fields == HTTP1_MAX_HEADERS) {
				refuse(h,
				       HTTP_STATUS_REQUEST_HEADER_FIELDS_TOO_LARGE,
				       trailer ? "too many trailer fields" :
						 "too many header fields");
				return 1;
			}
			memset(&h->fields[h->nr_fields++], 0,
			       sizeof(h->fields[0]));
		}
		s = &h->fields[h->nr_fields - 1].name;
	} else {
		if (!h->nr_fields) {
			refuse(h, HTTP_STATUS_BAD_REQUEST, "malformed request");
			return 1;
		}
		s = &h->fields[h->nr_fields - 1].value;
	}
	if (kind != h->kind)
		s->off = h->arena.len;
	if (bytequeue__append(&h->arena, at, len)) {
		fail_nomem(h);
		return 1;
	}
	s->len += len;
	h->kind = kind;
	h->piece_end = at + len;
	if (kind == PIECE_URL &&
	    request_line_len(p, s->len) > HTTP1_REQUEST_LINE_MAX) {
		refuse(h, HTTP_STATUS_URI_TOO_LONG, "request line too long");
		return 1;
	}
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	return piece(p, PIECE_URL, at, len);
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	return piece(p, PIECE_FIELD, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	return piece(p, PIECE_VALUE, at, len);
}

/* Runs the parser on in, keeping track of where pieces may continue. */
static size_t parse(struct http1_req *h, const http_parser_settings *s,
		    const char *in, size_t len)
{
	size_t got;

	h->piece_end = h->piece_at_end ? in : NULL;
	got = http_parser_execute(&h->parser, s, in, len);
	h->piece_at_end = got == len && h->piece_end == in + len;
	return got;
}

/* ---- the body ----------------------------------------------------- */

static int on_headers_complete(http_parser *p)
{
	/* Decided between two feeds: see head_feed(). */
	http_parser_pause(p, 1);
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	return out_put(p->data, at, len) ? 1 : 0;
}

static int on_chunk_header(http_parser *p)
{
	char line[CHUNK_LINE_MAX + 1];
	int n = snprintf(line, sizeof(line), "%llx" CRLF,
			 (unsigned long long)p->content_length);

	return out_put(p->data, line, n) ? 1 : 0;
}

/* After each chunk's data; after the last (empty) one, its trailers. */
static int on_chunk_complete(http_parser *p)
{
	if (p->flags & F_TRAILING)
		return 0; /* on_message_complete ends the body */
	return out_put(p->data, CRLF, CRLF_LEN) ? 1 : 0;
}

/* The trailers, written anew like a head; then the body's last CRLF. */
static int trailers_write(struct http1_req *h)
{
	for (unsigned int i = 0; i < h->nr_fields; i++) {
		const struct field *f = &h->fields[i];
		const char *name = arena_at(h, f->name);
		const char *value = arena_at(h, f->value);
		size_t vlen = f->value.len;

		while (vlen && (*value == ' ' || *value == '\t'))
			value++, vlen--;
		while (vlen &&
		       (value[vlen - 1] == ' ' || value[vlen - 1] == '\t'))
			vlen--;
		if (!http__is_token(name, f->name.len) ||
		    !http__is_value(value, vlen))
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "malformed trailer");
		/* The decision's fields are the head's alone. */
		if (is_proxy_name(name, f->name.len) ||
		    http_edits__find(&h->edits, name, f->name.len) >= 0)
			continue;
		if (out_put(h, name, f->name.len) ||
		    out_put(h, FIELD_SEP, FIELD_SEP_LEN) ||
		    out_put(h, value, vlen) || out_put(h, CRLF, CRLF_LEN))
			return h->dead_ret;
	}
	return out_put(h, CRLF, CRLF_LEN);
}

static int on_message_complete(http_parser *p)
{
	struct http1_req *h = p->data;

	if (h->chunked && trailers_write(h))
		return 1;
	h->last = !http_should_keep_alive(p);
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings req_settings = {
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
	.on_chunk_header = on_chunk_header,
	.on_chunk_complete = on_chunk_complete,
};

/* ---- the head: checks, decision, writing -------------------------- */

/* What the checks need to know of a head's fields. */
struct head_facts {
	unsigned int hosts, tes, cls;
	const struct http_header *host, *te;
	bool upgrade;
};

/* Connection's list names "upgrade". */
static bool lists_upgrade(const char *v, size_t len)
{
	size_t i = 0;

	while (i < len) {
		size_t start, end;

		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		start = i;
		while (i < len && v[i] != ',')
			i++;
		end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (is_name(v + start, end - start, "upgrade"))
			return true;
	}
	return false;
}

static uint16_t default_port(const struct http1_req *h)
{
	return h->tls ? HTTPS_DEFAULT_PORT : HTTP_DEFAULT_PORT;
}

static bool port_matches(const struct http1_req *h, const char *s, size_t len,
			 bool given)
{
	return http__port_is(h->port, default_port(h), s, len, given);
}

static bool hostname_matches(const struct http1_req *h, const char *s,
			     size_t len)
{
	return http__same_nocase(s, len, h->hostname, h->hostname_len);
}

static bool host_matches(const struct http1_req *h, const char *v, size_t len)
{
	return http__authority_matches(h->hostname, h->port, h->tls, v, len);
}

static bool hostname_valid(const char *s, size_t len)
{
	if (!len || len > HTTP_HOSTNAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z') || c == '.' || c == '-' ||
		      c == '_' || c == ':'))
			return false;
	}
	return true;
}

/*
 * A connection created without a hostname takes its first request's Host
 * (the name, not the port: that is checked as always). An IPv6 literal,
 * or bytes no hostname has, name nothing: false.
 */
static bool host_pin(struct http1_req *h, const char *v, size_t len)
{
	const char *colon = memchr(v, ':', len);
	size_t n = colon ? (size_t)(colon - v) : len;

	if (!hostname_valid(v, n))
		return false;
	memcpy(h->hostname, v, n);
	h->hostname[n] = '\0';
	h->hostname_len = n;
	return true;
}

/*
 * The target: origin-form, "*" for OPTIONS, or absolute-form naming the
 * flow's scheme, hostname and port (RFC 9112 3.2.2: it overrides Host,
 * so it must match as well). Sets the request's path.
 */
static ssize_t target_check(struct http1_req *h, struct http_request *req)
{
	const char *t = req->target;
	size_t len = req->target_len;
	struct http_parser_url u;
	const char *scheme = h->tls ? "https" : "http";

	for (size_t i = 0; i < len; i++)
		if ((unsigned char)t[i] <= ' ' ||
		    (unsigned char)t[i] == ASCII_DEL)
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "malformed request target");
	if (len && t[0] == '/') {
		req->path = t;
		req->path_len = len;
		return 0;
	}
	if (len == 1 && t[0] == '*') {
		if (h->parser.method != HTTP_OPTIONS)
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "malformed request target");
		req->path = t;
		req->path_len = len;
		return 0;
	}
	http_parser_url_init(&u);
	if (http_parser_parse_url(t, len, 0, &u) ||
	    !(u.field_set & (1U << UF_SCHEMA)) ||
	    !(u.field_set & (1U << UF_HOST)))
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "malformed request target");
	if (u.field_set & (1U << UF_USERINFO))
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "userinfo in request target");
	if (!is_name(t + u.field_data[UF_SCHEMA].off,
		     u.field_data[UF_SCHEMA].len, scheme) ||
	    !hostname_matches(h, t + u.field_data[UF_HOST].off,
			      u.field_data[UF_HOST].len) ||
	    !port_matches(h, t + u.field_data[UF_PORT].off,
			  u.field_data[UF_PORT].len,
			  u.field_set & (1U << UF_PORT)))
		return refuse(h, HTTP_STATUS_MISDIRECTED_REQUEST,
			      "request target does not match");
	if (u.field_set & (1U << UF_PATH)) {
		req->path = t + u.field_data[UF_PATH].off;
		req->path_len = len - u.field_data[UF_PATH].off;
	} else {
		req->path = t + len;
		req->path_len = 0;
	}
	return 0;
}

/* The request as on_request sees it; each field's syntax checked. */
static ssize_t head_view(struct http1_req *h, struct http_header *hdrs,
			 struct http_request *req, struct head_facts *f)
{
	for (unsigned int i = 0; i < h->nr_fields; i++) {
		struct http_header *hd = &hdrs[i];
		struct field *fl = &h->fields[i];

		hd->name = arena_at(h, fl->name);
		hd->name_len = fl->name.len;
		hd->value = arena_at(h, fl->value);
		hd->value_len = fl->value.len;
		while (hd->value_len &&
		       (*hd->value == ' ' || *hd->value == '\t'))
			hd->value++, hd->value_len--;
		while (hd->value_len && (hd->value[hd->value_len - 1] == ' ' ||
					 hd->value[hd->value_len - 1] == '\t'))
			hd->value_len--;
		if (!http__is_token(hd->name, hd->name_len))
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "malformed header name");
		if (!http__is_value(hd->value, hd->value_len))
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "malformed header value");
		if (is_name(hd->name, hd->name_len, "host")) {
			f->hosts++;
			f->host = hd;
		} else if (is_name(hd->name, hd->name_len,
				   "transfer-encoding")) {
			f->tes++;
			f->te = hd;
		} else if (is_name(hd->name, hd->name_len, "content-length")) {
			f->cls++;
		} else if (is_name(hd->name, hd->name_len, "upgrade")) {
			f->upgrade = true;
		} else if (is_name(hd->name, hd->name_len, "connection") &&
			   lists_upgrade(hd->value, hd->value_len)) {
			f->upgrade = true;
		}
	}
	req->index = h->forwarded;
	req->method = http_method_str(h->parser.method);
	req->target = arena_at(h, h->url);
	req->target_len = h->url.len;
	req->version_minor = h->parser.http_minor;
	req->headers = hdrs;
	req->nr_headers = h->nr_fields;
	req->upgrade = f->upgrade;
	req->hostname = h->hostname;
	req->port = h->port;
	return 0;
}

/* The rules every request passes before it is decided. */
static ssize_t head_check(struct http1_req *h, struct http_request *req,
			  const struct head_facts *f)
{
	if (h->parser.http_major != 1 || h->parser.http_minor > 1)
		return refuse(h, HTTP_STATUS_HTTP_VERSION_NOT_SUPPORTED,
			      "HTTP version not supported");
	if (h->parser.method == HTTP_CONNECT)
		return refuse(h, HTTP_STATUS_METHOD_NOT_ALLOWED,
			      "CONNECT not allowed");
	if (f->hosts > 1)
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "multiple host headers");
	if (!f->hosts)
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "host header missing");
	if (f->tes && f->cls)
		return refuse(h, HTTP_STATUS_BAD_REQUEST,
			      "transfer-encoding with content-length");
	if (f->tes > 1 ||
	    (f->te && !is_name(f->te->value, f->te->value_len, "chunked")))
		return refuse(h, HTTP_STATUS_NOT_IMPLEMENTED,
			      "transfer-encoding not supported");
	/* The parser frames the body: it must agree with what we read. */
	if (!!f->te != !!(h->parser.flags & F_CHUNKED) ||
	    !!f->cls != !!(h->parser.flags & F_CONTENTLENGTH))
		return refuse(h, HTTP_STATUS_BAD_REQUEST, "malformed request");
	if ((!h->hostname_len &&
	     !host_pin(h, f->host->value, f->host->value_len)) ||
	    !host_matches(h, f->host->value, f->host->value_len))
		return refuse(h, HTTP_STATUS_MISDIRECTED_REQUEST,
			      "host header does not match");
	return target_check(h, req);
}

static ssize_t verdict_apply(struct http1_req *h,
			     const struct http_request *req, int verdict)
{
	struct http_edits *e = &h->edits;

	/* Its response would hand what was set back to the guest. */
	if ((verdict == HTTP_ALLOW || verdict == HTTP_ALLOW_UPGRADE) &&
	    http__echoes_request(req->method) && http_edits__sets(e))
		return refuse(h, HTTP_STATUS_METHOD_NOT_ALLOWED,
			      HTTP_ECHO_REFUSED);
	switch (verdict) {
	case HTTP_ALLOW:
		if (req->upgrade)
			return refuse(h, HTTP_STATUS_FORBIDDEN,
				      "upgrade not allowed");
		return 0;
	case HTTP_ALLOW_UPGRADE:
		/* Opaque only after a real one (both fields), as upstream. */
		h->upgrading = h->parser.upgrade;
		return 0;
	case HTTP_REFUSE:
		if (!e->status)
			return refuse(h, HTTP_STATUS_FORBIDDEN, "refused");
		/* A reason naming an injected value would hand it over. */
		return refuse(h, e->status,
			      http_edits__reason_leaks(e, e->reason) ?
				      "refused" :
				      e->reason);
	default:
		return refuse(h, HTTP_STATUS_INTERNAL_SERVER_ERROR,
			      "decision failed");
	}
}

/* Appends len bytes at *w (when writing), counts them in *n. */
static void put(char **w, size_t *n, const void *p, size_t len)
{
	if (*w) {
		memcpy(*w, p, len);
		*w += len;
	}
	*n += len;
}

static void put_field(char **w, size_t *n, const char *name, size_t nlen,
		      const char *value, size_t vlen)
{
	put(w, n, name, nlen);
	put(w, n, FIELD_SEP, FIELD_SEP_LEN);
	put(w, n, value, vlen);
	put(w, n, CRLF, CRLF_LEN);
}

static void put_edit(char **w, size_t *n, struct http_edits *e,
		     struct http_edit *ed)
{
	put_field(w, n, e->buf + ed->name_off, ed->name_len,
		  e->buf + ed->value_off, ed->value_len);
	ed->written = true;
}

/*
 * The head as forwarded, at w (NULL: only its size): the request line,
 * the guest's fields in its order and spelling but for Proxy-* (meant
 * for a proxy the guest did not ask for) and the edited ones, each set
 * field at the place of the first it replaces, else at the end.
 */
static size_t head_put(struct http1_req *h, const struct http_request *req,
		       const struct http_header *hdrs, char *w)
{
	struct http_edits *e = &h->edits;
	char version[VERSION_LEN + 1];
	size_t n = 0;

	snprintf(version, sizeof(version), "HTTP/1.%u",
		 req->version_minor ? 1U : 0U);
	for (unsigned int i = 0; i < e->nr; i++)
		e->e[i].written = false;
	put(&w, &n, req->method, strlen(req->method));
	put(&w, &n, " ", 1);
	put(&w, &n, req->target, req->target_len);
	put(&w, &n, " ", 1);
	put(&w, &n, version, VERSION_LEN);
	put(&w, &n, CRLF, CRLF_LEN);
	for (unsigned int i = 0; i < req->nr_headers; i++) {
		const struct http_header *hd = &hdrs[i];
		int j = http_edits__find(e, hd->name, hd->name_len);

		if (is_proxy_name(hd->name, hd->name_len))
			continue;
		if (j < 0) {
			put_field(&w, &n, hd->name, hd->name_len, hd->value,
				  hd->value_len);
			continue;
		}
		if (!e->e[j].remove && !e->e[j].written)
			put_edit(&w, &n, e, &e->e[j]);
	}
	for (unsigned int i = 0; i < e->nr; i++)
		if (!e->e[i].remove && !e->e[i].written)
			put_edit(&w, &n, e, &e->e[i]);
	put(&w, &n, CRLF, CRLF_LEN);
	return n;
}

static ssize_t head_write(struct http1_req *h, const struct http_request *req,
			  const struct http_header *hdrs)
{
	size_t size = head_put(h, req, hdrs, NULL);

	if (bytequeue__reserve(&h->out, size))
		return fail_nomem(h);
	head_put(h, req, hdrs, (char *)bytequeue__space(&h->out));
	bytequeue__commit(&h->out, size);
	return 0;
}

/* The head is complete: check it, have it decided, write it out. */
static ssize_t head_decide(struct http1_req *h)
{
	struct http_header hdrs[HTTP1_MAX_HEADERS];
	struct http_request req = { 0 };
	struct head_facts f = { 0 };
	ssize_t ret;
	int verdict;

	ret = head_view(h, hdrs, &req, &f);
	if (!ret)
		ret = head_check(h, &req, &f);
	if (ret)
		return ret;
	http_edits__reset(&h->edits);
	verdict = h->on_request(h->opaque, &req, &h->edits);
	if (verdict == HTTP_PENDING) {
		/* The head stays in the arena; resume decides it again. */
		http_edits__reset(&h->edits);
		h->state = REQ_PENDING;
		return 0;
	}
	ret = verdict_apply(h, &req, verdict);
	if (!ret)
		ret = head_write(h, &req, hdrs);
	http_edits__wipe_values(&h->edits);
	if (ret)
		return ret;
	h->chunked = f.te;
	h->was_head[h->forwarded % HTTP1_MAX_PIPELINE] =
		h->parser.method == HTTP_HEAD;
	h->forwarded++;
	/* The arena holds trailers from now on. */
	head_reset(h);
	h->state = REQ_BODY;
	return 0;
}

/* ---- feeding ------------------------------------------------------ */

static ssize_t head_feed(struct http1_req *h, const char *in, size_t len)
{
	size_t n = min_size(len, HTTP1_HEAD_MAX - h->head_bytes);
	enum http_errno e;
	ssize_t ret;
	size_t got;

	got = parse(h, &req_settings, in, n);
	if (h->state == REQ_DEAD)
		return h->dead_ret;
	e = HTTP_PARSER_ERRNO(&h->parser);
	if (e == HPE_PAUSED) {
		/*
		 * Paused on the head's last byte, which the parser reads
		 * again when it resumes (its headers-done state).
		 */
		http_parser_pause(&h->parser, 0);
		ret = head_decide(h);
		return ret ? ret : (ssize_t)got;
	}
	if (e != HPE_OK)
		return refuse_parse(h, e);
	h->head_bytes += got;
	if (h->head_bytes >= HTTP1_HEAD_MAX)
		return refuse(h, HTTP_STATUS_REQUEST_HEADER_FIELDS_TOO_LARGE,
			      "request head too large");
	return got;
}

static void message_done(struct http1_req *h)
{
	http_edits__reset(&h->edits);
	head_reset(h);
	h->chunked = false;
	if (h->upgrading)
		h->state = REQ_OPAQUE;
	else if (h->last)
		h->state = REQ_CLOSED;
	else
		h->state = REQ_HEAD;
}

static ssize_t body_feed(struct http1_req *h, const char *in, size_t len)
{
	enum http_errno e;
	size_t got;

	got = parse(h, &req_settings, in, len);
	if (h->state == REQ_DEAD)
		return h->dead_ret;
	e = HTTP_PARSER_ERRNO(&h->parser);
	if (e == HPE_PAUSED) {
		http_parser_pause(&h->parser, 0);
		message_done(h);
	} else if (e != HPE_OK) {
		return refuse_parse(h, e);
	}
	return got;
}

/* After a request that ends the connection: blank lines, nothing else. */
static ssize_t closed_feed(struct http1_req *h, const char *in, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (in[i] != '\r' && in[i] != '\n')
			return refuse(h, HTTP_STATUS_BAD_REQUEST,
				      "request after connection close");
	return len;
}

static bool pipeline_full(const struct http1_req *h)
{
	return h->tracked && h->forwarded - h->answered >= HTTP1_MAX_PIPELINE;
}

ssize_t http1_req__feed(struct http1_req *h, const void *in, size_t len)
{
	const char *p = in;
	size_t done = 0;

	while (done < len) {
		enum req_state before = h->state;
		size_t room = out_room(h);
		ssize_t n;

		if (!room)
			break;
		switch (h->state) {
		case REQ_HEAD:
			if (!h->head_bytes && pipeline_full(h))
				return done;
			n = head_feed(h, p + done, len - done);
			break;
		case REQ_BODY:
			n = body_feed(h, p + done, min_size(len - done, room));
			break;
		case REQ_OPAQUE:
			n = min_size(len - done, room);
			if (out_put(h, p + done, n))
				return h->dead_ret;
			break;
		case REQ_CLOSED:
			n = closed_feed(h, p + done, len - done);
			break;
		case REQ_PENDING:
			return done;
		default:
			return h->dead_ret;
		}
		if (n < 0)
			return n;
		done += n;
		/* A paused parser may take nothing, but then moves on. */
		if (!n && h->state == before)
			break;
	}
	if (h->state == REQ_DEAD)
		return h->dead_ret;
	return done;
}

ssize_t http1_req__resume(struct http1_req *h)
{
	ssize_t ret;

	if (h->state != REQ_PENDING)
		return 0;
	h->state = REQ_HEAD;
	ret = head_decide(h);
	if (ret < 0)
		return ret;
	return h->state == REQ_DEAD ? h->dead_ret : 0;
}

bool http1_req__pending(const struct http1_req *h)
{
	return h->state == REQ_PENDING;
}

const uint8_t *http1_req__output(const struct http1_req *h, size_t *len)
{
	*len = h->out.len;
	return bytequeue__peek(&h->out);
}

void http1_req__drain(struct http1_req *h, size_t n)
{
	if (n > h->out.len)
		n = h->out.len;
	if (!n)
		return;
	/* Sent bytes may carry an edit's value: none stays behind. */
	explicit_bzero(bytequeue__peek(&h->out), n);
	bytequeue__consume(&h->out, n);
}

const struct http1_refusal *http1_req__refusal(const struct http1_req *h)
{
	return h->state == REQ_DEAD ? &h->refusal : NULL;
}

int http1_req__create(struct http1_req **out, const struct http1_params *p)
{
	size_t len = p->hostname ? strlen(p->hostname) : 0;
	struct http1_req *h;

	*out = NULL;
	if ((p->hostname && !hostname_valid(p->hostname, len)) || !p->port ||
	    !p->on_request)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	if (len)
		memcpy(h->hostname, p->hostname, len);
	h->hostname_len = len;
	h->port = p->port;
	h->tls = p->tls;
	h->on_request = p->on_request;
	h->opaque = p->opaque;
	http_parser_init(&h->parser, HTTP_REQUEST);
	h->parser.data = h;
	h->state = REQ_HEAD;
	*out = h;
	return 0;
}

static void queue_wipe(struct bytequeue *q)
{
	if (q->data)
		explicit_bzero(q->data, q->cap);
	bytequeue__free(q);
}

void http1_req__destroy(struct http1_req *h)
{
	if (!h)
		return;
	queue_wipe(&h->out);
	queue_wipe(&h->arena);
	explicit_bzero(&h->edits, sizeof(h->edits));
	free(h);
}

/* ---- an error response -------------------------------------------- */

ssize_t http1__error_response(unsigned int status, const char *reason,
			      char *buf, size_t len)
{
	char text[HTTP_REASON_MAX];
	const char *phrase;
	int n;

	if (status < HTTP_STATUS_BAD_REQUEST || status > 599)
		return -EINVAL;
	phrase = http_status_str(status);
	if (!strcmp(phrase, "<unknown>"))
		phrase = "Error";
	http__text_copy(text, sizeof(text),
			reason && *reason ? reason : phrase);
	n = snprintf(buf, len,
		     "HTTP/1.1 %u %s\r\n"
		     "Content-Type: text/plain\r\n"
		     "Content-Length: %zu\r\n"
		     "Connection: close\r\n"
		     "\r\n"
		     "%s\n",
		     status, phrase, strlen(text) + 1, text);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

/* ---- the response side -------------------------------------------- */

static int resp_message_begin(http_parser *p)
{
	struct http1_resp *r = p->data;

	/* A response to no request: upstream is not speaking HTTP to us. */
	if (r->req->answered == r->req->forwarded)
		return 1;
	r->in_message = true;
	return 0;
}

/* 1: no body, whatever the fields say; 2: no body, then another protocol. */
static int resp_headers_complete(http_parser *p)
{
	struct http1_resp *r = p->data;
	const struct http1_req *h = r->req;

	r->status = p->status_code;
	if (r->status == HTTP_STATUS_SWITCHING_PROTOCOLS)
		return 2;
	if (h->was_head[h->answered % HTTP1_MAX_PIPELINE] ||
	    r->status / 100 == 1 || r->status == HTTP_STATUS_NO_CONTENT ||
	    r->status == HTTP_STATUS_NOT_MODIFIED)
		return 1;
	return 0;
}

static int resp_message_complete(http_parser *p)
{
	struct http1_resp *r = p->data;

	r->in_message = false;
	if (r->status == HTTP_STATUS_SWITCHING_PROTOCOLS) {
		r->opaque = true;
		return 0;
	}
	/* 1xx: interim (100-continue); the final response follows. */
	if (r->status / 100 != 1)
		r->req->answered++;
	return 0;
}

static const http_parser_settings resp_settings = {
	.on_message_begin = resp_message_begin,
	.on_headers_complete = resp_headers_complete,
	.on_message_complete = resp_message_complete,
};

int http1_resp__create(struct http1_resp **out, struct http1_req *h)
{
	struct http1_resp *r;

	*out = NULL;
	if (h->tracked || h->forwarded)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->req = h;
	http_parser_init(&r->parser, HTTP_RESPONSE);
	r->parser.data = r;
	h->tracked = true;
	*out = r;
	return 0;
}

void http1_resp__destroy(struct http1_resp *r)
{
	if (!r)
		return;
	r->req->tracked = false;
	free(r);
}

int http1_resp__feed(struct http1_resp *r, const void *in, size_t len)
{
	size_t got;

	if (r->dead)
		return -EPROTO;
	if (r->opaque || !len)
		return 0;
	got = http_parser_execute(&r->parser, &resp_settings, in, len);
	if (r->opaque)
		return 0;
	if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK || got != len) {
		r->dead = true;
		return -EPROTO;
	}
	return 0;
}

int http1_resp__eof(struct http1_resp *r)
{
	if (r->dead)
		return -EPROTO;
	if (r->opaque)
		return 0;
	/* Length 0 is the parser's EOF: it ends a close-delimited body. */
	http_parser_execute(&r->parser, &resp_settings, NULL, 0);
	if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK) {
		r->dead = true;
		return -EPROTO;
	}
	return 0;
}

uint64_t http1_resp__answered(const struct http1_resp *r)
{
	return r->req->answered;
}

uint64_t http1_resp__owed(const struct http1_resp *r)
{
	const struct http1_req *h = r->req;

	return r->dead || r->opaque ? 0 : h->forwarded - h->answered;
}

bool http1_resp__under_way(const struct http1_resp *r)
{
	return r->dead || r->opaque || r->in_message;
}

bool http1_resp__idle(const struct http1_resp *r)
{
	const struct http1_req *h = r->req;

	return !r->dead && !r->opaque && !r->in_message &&
	       h->answered == h->forwarded && h->state == REQ_HEAD &&
	       !h->head_bytes;
}
