// SPDX-License-Identifier: GPL-2.0
/*
 * HTTP interception of one guest flow (intercept.h, Documentation/
 * network.md "HTTP grants and interception").
 *
 * Guest bytes are read into `in` and fed to the request rewriter, whose
 * output goes upstream; upstream bytes are read into `back`, watched by
 * the response tracker and written to the guest as they came. A refused
 * request stops the reading of the guest; the responses to the requests
 * before it are still relayed (the tracker says when they are done), then
 * the error response goes into `back`, the guest gets a FIN, and what it
 * still sends is read and dropped until its own FIN: closing with unread
 * bytes would reset the connection, and the guest could lose the answer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "vmm/http1.h"
#include "vmm/intercept.h"

/* What the guest gets when upstream cannot be reached (RFC 9110 15.6.3). */
#define HTTP_STATUS_BAD_GATEWAY 502U
/* An upgrade (WebSocket...) asked for on an http grant (15.5.4). */
#define HTTP_STATUS_FORBIDDEN 403U
/* The policy's fields did not go in: a bug, not the guest's (15.6.1). */
#define HTTP_STATUS_INTERNAL 500U

enum ic_state {
	IC_RELAY,   /* requests go up, responses come back */
	IC_REFUSED, /* the responses before the refused request still come */
	IC_ANSWER,  /* the error response goes to the guest, then a FIN */
	IC_LINGER,  /* the guest's bytes dropped until its FIN */
};

struct ic_side {
	int fd;	   /* borrowed; -1: none (yet) */
	bool eof;  /* its peer's FIN was read */
	bool shut; /* ours was sent (SHUT_WR) */
};

struct intercept {
	struct net_flow flow;
	struct intercept_ops ops;
	struct ic_side side[INTERCEPT_SIDES];
	enum ic_state state;
	bool want_up;  /* a request was allowed: connect upstream */
	bool asked_up; /* the proxy was asked (wants_upstream said so) */
	bool verified; /* the name the guest gave was found bound */
	bool counted;  /* the refusal was reported by on_request */
	char host[HTTP1_HOSTNAME_MAX + 1]; /* the guest's name, once allowed */

	struct http1_req *req;
	struct http1_resp *resp;
	bool resp_dead; /* the tracker stopped: no boundaries known */

	uint8_t *in; /* read from the guest, not yet taken by req */
	size_t in_len;
	uint8_t *back; /* for the guest: upstream's bytes, an error answer */
	size_t back_off, back_len;
	size_t lingered; /* guest bytes dropped in IC_LINGER */
};

/* ---- the decision --------------------------------------------------- */

static void report(struct intercept *ic, const char *host, bool allowed,
		   const char *reason)
{
	if (ic->ops.request)
		ic->ops.request(ic->ops.opaque, &ic->flow,
				host && host[0] ? host : NULL, allowed, reason);
}

/*
 * Each request, by the policy as it is now. The decision holds the
 * fields' values (secrets): wiped before it goes out of scope, whichever
 * way it went.
 */
static int on_request(void *opaque, const struct http1_request *rq,
		      struct http1_edits *e)
{
	struct intercept *ic = opaque;
	struct net_http_decision d;
	int ret = HTTP1_ALLOW;

	d = (struct net_http_decision){ .verdict = NET_VERDICT_DENY };
	/* Refused here rather than by the rewriter, so it counts once. */
	if (rq->upgrade) {
		snprintf(d.reason, sizeof(d.reason), "%s",
			 "http upgrade not allowed");
		ret = http1_edits__refuse(e, HTTP_STATUS_FORBIDDEN, d.reason);
		goto out_report;
	}
	ic->ops.decide(ic->ops.decide_opaque, &ic->flow, rq->hostname,
		       ic->verified, &d);
	d.reason[sizeof(d.reason) - 1] = '\0';
	if (d.verdict != NET_VERDICT_ALLOW) {
		ret = http1_edits__refuse(e, d.status,
					  d.reason[0] ? d.reason : "refused");
		goto out_report;
	}
	for (unsigned int i = 0; i < d.nr_headers && i < NET_HTTP_MAX_HEADERS;
	     i++) {
		const char *name = d.buf + d.headers[i].name;
		const char *value = d.buf + d.headers[i].value;

		/* The policy checked both; a failure here is a bug. */
		if (d.headers[i].name >= sizeof(d.buf) ||
		    d.headers[i].value >= sizeof(d.buf) ||
		    http1_edits__set(e, name, value)) {
			snprintf(d.reason, sizeof(d.reason), "%s",
				 "http header edit failed");
			ret = http1_edits__refuse(e, HTTP_STATUS_INTERNAL,
						  d.reason);
			goto out_report;
		}
	}
	ic->verified = true;
	snprintf(ic->host, sizeof(ic->host), "%s", rq->hostname);
	ic->want_up = true;
out_report:
	ic->counted = ret != HTTP1_ALLOW;
	report(ic, rq->hostname, ret == HTTP1_ALLOW, d.reason);
	explicit_bzero(&d, sizeof(d));
	return ret;
}

