// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP/2 interception of one guest connection (h2.h).
 *
 * Two nghttp2 sessions: a server toward the guest, a client toward
 * upstream. A guest stream is one struct h2_stream, known to the server
 * session by the guest's id and, once forwarded, to the client session
 * by upstream's; it is freed when both have closed it. nghttp2 does the
 * framing, HPACK and the RFC 9113 message checks (pseudo-headers, field
 * syntax, connection-specific fields, content-length against DATA); this
 * file adds what only a proxy knows: whose authority, which decision,
 * which edits.
 *
 * Flow control is end to end: neither session updates its windows by
 * itself (no_auto_window_update); bytes a peer sent are consumed, and
 * its window reopened, only when the other session took them into a
 * DATA frame. So a stream's buffer holds at most its window, a
 * connection's at most H2_CONN_WINDOW, whatever either peer does.
 *
 * Memory is bounded per connection (H2_CONN_BUDGET) and, through the
 * params' budget, per VM: every buffer here and everything either
 * nghttp2 session allocates is charged to the connection's budget, a
 * stream's header block is freed once decided, its body queues when
 * they empty. A new stream is refused (RST_STREAM REFUSED_STREAM, the
 * guest may retry) past H2_MAX_STREAMS held streams, past H2_QUEUED_MAX
 * requests waiting for upstream's concurrency, or when either budget
 * lacks H2_STREAM_RESERVE; an allocation past a budget fails the
 * connection (-ENOBUFS).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "lib/bytequeue.h"
#include "net/h2-internal.h"
#include "net/h2.h"
#include "net/http-internal.h"

#define STATUS_BAD_REQUEST	  400U
#define STATUS_METHOD_NOT_ALLOWED 405U
#define STATUS_MISDIRECTED	  421U
#define STATUS_FIELDS_TOO_LARGE	  431U
#define STATUS_INTERNAL		  500U
#define STATUS_DIGITS		  3U
#define FIELD_OVERHEAD		  32U /* RFC 9113 6.5.2, per field */
#define PROXY_PREFIX		  "proxy-"
#define METHOD_MAX		  32U
#define ASCII_DEL		  0x7fU

/* Where a field sits in its block's arena. */
struct h2_field {
	uint32_t name_off, name_len;
	uint32_t value_off, value_len;
};

/* A header block as received: names and values copied into an arena. */
struct h2_fields {
	struct bytequeue arena;
	struct bytequeue index; /* struct h2_field, in order */
	size_t list_size;	/* RFC 9113 6.5.2's measure */
	bool over;		/* too many, or too large: none kept */
};

struct h2_stream {
	struct h2 *h;
	struct h2_stream *prev, *next;
	int32_t gid;	   /* the guest's stream id */
	int32_t uid;	   /* upstream's; 0: not forwarded */
	bool g_open;	   /* open in the guest's session */
	bool u_open;	   /* open (or queued) in upstream's */
	bool answered;	   /* our own response (a refusal): no upstream */
	bool req_end;	   /* the guest's END_STREAM was read */
	bool head_end;	   /* with its head: no body */
	bool pending;	   /* its head waits for its decision */
	bool req_trailers; /* s->req holds the guest's trailers */
	bool resp_started; /* the final response head went to the guest */
	bool resp_end;	   /* upstream's END_STREAM was read, or ours */
	bool resp_trailers;
	/*
	 * Owing a response (forwarded, upstream's end not read): whether
	 * a frame of it went or came since the last sweep, and since when
	 * (the sweep's clock) none did: h2__expire().
	 */
	bool heard;
	uint64_t quiet_since;
	bool u_sent; /* its request HEADERS went upstream (not queued) */
	struct h2_fields req, resp;
	struct bytequeue req_body, resp_body;
	struct bytequeue edit_names; /* lower case, each NUL-terminated */
};

struct h2 {
	char hostname[HTTP_HOSTNAME_MAX + 1];
	uint16_t port;
	int (*on_request)(void *opaque, const struct http_request *req,
			  struct http_edits *edits);
	void (*on_refused)(void *opaque, unsigned int status,
			   const char *reason);
	void *opaque;

	nghttp2_session *sess[H2_SIDES];
	struct bytequeue out[H2_SIDES];
	bool dead[H2_SIDES];	/* failed, or its peer ended: no more I/O */
	bool over[H2_SIDES];	/* the end of its session was handled */
	bool goaway[H2_SIDES];	/* we told that side to go away */
	bool allowed;		/* a request was forwarded */
	bool destroying;	/* callbacks do nothing */
	int err;		/* a callback's failure */
	unsigned int up_status; /* upstream failed: the answer, else 0 */
	char up_reason[HTTP_REASON_MAX];

	struct h2_stream *streams;
	unsigned int live;	  /* streams held (either side open) */
	unsigned int queued;	  /* forwarded, not sent upstream yet */
	unsigned int up_active;	  /* forwarded and sent, upstream's open */
	uint64_t refused_streams; /* REFUSED_STREAM: past a bound */
	struct http_edits edits;

	struct h2_alloc alloc; /* the connection's budget (the VM's parent) */
};

/* ---- small helpers ------------------------------------------------ */

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static char ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static bool is_lit(const uint8_t *s, size_t len, const char *lit)
{
	return len == strlen(lit) && !memcmp(s, lit, len);
}

static bool prefix_nocase(const uint8_t *s, size_t len, const char *pre)
{
	size_t n = strlen(pre);

	if (len < n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (ascii_lower(s[i]) != pre[i])
			return false;
	return true;
}

/* RFC 9113 8.2.2: fields of one HTTP/1.1 connection, not of a message. */
static bool is_connection_specific(const uint8_t *n, size_t len)
{
	static const char *const names[] = {
		"connection",	     "keep-alive", "proxy-connection",
		"transfer-encoding", "upgrade",
	};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (is_lit(n, len, names[i]))
			return true;
	return false;
}

static nghttp2_nv nv_make(const void *name, size_t nlen, const void *value,
			  size_t vlen, uint8_t flags)
{
	return (nghttp2_nv){ .name = (uint8_t *)name,
			     .namelen = nlen,
			     .value = (uint8_t *)value,
			     .valuelen = vlen,
			     .flags = flags };
}

static void queue_wipe(struct bytequeue *q)
{
	if (q->data)
		explicit_bzero(q->data, q->cap);
	bytequeue__free(q);
}

/* ---- header blocks ----------------------------------------------- */

static unsigned int fields_nr(const struct h2_fields *f)
{
	return f->index.len / sizeof(struct h2_field);
}

static const struct h2_field *field_at(const struct h2_fields *f,
				       unsigned int i)
{
	return (const struct h2_field *)bytequeue__peek(&f->index) + i;
}

static const uint8_t *field_name(const struct h2_fields *f,
				 const struct h2_field *x)
{
	return bytequeue__peek(&f->arena) + x->name_off;
}

static const uint8_t *field_value(const struct h2_fields *f,
				  const struct h2_field *x)
{
	return bytequeue__peek(&f->arena) + x->value_off;
}

/* Done with a block: its buffers go (a stream may be held long after). */
static void fields_reset(struct h2_fields *f)
{
	queue_wipe(&f->arena);
	bytequeue__free(&f->index);
	f->list_size = 0;
	f->over = false;
}

/* One field; past the limits the block is marked over, not kept. */
static int fields_add(struct h2_fields *f, const uint8_t *name, size_t nlen,
		      const uint8_t *value, size_t vlen)
{
	struct h2_field x;
	int ret;

	f->list_size += nlen + vlen + FIELD_OVERHEAD;
	if (f->over || f->list_size > H2_HEADER_LIST_MAX ||
	    fields_nr(f) == H2_MAX_FIELDS) {
		f->over = true;
		return 0;
	}
	x.name_off = f->arena.len;
	x.name_len = nlen;
	x.value_off = f->arena.len + nlen;
	x.value_len = vlen;
	ret = bytequeue__append(&f->arena, name, nlen);
	if (!ret)
		ret = bytequeue__append(&f->arena, value, vlen);
	if (!ret)
		ret = bytequeue__append(&f->index, &x, sizeof(x));
	return ret;
}

/* A pseudo-header's value, or NULL. */
static const uint8_t *pseudo(const struct h2_fields *f, const char *name,
			     size_t *len)
{
	for (unsigned int i = 0; i < fields_nr(f); i++) {
		const struct h2_field *x = field_at(f, i);

		if (is_lit(field_name(f, x), x->name_len, name)) {
			*len = x->value_len;
			return field_value(f, x);
		}
	}
	return NULL;
}

/*
 * The block as nghttp2 name-value pairs (pointing into it), but for the
 * names skip() refuses; *nv freed by the caller.
 */
static int fields_nv(const struct h2_fields *f, struct h2_stream *s,
		     bool (*skip)(const struct h2_stream *s, const uint8_t *n,
				  size_t len),
		     nghttp2_nv **nv, size_t *n)
{
	unsigned int nr = fields_nr(f);

	*n = 0;
	*nv = calloc(nr ? nr : 1, sizeof(**nv));
	if (!*nv)
		return -ENOMEM;
	for (unsigned int i = 0; i < nr; i++) {
		const struct h2_field *x = field_at(f, i);

		if (skip && skip(s, field_name(f, x), x->name_len))
			continue;
		(*nv)[(*n)++] = nv_make(field_name(f, x), x->name_len,
					field_value(f, x), x->value_len,
					NGHTTP2_NV_FLAG_NONE);
	}
	return 0;
}

/* ---- streams ------------------------------------------------------ */

static struct h2 *of(void *user_data)
{
	return user_data;
}

static enum h2_side side_of(const struct h2 *h, nghttp2_session *sess)
{
	return sess == h->sess[H2_GUEST] ? H2_GUEST : H2_UP;
}

/*
 * A stream by the id a side knows it by, among those open there. Our
 * own list, not nghttp2's stream data: a request queued upstream but not
 * sent yet has no stream there, and a stream one session closed may
 * still be open in the other.
 */
static struct h2_stream *stream_find(struct h2 *h, enum h2_side side,
				     int32_t id)
{
	for (struct h2_stream *s = h->streams; id > 0 && s; s = s->next)
		if (side == H2_GUEST ? s->g_open && s->gid == id :
				       s->u_open && s->uid == id)
			return s;
	return NULL;
}

static struct h2_stream *stream_new(struct h2 *h, int32_t gid)
{
	struct h2_stream *s;

	if (bytebudget__charge(&h->alloc.budget, sizeof(*s)))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		bytebudget__credit(&h->alloc.budget, sizeof(*s));
		return NULL;
	}
	s->h = h;
	s->gid = gid;
	s->g_open = true;
	s->req.arena.budget = s->req.index.budget = &h->alloc.budget;
	s->resp.arena.budget = s->resp.index.budget = &h->alloc.budget;
	s->req_body.budget = s->resp_body.budget = &h->alloc.budget;
	s->edit_names.budget = &h->alloc.budget;
	h->live++;
	s->next = h->streams;
	if (h->streams)
		h->streams->prev = s;
	h->streams = s;
	return s;
}

/* Upstream's session is done with it (sent or not): not counted there. */
static void up_forget(struct h2_stream *s)
{
	if (!s->u_open)
		return;
	if (s->u_sent)
		s->h->up_active--;
	else
		s->h->queued--;
	s->u_open = false;
}

static void stream_free(struct h2_stream *s)
{
	struct h2 *h = s->h;

	fields_reset(&s->req);
	fields_reset(&s->resp);
	queue_wipe(&s->req_body);
	bytequeue__free(&s->resp_body);
	bytequeue__free(&s->edit_names);
	up_forget(s);
	h->live--;
	free(s);
	bytebudget__credit(&h->alloc.budget, sizeof(*s));
}

/* Both sessions are done with it: unlinked and freed. */
static void stream_put(struct h2_stream *s)
{
	struct h2 *h = s->h;

	if (s->g_open || s->u_open)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		h->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	stream_free(s);
}