/* ---- the buffers ----------------------------------------------------- */

static size_t back_pending(const struct intercept *ic)
{
	return ic->back_len - ic->back_off;
}

static void back_compact(struct intercept *ic)
{
	if (!ic->back_off)
		return;
	memmove(ic->back, ic->back + ic->back_off, back_pending(ic));
	ic->back_len -= ic->back_off;
	ic->back_off = 0;
}

static size_t out_pending(const struct intercept *ic)
{
	size_t len;

	http1_req__output(ic->req, &len);
	return len;
}

/* recv: > 0, 0 (FIN), -EAGAIN or -errno. */
static ssize_t side_recv(struct intercept *ic, int s, void *buf, size_t len)
{
	ssize_t n = recv(ic->side[s].fd, buf, len, MSG_DONTWAIT);

	if (n >= 0)
		return n;
	return errno == EINTR ? -EAGAIN : -errno;
}

/* send: how many (maybe 0), or -errno. */
static ssize_t side_send(struct intercept *ic, int s, const void *buf,
			 size_t len)
{
	ssize_t n = send(ic->side[s].fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n >= 0)
		return n;
	return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

static int side_shut(struct intercept *ic, int s)
{
	if (ic->side[s].shut || ic->side[s].fd < 0)
		return 0;
	ic->side[s].shut = true;
	return shutdown(ic->side[s].fd, SHUT_WR) ? -errno : 0;
}

/* ---- reading ---------------------------------------------------------- */

/* After a refusal: the guest's bytes dropped, up to its FIN. */
static int guest_linger(struct intercept *ic)
{
	ssize_t n;

	for (;;) {
		n = side_recv(ic, INTERCEPT_GUEST, ic->in, INTERCEPT_BUF);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0)
			return n ? (int)n : INTERCEPT_DONE;
		ic->lingered += n;
		if (ic->lingered > INTERCEPT_LINGER_MAX)
			return -E2BIG;
	}
}

static int guest_read(struct intercept *ic)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	ssize_t n;

	if (ic->state == IC_LINGER)
		return guest_linger(ic);
	if (ic->state != IC_RELAY || g->eof || ic->in_len == INTERCEPT_BUF)
		return 0;
	n = side_recv(ic, INTERCEPT_GUEST, ic->in + ic->in_len,
		      INTERCEPT_BUF - ic->in_len);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	if (!n)
		g->eof = true;
	ic->in_len += n;
	if (n && ic->ops.bytes)
		ic->ops.bytes(ic->ops.opaque, n, 0);
	return 0;
}

static int up_read(struct intercept *ic)
{
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	ssize_t n;

	if (u->fd < 0 || u->eof ||
	    (ic->state != IC_RELAY && ic->state != IC_REFUSED))
		return 0;
	back_compact(ic);
	if (ic->back_len == INTERCEPT_BUF)
		return 0;
	n = side_recv(ic, INTERCEPT_UP, ic->back + ic->back_len,
		      INTERCEPT_BUF - ic->back_len);
	if (n == -EAGAIN)
		return 0;
	if (n < 0)
		return n;
	if (!n) {
		u->eof = true;
		if (!ic->resp_dead && http1_resp__eof(ic->resp))
			ic->resp_dead = true;
		return 0;
	}
	/* Watched only: the guest gets upstream's bytes as they came. */
	if (!ic->resp_dead &&
	    http1_resp__feed(ic->resp, ic->back + ic->back_len, n))
		ic->resp_dead = true;
	ic->back_len += n;
	if (ic->ops.bytes)
		ic->ops.bytes(ic->ops.opaque, 0, n);
	return 0;
}

/* ---- writing ---------------------------------------------------------- */

/* What the rewriter produced, upstream, once there is an upstream. */
static int flush_up(struct intercept *ic, bool *progress)
{
	const uint8_t *out;
	size_t len;
	ssize_t n;

	out = http1_req__output(ic->req, &len);
	if (!len || ic->side[INTERCEPT_UP].fd < 0)
		return 0;
	n = side_send(ic, INTERCEPT_UP, out, len);
	if (n < 0)
		return n;
	if (n)
		*progress = true;
	http1_req__drain(ic->req, n);
	return 0;
}