/*
 * Bytes a session received for a stream and nobody will take: given back
 * to its connection window (the stream's is gone with it).
 */
static void body_drop(struct h2 *h, enum h2_side from, struct bytequeue *q)
{
	if (q->len && !h->dead[from])
		nghttp2_session_consume_connection(h->sess[from], q->len);
	queue_wipe(q);
}

static void resume(struct h2 *h, enum h2_side side, int32_t id)
{
	/* Not deferred (or not open yet): nothing to do, an error ignored. */
	if (!h->dead[side] && id > 0)
		nghttp2_session_resume_data(h->sess[side], id);
}

static void rst(struct h2 *h, enum h2_side side, int32_t id, uint32_t code)
{
	if (!h->dead[side] && id > 0)
		nghttp2_submit_rst_stream(h->sess[side], NGHTTP2_FLAG_NONE, id,
					  code);
}

/* Tells a side to go away: no new streams; the open ones finish. */
static void goaway(struct h2 *h, enum h2_side side)
{
	nghttp2_session *sess = h->sess[side];

	if (h->goaway[side] || h->dead[side])
		return;
	h->goaway[side] = true;
	nghttp2_submit_goaway(
		sess, NGHTTP2_FLAG_NONE,
		side == H2_GUEST ?
			nghttp2_session_get_last_proc_stream_id(sess) :
			0,
		NGHTTP2_NO_ERROR, NULL, 0);
}

/* ---- bodies ------------------------------------------------------- */

static bool skip_request_trailer(const struct h2_stream *s, const uint8_t *n,
				 size_t len)
{
	const char *names = (const char *)bytequeue__peek(&s->edit_names);
	size_t at = 0;

	/* The decision's fields are the head's alone, as in HTTP/1.1. */
	if (prefix_nocase(n, len, PROXY_PREFIX))
		return true;
	while (at < s->edit_names.len) {
		size_t l = strlen(names + at);

		if (l == len && !memcmp(names + at, n, len))
			return true;
		at += l + 1;
	}
	return false;
}

/* Trailers after a body's last DATA (which then does not end it). */
static void trailers_submit(struct h2 *h, struct h2_stream *s, enum h2_side to,
			    uint32_t *flags)
{
	struct h2_fields *f = to == H2_UP ? &s->req : &s->resp;
	int32_t id = to == H2_UP ? s->uid : s->gid;
	nghttp2_nv *nv;
	size_t n;

	if (fields_nv(f, s, to == H2_UP ? skip_request_trailer : NULL, &nv,
		      &n)) {
		h->err = -ENOMEM;
		return;
	}
	if (n && !nghttp2_submit_trailer(h->sess[to], id, nv, n))
		*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
	free(nv);
	fields_reset(f);
}

/*
 * nghttp2 wants DATA for a stream toward a side: from the body the other
 * side sent (whose window reopens by as much), or our refusal's text.
 */
static ssize_t body_read(nghttp2_session *sess, int32_t id, uint8_t *buf,
			 size_t length, uint32_t *flags,
			 nghttp2_data_source *src, void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s = src->ptr;
	enum h2_side to = side_of(h, sess), from = !to;
	struct bytequeue *q = to == H2_UP ? &s->req_body : &s->resp_body;
	bool end = to == H2_UP ? s->req_end : s->resp_end;
	bool trailers = to == H2_UP ? s->req_trailers : s->resp_trailers;
	int32_t from_id = from == H2_UP ? s->uid : s->gid;
	size_t n = min_size(length, q->len);

	/* An empty queue may have no buffer: nothing to copy or wipe. */
	if (n) {
		memcpy(buf, bytequeue__peek(q), n);
		explicit_bzero(bytequeue__peek(q), n);
	}
	bytequeue__consume(q, n);
	/* Emptied: its buffer goes, the stream may idle long. */
	if (!q->len)
		bytequeue__free(q);
	if (n && !s->answered && !h->dead[from])
		nghttp2_session_consume(h->sess[from], from_id, n);
	if (n)
		s->heard = true;
	if (!q->len && end) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (trailers)
			trailers_submit(h, s, to, flags);
		return n;
	}
	return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

/* ---- answers of our own --------------------------------------------- */

/*
 * A stream answered here, not upstream: status, a text body with the
 * reason (sanitized by http_edits__refuse() or constant), nothing of the
 * request's nor of any edit's bytes.
 */
static int answer(struct h2 *h, struct h2_stream *s, unsigned int status,
		  const char *reason)
{
	char code[STATUS_DIGITS + 1];
	char body[H2_REFUSAL_MAX];
	nghttp2_data_provider prd = { .source.ptr = s,
				      .read_callback = body_read };
	nghttp2_nv nv[2];
	int n;

	if (status < 100 || status > 599)
		status = STATUS_INTERNAL;
	snprintf(code, sizeof(code), "%u", status);
	n = snprintf(body, sizeof(body), "%s\n", reason);
	if (n < 0 || (size_t)n >= sizeof(body))
		n = snprintf(body, sizeof(body), "refused\n");
	body_drop(h, H2_GUEST, &s->req_body);
	s->answered = true;
	s->resp_started = true;
	s->resp_end = true;
	if (bytequeue__append(&s->resp_body, body, n))
		return -ENOMEM;
	nv[0] = nv_make(":status", 7, code, strlen(code), NGHTTP2_NV_FLAG_NONE);
	nv[1] = nv_make("content-type", 12, "text/plain; charset=utf-8", 25,
			NGHTTP2_NV_FLAG_NONE);
	if (nghttp2_submit_response(h->sess[H2_GUEST], s->gid, nv, 2, &prd))
		rst(h, H2_GUEST, s->gid, NGHTTP2_INTERNAL_ERROR);
	return 0;
}

/* Refused by the checks here, before any decision: told, then answered. */
static int refuse(struct h2 *h, struct h2_stream *s, unsigned int status,
		  const char *reason)
{
	if (h->on_refused)
		h->on_refused(h->opaque, status, reason);
	return answer(h, s, status, reason);
}