static int flush_back(struct intercept *ic)
{
	ssize_t n;

	while (back_pending(ic)) {
		n = side_send(ic, INTERCEPT_GUEST, ic->back + ic->back_off,
			      back_pending(ic));
		if (n <= 0)
			return n;
		ic->back_off += n;
	}
	ic->back_off = ic->back_len = 0;
	return 0;
}

/* The guest's bytes through the rewriter, as far as it takes them. */
static int feed(struct intercept *ic, bool *progress)
{
	ssize_t n;

	while (ic->state == IC_RELAY && ic->in_len) {
		n = http1_req__feed(ic->req, ic->in, ic->in_len);
		if (n < 0)
			return n;
		if (!n)
			break;
		*progress = true;
		memmove(ic->in, ic->in + n, ic->in_len - n);
		ic->in_len -= n;
	}
	return 0;
}

/* ---- refusals --------------------------------------------------------- */

/* An error response for the guest, after what `back` holds already. */
static int answer(struct intercept *ic, unsigned int status, const char *reason)
{
	char buf[HTTP1_ERROR_RESPONSE_MAX];
	ssize_t n;

	n = http1__error_response(status, reason, buf, sizeof(buf));
	if (n < 0)
		return n;
	back_compact(ic);
	if (n > (ssize_t)(INTERCEPT_BUF - ic->back_len))
		return -ENOSPC;
	memcpy(ic->back + ic->back_len, buf, n);
	ic->back_len += n;
	ic->state = IC_ANSWER;
	ic->in_len = 0;
	/* Upstream is done with: the proxy closes it (intercept.h). */
	ic->side[INTERCEPT_UP].fd = -1;
	return 0;
}

/* The rewriter refused (feed's ret): report it, stop reading the guest. */
static int refused(struct intercept *ic, ssize_t ret)
{
	const struct http1_refusal *r = http1_req__refusal(ic->req);

	if (!r || ret == -ENOMEM)
		return ret ? (int)ret : -EPROTO;
	if (!ic->counted)
		report(ic, ic->host, false, r->reason);
	ic->counted = true;
	/* Its head went upstream, its body broke: no answer is coming. */
	if (r->head_sent)
		return -EPROTO;
	ic->state = IC_REFUSED;
	ic->in_len = 0;
	return 0;
}

/*
 * Refused: once the requests before it have their responses, the error
 * response goes to the guest. Without the tracker nobody knows where
 * those end: a reset, as when upstream ends before they did.
 */
static int refused_step(struct intercept *ic)
{
	const struct http1_refusal *r = http1_req__refusal(ic->req);

	if (out_pending(ic) || back_pending(ic))
		return 0;
	if (http1_resp__answered(ic->resp) >= r->request)
		return answer(ic, r->status, r->reason);
	if (ic->resp_dead || ic->side[INTERCEPT_UP].eof ||
	    ic->side[INTERCEPT_UP].fd < 0)
		return -EPROTO;
	return 0;
}

/* ---- the flow --------------------------------------------------------- */

/* FINs passed on; whether the flow is over. */
static int finish(struct intercept *ic)
{
	struct ic_side *g = &ic->side[INTERCEPT_GUEST];
	struct ic_side *u = &ic->side[INTERCEPT_UP];
	int ret = 0;

	switch (ic->state) {
	case IC_RELAY:
		if (g->eof && !ic->in_len && !out_pending(ic)) {
			/* Nothing was allowed: nothing to wait for. */
			if (u->fd < 0 && !ic->want_up)
				return INTERCEPT_DONE;
			ret = u->fd >= 0 ? side_shut(ic, INTERCEPT_UP) : 0;
		}
		if (!ret && u->eof && !back_pending(ic))
			ret = side_shut(ic, INTERCEPT_GUEST);
		if (!ret && g->shut && u->shut)
			return INTERCEPT_DONE;
		return ret;
	case IC_REFUSED:
		return refused_step(ic);
	case IC_ANSWER:
		if (back_pending(ic))
			return 0;
		ic->state = IC_LINGER;
		ret = side_shut(ic, INTERCEPT_GUEST);
		if (ret)
			return ret;
		return g->eof ? INTERCEPT_DONE : guest_linger(ic);
	case IC_LINGER:
		return 0;
	}
	return 0;
}