/*
 * Upstream's stream is gone (code: why; NO_ERROR once its response was
 * complete). What the guest still needs: the rest of a complete
 * response, else a reset, or the answer upstream's failure left.
 */
static void up_closed(struct h2 *h, struct h2_stream *s, uint32_t code)
{
	if (!s->u_open)
		return;
	up_forget(s);
	body_drop(h, H2_GUEST, &s->req_body);
	/* A complete response still goes to the guest, whatever came after. */
	if (!s->g_open || s->resp_end)
		return;
	body_drop(h, H2_UP, &s->resp_body);
	if (h->up_status && !s->resp_started) {
		if (answer(h, s, h->up_status, h->up_reason))
			h->err = -ENOMEM;
		return;
	}
	switch (code) {
	case NGHTTP2_REFUSED_STREAM: /* the guest may try it again */
	case NGHTTP2_CANCEL:
	case NGHTTP2_ENHANCE_YOUR_CALM:
	case NGHTTP2_HTTP_1_1_REQUIRED:
		break;
	case NGHTTP2_NO_ERROR: /* ended before its response did */
		code = NGHTTP2_CANCEL;
		break;
	default: /* upstream's connection trouble is not the guest's */
		code = NGHTTP2_INTERNAL_ERROR;
	}
	rst(h, H2_GUEST, s->gid, code);
}

/* ---- the request ---------------------------------------------------- */

/* The checks of a request head before its decision: 0, or a refusal. */
static int request_check(struct h2 *h, struct h2_stream *s, const char **reason)
{
	const struct h2_fields *f = &s->req;
	const uint8_t *method, *scheme, *path, *auth, *proto;
	size_t mlen = 0, slen = 0, plen = 0, alen = 0, prlen = 0;
	bool named = false;

	if (f->over) {
		*reason = "request head too large";
		return STATUS_FIELDS_TOO_LARGE;
	}
	method = pseudo(f, ":method", &mlen);
	scheme = pseudo(f, ":scheme", &slen);
	path = pseudo(f, ":path", &plen);
	auth = pseudo(f, ":authority", &alen);
	proto = pseudo(f, ":protocol", &prlen);
	*reason = "CONNECT not allowed";
	if (!method || is_lit(method, mlen, "CONNECT") || proto)
		return STATUS_METHOD_NOT_ALLOWED;
	*reason = "malformed request";
	if (mlen >= METHOD_MAX || !path || !plen)
		return STATUS_BAD_REQUEST;
	*reason = "scheme not https";
	if (!scheme || !is_lit(scheme, slen, "https"))
		return STATUS_BAD_REQUEST;
	*reason = "malformed request target";
	if (path[0] != '/' &&
	    !(plen == 1 && path[0] == '*' && is_lit(method, mlen, "OPTIONS")))
		return STATUS_BAD_REQUEST;
	for (size_t i = 0; i < plen; i++)
		if (path[i] <= ' ' || path[i] >= ASCII_DEL)
			return STATUS_BAD_REQUEST;
	*reason = "authority does not match";
	if (auth) {
		if (!http__authority_matches(h->hostname, h->port, true,
					     (const char *)auth, alen))
			return STATUS_MISDIRECTED;
		named = true;
	}
	for (unsigned int i = 0; i < fields_nr(f); i++) {
		const struct h2_field *x = field_at(f, i);
		const uint8_t *n = field_name(f, x), *v = field_value(f, x);

		if (is_connection_specific(n, x->name_len) ||
		    (is_lit(n, x->name_len, "te") &&
		     !is_lit(v, x->value_len, "trailers"))) {
			*reason = "connection-specific header";
			return STATUS_BAD_REQUEST;
		}
		/* RFC 9113 8.3.1: Host, when there, names the same. */
		if (is_lit(n, x->name_len, "host")) {
			*reason = "host header does not match";
			if (!http__authority_matches(h->hostname, h->port, true,
						     (const char *)v,
						     x->value_len))
				return STATUS_MISDIRECTED;
			named = true;
		}
	}
	*reason = "authority missing";
	return named ? 0 : STATUS_BAD_REQUEST;
}

/*
 * The request's fields as sent upstream: the pseudo-headers, then the
 * guest's fields in its order but for Proxy-* and the edited ones, each
 * set field (its name in lower case: HTTP/2's) at the place of the first
 * it replaces, else at the end, its value never indexed. lower holds the
 * edits' bytes with lower-case names.
 */
static size_t request_nv(struct h2 *h, struct h2_stream *s, char *lower,
			 nghttp2_nv *nv)
{
	struct http_edits *e = &h->edits;
	const struct h2_fields *f = &s->req;
	size_t n = 0;

	for (unsigned int i = 0; i < e->nr; i++)
		e->e[i].written = false;
	for (unsigned int i = 0; i < fields_nr(f); i++) {
		const struct h2_field *x = field_at(f, i);
		const uint8_t *name = field_name(f, x);
		int j;

		if (name[0] == ':') {
			nv[n++] = nv_make(name, x->name_len, field_value(f, x),
					  x->value_len, NGHTTP2_NV_FLAG_NONE);
			continue;
		}
		if (prefix_nocase(name, x->name_len, PROXY_PREFIX))
			continue;
		j = http_edits__find(e, (const char *)name, x->name_len);
		if (j < 0) {
			nv[n++] = nv_make(name, x->name_len, field_value(f, x),
					  x->value_len, NGHTTP2_NV_FLAG_NONE);
			continue;
		}
		if (e->e[j].remove || e->e[j].written)
			continue;
		e->e[j].written = true;
		nv[n++] = nv_make(lower + e->e[j].name_off, e->e[j].name_len,
				  lower + e->e[j].value_off, e->e[j].value_len,
				  NGHTTP2_NV_FLAG_NO_INDEX);
	}
	for (unsigned int i = 0; i < e->nr; i++) {
		if (e->e[i].remove || e->e[i].written)
			continue;
		nv[n++] = nv_make(lower + e->e[i].name_off, e->e[i].name_len,
				  lower + e->e[i].value_off, e->e[i].value_len,
				  NGHTTP2_NV_FLAG_NO_INDEX);
	}
	return n;
}