/* Everything that can move, moved; then the state's next step. */
static int pump(struct intercept *ic)
{
	bool progress;
	ssize_t ret;

	do {
		progress = false;
		ret = feed(ic, &progress);
		if (ret < 0) {
			ret = refused(ic, ret);
			if (ret)
				return ret;
		}
		ret = flush_up(ic, &progress);
		if (ret)
			return ret;
	} while (progress);
	ret = flush_back(ic);
	if (ret)
		return ret;
	ret = finish(ic);
	/* An error response queued by this step goes out at once. */
	if (!ret && ic->state == IC_ANSWER) {
		ret = flush_back(ic);
		if (!ret)
			ret = finish(ic);
	}
	return ret;
}

int intercept__run(struct intercept *ic, enum intercept_side side,
		   uint32_t events)
{
	int ret = 0;

	if (events & EPOLLERR)
		return -ECONNRESET;
	if (events & (EPOLLIN | EPOLLHUP))
		ret = side == INTERCEPT_GUEST ? guest_read(ic) : up_read(ic);
	if (ret)
		return ret;
	return pump(ic);
}

uint32_t intercept__interest(const struct intercept *ic,
			     enum intercept_side side)
{
	const struct ic_side *s = &ic->side[side];
	uint32_t ev = 0;

	if (s->fd < 0)
		return 0;
	if (side == INTERCEPT_GUEST) {
		if ((ic->state == IC_RELAY && !s->eof &&
		     ic->in_len < INTERCEPT_BUF) ||
		    ic->state == IC_LINGER)
			ev |= EPOLLIN;
		if (back_pending(ic))
			ev |= EPOLLOUT;
		return ev;
	}
	if ((ic->state == IC_RELAY || ic->state == IC_REFUSED) && !s->eof &&
	    back_pending(ic) < INTERCEPT_BUF)
		ev |= EPOLLIN;
	if (out_pending(ic))
		ev |= EPOLLOUT;
	return ev;
}

bool intercept__wants_upstream(const struct intercept *ic)
{
	return ic->want_up && !ic->asked_up &&
	       (ic->state == IC_RELAY || ic->state == IC_REFUSED);
}

int intercept__upstream(struct intercept *ic, int fd)
{
	ic->asked_up = true;
	ic->side[INTERCEPT_UP].fd = fd;
	return pump(ic);
}

int intercept__upstream_failed(struct intercept *ic)
{
	int ret;

	ic->asked_up = true;
	ic->side[INTERCEPT_UP].fd = -1;
	/* No request reached upstream: the first allowed one gets the 502. */
	ret = answer(ic, HTTP_STATUS_BAD_GATEWAY, "upstream unreachable");
	return ret ? ret : pump(ic);
}

bool intercept__upstream_done(const struct intercept *ic)
{
	return ic->asked_up && ic->side[INTERCEPT_UP].fd < 0;
}

/* ---- create, destroy -------------------------------------------------- */

int intercept__create(struct intercept **out, const struct intercept_params *p)
{
	struct http1_params hp = {
		.hostname = NULL, /* the first request's Host, then checked */
		.port = ntohs(p->flow.dst.sin_port),
		.on_request = on_request,
	};
	struct intercept *ic;
	int ret;

	*out = NULL;
	if (p->guest_fd < 0 || !p->ops || !p->ops->decide)
		return -EINVAL;
	ic = calloc(1, sizeof(*ic));
	if (!ic)
		return -ENOMEM;
	ic->flow = p->flow;
	ic->ops = *p->ops;
	ic->side[INTERCEPT_GUEST].fd = p->guest_fd;
	ic->side[INTERCEPT_UP].fd = -1;
	hp.opaque = ic;
	ic->in = malloc(INTERCEPT_BUF);
	ic->back = malloc(INTERCEPT_BUF);
	ret = ic->in && ic->back ? http1_req__create(&ic->req, &hp) : -ENOMEM;
	if (!ret)
		ret = http1_resp__create(&ic->resp, ic->req);
	if (ret) {
		intercept__destroy(ic);
		return ret;
	}
	*out = ic;
	return 0;
}

void intercept__destroy(struct intercept *ic)
{
	if (!ic)
		return;
	http1_resp__destroy(ic->resp);
	http1_req__destroy(ic->req);
	/* The guest's requests, before and after the rewriter: best effort. */
	if (ic->in)
		explicit_bzero(ic->in, INTERCEPT_BUF);
	free(ic->in);
	free(ic->back);
	free(ic);
}