/* The edits' names, for the trailers (which may not carry them). */
static int edit_names_keep(struct h2 *h, struct h2_stream *s, const char *lower)
{
	const struct http_edits *e = &h->edits;

	for (unsigned int i = 0; i < e->nr; i++)
		if (bytequeue__append(&s->edit_names, lower + e->e[i].name_off,
				      e->e[i].name_len) ||
		    bytequeue__append(&s->edit_names, "", 1))
			return -ENOMEM;
	return 0;
}

/*
 * Whether one more request may go to upstream's session: beyond what
 * upstream's SETTINGS_MAX_CONCURRENT_STREAMS lets it send now, at most
 * H2_QUEUED_MAX wait there (each holds a copy of its head), and the
 * budgets keep room for that copy.
 */
static bool up_room(const struct h2 *h)
{
	uint64_t mcs = nghttp2_session_get_remote_settings(
		h->sess[H2_UP], NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
	uint64_t now = mcs > h->up_active ? mcs - h->up_active : 0;

	return h->queued < now + H2_QUEUED_MAX &&
	       bytebudget__room(&h->alloc.budget, H2_STREAM_RESERVE);
}

/* Allowed: the request goes upstream as a new stream. */
static int forward(struct h2 *h, struct h2_stream *s, bool end)
{
	nghttp2_data_provider prd = { .source.ptr = s,
				      .read_callback = body_read };
	struct http_edits *e = &h->edits;
	char lower[HTTP_EDITS_MAX];
	nghttp2_nv *nv;
	int32_t id;
	size_t n;
	int ret;

	if (!up_room(h)) { /* the guest may retry it later */
		h->refused_streams++;
		rst(h, H2_GUEST, s->gid, NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	nv = calloc(fields_nr(&s->req) + e->nr + 1, sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	memcpy(lower, e->buf, e->used);
	for (unsigned int i = 0; i < e->nr; i++)
		for (unsigned int k = 0; k < e->e[i].name_len; k++)
			lower[e->e[i].name_off + k] =
				ascii_lower(lower[e->e[i].name_off + k]);
	ret = edit_names_keep(h, s, lower);
	n = request_nv(h, s, lower, nv);
	id = ret || h->dead[H2_UP] || h->over[H2_UP] ?
		     NGHTTP2_ERR_INVALID_STATE :
		     nghttp2_submit_request(h->sess[H2_UP], NULL, nv, n,
					    end ? NULL : &prd, s);
	explicit_bzero(lower, e->used);
	free(nv);
	if (ret)
		return ret;
	if (id < 0) { /* upstream said go away: the guest may retry */
		rst(h, H2_GUEST, s->gid, NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	s->uid = id;
	s->u_open = true;
	h->queued++;
	s->heard = true;
	h->allowed = true;
	return 0;
}

/*
 * A checked request head, decided: forwarded, answered, or left pending
 * (HTTP_PENDING: its head kept for h2__resume()).
 */
static int request_decide(struct h2 *h, struct h2_stream *s)
{
	struct http_header hdrs[H2_MAX_FIELDS];
	struct http_request req = { .version_minor = 1 };
	struct http_edits *e = &h->edits;
	char method[METHOD_MAX];
	const uint8_t *m, *p;
	size_t mlen = 0, plen = 0;
	int verdict, ret;

	s->pending = false;
	if (h->up_status) {
		fields_reset(&s->req);
		return answer(h, s, h->up_status, h->up_reason);
	}
	m = pseudo(&s->req, ":method", &mlen);
	p = pseudo(&s->req, ":path", &plen);
	memcpy(method, m, mlen);
	method[mlen] = '\0';
	req.index = (uint64_t)(s->gid - 1) / 2;
	req.method = method;
	req.target = req.path = (const char *)p;
	req.target_len = req.path_len = plen;
	req.hostname = h->hostname;
	req.port = h->port;
	req.headers = hdrs;
	for (unsigned int i = 0; i < fields_nr(&s->req); i++) {
		const struct h2_field *x = field_at(&s->req, i);

		if (field_name(&s->req, x)[0] == ':')
			continue;
		hdrs[req.nr_headers++] = (struct http_header){
			.name = (const char *)field_name(&s->req, x),
			.name_len = x->name_len,
			.value = (const char *)field_value(&s->req, x),
			.value_len = x->value_len,
		};
	}
	http_edits__reset(e);
	verdict = h->on_request(h->opaque, &req, e);
	switch (verdict) {
	case HTTP_PENDING: /* its body waits in req_body, under its window */
		s->pending = true;
		http_edits__reset(e);
		return 0;
	case HTTP_ALLOW:
	case HTTP_ALLOW_UPGRADE: /* no upgrade in HTTP/2: as allowed */
		/* Its response would hand what was set back to the guest. */
		if (http__echoes_request(method) && http_edits__sets(e))
			ret = refuse(h, s, STATUS_METHOD_NOT_ALLOWED,
				     HTTP_ECHO_REFUSED);
		else
			ret = forward(h, s, s->head_end);
		break;
	case HTTP_REFUSE:
		/* A reason naming an injected value would hand it over. */
		ret = answer(
			h, s, e->status ? e->status : 403,
			!e->status || http_edits__reason_leaks(e, e->reason) ?
				"refused" :
				e->reason);
		break;
	default:
		ret = answer(h, s, STATUS_INTERNAL, "decision failed");
	}
	http_edits__reset(e);
	fields_reset(&s->req);
	return ret;
}

/* A request head is complete: checked, then decided. */
static int request(struct h2 *h, struct h2_stream *s, bool end)
{
	const char *reason;
	unsigned int status;

	s->req_end = end;
	s->head_end = end;
	if (h->up_status)
		return request_decide(h, s);
	status = request_check(h, s, &reason);
	if (status) {
		fields_reset(&s->req);
		return refuse(h, s, status, reason);
	}
	return request_decide(h, s);
}

/* ---- the response --------------------------------------------------- */

/* A response head or trailers from upstream, to the guest as they came. */
static int response(struct h2 *h, struct h2_stream *s, bool end)
{
	nghttp2_data_provider prd = { .source.ptr = s,
				      .read_callback = body_read };
	nghttp2_session *g = h->sess[H2_GUEST];
	const uint8_t *st;
	size_t slen = 0, n;
	nghttp2_nv *nv;
	int ret = 0;

	if (!s->g_open || s->answered) {
		fields_reset(&s->resp);
		return 0;
	}
	if (s->resp_started) { /* trailers: after the body */
		s->resp_trailers = true;
		s->resp_end = true;
		resume(h, H2_GUEST, s->gid);
		return 0;
	}
	if (fields_nv(&s->resp, s, NULL, &nv, &n))
		return -ENOMEM;
	st = pseudo(&s->resp, ":status", &slen);
	if (st && slen == STATUS_DIGITS && st[0] == '1') {
		ret = nghttp2_submit_headers(g, NGHTTP2_FLAG_NONE, s->gid, NULL,
					     nv, n, NULL);
	} else {
		s->resp_started = true;
		s->resp_end = end;
		ret = nghttp2_submit_response(g, s->gid, nv, n,
					      end ? NULL : &prd);
	}
	free(nv);
	fields_reset(&s->resp);
	if (ret)
		rst(h, H2_GUEST, s->gid, NGHTTP2_INTERNAL_ERROR);
	return 0;
}

/* ---- nghttp2's callbacks ------------------------------------------- */

static int cb_result(struct h2 *h, int ret)
{
	if (!ret)
		return 0;
	h->err = ret;
	return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *fr,
			    void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s;

	if (h->destroying || side_of(h, sess) != H2_GUEST ||
	    fr->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	/*
	 * Past the streams held (the guest's open ones and those it reset
	 * that upstream still holds) or without room for one more head:
	 * refused, its block decoded and dropped (no stream to keep it).
	 */
	if (h->live >= H2_MAX_STREAMS ||
	    !bytebudget__room(&h->alloc.budget, H2_STREAM_RESERVE)) {
		h->refused_streams++;
		rst(h, H2_GUEST, fr->hd.stream_id, NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	s = stream_new(h, fr->hd.stream_id);
	return s ? 0 : cb_result(h, -ENOBUFS);
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *fr,
		     const uint8_t *name, size_t nlen, const uint8_t *value,
		     size_t vlen, uint8_t flags, void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s;

	if (h->destroying)
		return 0;
	s = stream_find(h, side_of(h, sess), fr->hd.stream_id);
	if (!s)
		return 0;
	/* Trailers before the decision would mix with the head it keeps. */
	if (side_of(h, sess) == H2_GUEST && s->pending)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (side_of(h, sess) == H2_GUEST)
		return cb_result(h,
				 fields_add(&s->req, name, nlen, value, vlen));
	if (fields_add(&s->resp, name, nlen, value, vlen))
		return cb_result(h, -ENOMEM);
	/* Upstream's block too large: its stream reset, so the guest's. */
	return s->resp.over ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *fr,
			 void *user_data)
{
	struct h2 *h = of(user_data);
	enum h2_side side = side_of(h, sess);
	bool end = fr->hd.flags & NGHTTP2_FLAG_END_STREAM;
	struct h2_stream *s;

	if (h->destroying)
		return 0;
	s = stream_find(h, side, fr->hd.stream_id);
	if (fr->hd.type == NGHTTP2_GOAWAY) {
		goaway(h, !side);
		return 0;
	}
	if (!s ||
	    (fr->hd.type != NGHTTP2_HEADERS && fr->hd.type != NGHTTP2_DATA))
		return 0;
	if (side == H2_UP) {
		s->heard = true;
		if (fr->hd.type == NGHTTP2_HEADERS)
			return cb_result(h, response(h, s, end));
		if (end) {
			s->resp_end = true;
			resume(h, H2_GUEST, s->gid);
		}
		return 0;
	}
	if (fr->hd.type == NGHTTP2_HEADERS &&
	    fr->headers.cat == NGHTTP2_HCAT_REQUEST)
		return cb_result(h, request(h, s, end));
	if (!end)
		return 0;
	s->req_end = true;
	if (fr->hd.type == NGHTTP2_HEADERS) {
		s->req_trailers = !s->answered && !s->req.over;
		if (!s->req_trailers)
			fields_reset(&s->req);
	}
	if (s->u_open)
		resume(h, H2_UP, s->uid);
	return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id,
			 const uint8_t *data, size_t len, void *user_data)
{
	struct h2 *h = of(user_data);
	enum h2_side side = side_of(h, sess);
	struct h2_stream *s;
	bool wanted;

	if (h->destroying)
		return 0;
	s = stream_find(h, side, id);
	wanted = s &&
		 (side == H2_GUEST ? (s->u_open || s->pending) && !s->answered :
				     s->g_open && !s->answered);
	if (!wanted) { /* nobody will take it: its window back at once */
		nghttp2_session_consume(sess, id, len);
		return 0;
	}
	if (bytequeue__append(side == H2_GUEST ? &s->req_body : &s->resp_body,
			      data, len))
		return cb_result(h, -ENOMEM);
	if (side == H2_GUEST) {
		resume(h, H2_UP, s->uid);
	} else {
		s->heard = true;
		resume(h, H2_GUEST, s->gid);
	}
	return 0;
}

/*
 * The guest's stream got its whole response while its request still
 * runs and nobody upstream reads it (our answer, or upstream done): a
 * reset with NO_ERROR tells it to stop sending (RFC 9113 8.1).
 */
static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *fr,
			 void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s;

	if (!h->destroying && side_of(h, sess) == H2_UP &&
	    fr->hd.type == NGHTTP2_HEADERS) {
		s = stream_find(h, H2_UP, fr->hd.stream_id);
		if (s && !s->u_sent) { /* out of the queue */
			s->u_sent = true;
			h->queued--;
			h->up_active++;
		}
		return 0;
	}
	if (h->destroying || side_of(h, sess) != H2_GUEST ||
	    !(fr->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	s = stream_find(h, H2_GUEST, fr->hd.stream_id);
	if (!s)
		return 0;
	if (!s->req_end && (s->answered || !s->u_open))
		rst(h, H2_GUEST, s->gid, NGHTTP2_NO_ERROR);
	return 0;
}

/* A request never sent upstream (it went away first): as refused. */
static int on_frame_not_send(nghttp2_session *sess, const nghttp2_frame *fr,
			     int error, void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s;

	if (h->destroying || side_of(h, sess) != H2_UP ||
	    fr->hd.type != NGHTTP2_HEADERS ||
	    nghttp2_session_find_stream(sess, fr->hd.stream_id))
		return 0;
	s = stream_find(h, H2_UP, fr->hd.stream_id);
	if (!s)
		return 0;
	up_closed(h, s, NGHTTP2_REFUSED_STREAM);
	stream_put(s);
	return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code,
			   void *user_data)
{
	struct h2 *h = of(user_data);
	struct h2_stream *s;

	if (h->destroying)
		return 0;
	s = stream_find(h, side_of(h, sess), id);
	if (!s)
		return 0;
	if (side_of(h, sess) == H2_UP) {
		up_closed(h, s, code);
	} else {
		s->g_open = false;
		body_drop(h, H2_GUEST, &s->req_body);
		if (s->u_open) {
			/* The guest is gone from it: upstream is, too. */
			rst(h, H2_UP, s->uid, code ? code : NGHTTP2_CANCEL);
			body_drop(h, H2_UP, &s->resp_body);
		}
	}
	stream_put(s);
	return 0;
}

/* ---- sessions ------------------------------------------------------ */

static int session_new(struct h2 *h, enum h2_side side)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	int ret;

	if (nghttp2_session_callbacks_new(&cb))
		return -ENOMEM;
	if (nghttp2_option_new(&opt)) {
		nghttp2_session_callbacks_del(cb);
		return -ENOMEM;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(
		cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
		cb, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
	nghttp2_session_callbacks_set_on_frame_not_send_callback(
		cb, on_frame_not_send);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb,
							       on_stream_close);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_no_closed_streams(opt, 1);
	nghttp2_option_set_max_send_header_block_length(opt,
							H2_HEADER_LIST_MAX);
	if (side == H2_GUEST)
		ret = nghttp2_session_server_new3(&h->sess[side], cb, h, opt,
						  &h->alloc.mem);
	else
		ret = nghttp2_session_client_new3(&h->sess[side], cb, h, opt,
						  &h->alloc.mem);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	return ret ? -ENOMEM : 0;
}

/* Our SETTINGS (no push, our limits) and the larger connection window. */
static int session_start(struct h2 *h, enum h2_side side)
{
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H2_HEADER_LIST_MAX },
	};
	/* A server sends no ENABLE_PUSH (RFC 9113 6.5.2: a client's). */
	size_t skip = side == H2_GUEST ? 1 : 0;

	if (nghttp2_submit_settings(h->sess[side], NGHTTP2_FLAG_NONE, iv + skip,
				    ARRAY_SIZE(iv) - skip) ||
	    nghttp2_session_set_local_window_size(
		    h->sess[side], NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW))
		return -ENOMEM;
	return 0;
}

static bool finished(const struct h2 *h, enum h2_side side)
{
	nghttp2_session *s = h->sess[side];

	return h->dead[side] || (!nghttp2_session_want_read(s) &&
				 !nghttp2_session_want_write(s));
}

/*
 * A side's session ended (its GOAWAY exchanged and its streams done, or
 * it failed, or its peer went): the streams that still wait on it are
 * reset on the other side, and the other side is told to go away.
 */
static void side_over(struct h2 *h, enum h2_side side)
{
	struct h2_stream *s, *next;

	h->over[side] = true;
	for (s = h->streams; s; s = next) {
		next = s->next;
		if (side == H2_UP) {
			up_closed(h, s, NGHTTP2_INTERNAL_ERROR);
		} else if (s->g_open) {
			s->g_open = false;
			body_drop(h, H2_GUEST, &s->req_body);
			if (s->u_open)
				rst(h, H2_UP, s->uid, NGHTTP2_CANCEL);
		}
		stream_put(s);
	}
	if (side == H2_GUEST && !h->over[H2_UP] && !h->dead[H2_UP])
		nghttp2_session_terminate_session(h->sess[H2_UP],
						  NGHTTP2_NO_ERROR);
	if (side == H2_UP)
		goaway(h, H2_GUEST);
}

static void settle(struct h2 *h)
{
	for (int side = 0; side < H2_SIDES; side++)
		if (!h->over[side] && finished(h, side))
			side_over(h, side);
}

/* nghttp2's bytes for a side into its queue, up to H2_OUTPUT_MAX. */
static int pump(struct h2 *h, enum h2_side side)
{
	const uint8_t *p;
	ssize_t n;

	while (!h->dead[side] && !h->over[side] &&
	       h->out[side].len < H2_OUTPUT_MAX) {
		n = nghttp2_session_mem_send(h->sess[side], &p);
		if (n < 0) {
			h->dead[side] = true;
			return h->err ? h->err : -EPROTO;
		}
		if (!n)
			break;
		if (bytequeue__append(&h->out[side], p, n))
			return -ENOMEM;
	}
	return h->err;
}

/* ---- the interface --------------------------------------------------- */

ssize_t h2__feed(struct h2 *h, enum h2_side side, const void *in, size_t len)
{
	size_t taken = 0;
	ssize_t n;
	int ret;

	if (h->err)
		return h->err;
	if (h->dead[side] || h->over[side])
		return len;
	while (taken < len) {
		if (h->out[H2_GUEST].len >= H2_OUTPUT_MAX ||
		    h->out[H2_UP].len >= H2_OUTPUT_MAX)
			break;
		n = nghttp2_session_mem_recv(
			h->sess[side], (const uint8_t *)in + taken,
			min_size(len - taken, H2_FEED_CHUNK));
		if (n < 0) {
			h->dead[side] = true;
			return h->err		      ? h->err :
			       n == NGHTTP2_ERR_NOMEM ? -ENOMEM :
							-EPROTO;
		}
		taken += n;
		ret = pump(h, H2_GUEST);
		if (!ret)
			ret = pump(h, H2_UP);
		if (ret)
			return ret;
		settle(h);
	}
	return taken;
}

const uint8_t *h2__output(struct h2 *h, enum h2_side side, size_t *len)
{
	if (!h->err && !pump(h, side))
		settle(h);
	*len = h->out[side].len;
	return bytequeue__peek(&h->out[side]);
}

size_t h2__pending(const struct h2 *h, enum h2_side side)
{
	return h->out[side].len;
}

void h2__drain(struct h2 *h, enum h2_side side, size_t n)
{
	struct bytequeue *q = &h->out[side];

	n = min_size(n, q->len);
	if (side == H2_UP)
		explicit_bzero(bytequeue__peek(q), n);
	bytequeue__consume(q, n);
}

void h2__eof(struct h2 *h, enum h2_side side)
{
	if (h->dead[side])
		return;
	h->dead[side] = true;
	bytequeue__consume(&h->out[side], h->out[side].len);
	settle(h);
}

void h2__upstream_failed(struct h2 *h, unsigned int status, const char *reason)
{
	h->up_status = status;
	snprintf(h->up_reason, sizeof(h->up_reason), "%s", reason);
	if (!h->dead[H2_UP]) {
		h->dead[H2_UP] = true;
		bytequeue__consume(&h->out[H2_UP], h->out[H2_UP].len);
	}
	settle(h);
}

/*
 * A stream upstream owes a response to, silent past the deadline: the
 * guest gets status and reason if no response head went to it yet, else
 * a reset; upstream's stream is cancelled either way.
 */
static int expire(struct h2 *h, struct h2_stream *s, unsigned int status,
		  const char *reason)
{
	int ret = 0;

	if (s->resp_started) {
		body_drop(h, H2_UP, &s->resp_body);
		rst(h, H2_GUEST, s->gid, NGHTTP2_INTERNAL_ERROR);
	} else {
		ret = answer(h, s, status, reason);
	}
	rst(h, H2_UP, s->uid, NGHTTP2_CANCEL);
	return ret;
}

/* Upstream's turn: nothing of its response waits for the guest. */
static bool owes_response(const struct h2_stream *s)
{
	return s->u_open && s->g_open && !s->answered && !s->resp_end &&
	       !s->resp_body.len;
}

int h2__expire(struct h2 *h, uint64_t now, uint64_t limit, unsigned int status,
	       const char *reason)
{
	struct h2_stream *s, *next;
	int ret = 0, n = 0;

	if (h->err)
		return h->err;
	for (s = h->streams; s && !ret; s = next) {
		next = s->next;
		if (!owes_response(s)) {
			s->quiet_since = 0;
			continue;
		}
		if (s->heard || !s->quiet_since) {
			s->heard = false;
			s->quiet_since = now;
			continue;
		}
		if (now - s->quiet_since < limit)
			continue;
		ret = expire(h, s, status, reason);
		n++;
	}
	for (int side = 0; side < H2_SIDES && !ret && n; side++)
		ret = pump(h, side);
	settle(h);
	return ret ? ret : n;
}

int h2__resume(struct h2 *h)
{
	struct h2_stream *s, *next;
	int ret = 0;

	if (h->err)
		return h->err;
	for (s = h->streams; s && !ret; s = next) {
		next = s->next;
		if (s->pending && s->g_open)
			ret = request_decide(h, s);
	}
	if (ret)
		return ret;
	for (int side = 0; side < H2_SIDES && !ret; side++)
		ret = pump(h, side);
	settle(h);
	return ret;
}

bool h2__waiting(const struct h2 *h)
{
	for (const struct h2_stream *s = h->streams; s; s = s->next)
		if (s->pending && s->g_open)
			return true;
	return false;
}

size_t h2__held(const struct h2 *h)
{
	return h->alloc.budget.held;
}

uint64_t h2__refused_streams(const struct h2 *h)
{
	return h->refused_streams;
}

bool h2__wants_upstream(const struct h2 *h)
{
	return h->allowed;
}

bool h2__done(const struct h2 *h, enum h2_side side)
{
	return h->dead[side] || (h->over[side] && !h->out[side].len);
}

int h2__create(struct h2 **out, const struct h2_params *p)
{
	struct h2 *h;
	int ret;

	*out = NULL;
	if (!p->hostname || !p->hostname[0] ||
	    strlen(p->hostname) > HTTP_HOSTNAME_MAX || !p->on_request)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	snprintf(h->hostname, sizeof(h->hostname), "%s", p->hostname);
	h->port = p->port;
	h->on_request = p->on_request;
	h->on_refused = p->on_refused;
	h->opaque = p->opaque;
	h2_alloc__init(&h->alloc, H2_CONN_BUDGET, p->budget, &h->err);
	h->out[H2_GUEST].budget = h->out[H2_UP].budget = &h->alloc.budget;
	ret = session_new(h, H2_GUEST);
	if (!ret)
		ret = session_new(h, H2_UP);
	if (!ret)
		ret = session_start(h, H2_GUEST);
	if (!ret)
		ret = session_start(h, H2_UP);
	if (ret) {
		h2__destroy(h);
		return ret;
	}
	*out = h;
	return 0;
}

void h2__destroy(struct h2 *h)
{
	struct h2_stream *s, *next;

	if (!h)
		return;
	h->destroying = true;
	for (int side = 0; side < H2_SIDES; side++) {
		nghttp2_session_del(h->sess[side]);
		queue_wipe(&h->out[side]);
	}
	for (s = h->streams; s; s = next) {
		next = s->next;
		stream_free(s);
	}
	explicit_bzero(&h->edits, sizeof(h->edits));
	free(h);
}
