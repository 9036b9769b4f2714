// SPDX-License-Identifier: GPL-2.0
/*
 * Each request of an intercepted flow (intercept.h, Documentation/
 * network.md "HTTP grants and interception"), HTTP/1.1 or an h2 stream
 * alike: the policy's decision on the name it gives, the hook's question
 * when its grant asks one (and the answer, applied when it comes), and
 * the header edits that go upstream with it: the grant's fields (the
 * credentials injected), the hook's. The connection that carries the
 * requests is intercept.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/intercept-internal.h"

/* An upgrade (WebSocket...) asked for on an http grant (15.5.4). */
#define HTTP_STATUS_FORBIDDEN 403U
/* TRACE on a grant that does not let it through (15.5.6). */
#define HTTP_STATUS_METHOD_NOT_ALLOWED 405U
/* Fields set on a clear-text flow with no opt-in ("clearText"). */
#define HTTP_CLEAR_TEXT_REFUSED "http field in clear text"
/* The policy's fields did not go in: a bug, not the guest's (15.6.1). */
#define HTTP_STATUS_INTERNAL 500U

/* ---- the decision --------------------------------------------------- */

void intercept__report(struct intercept *ic, const char *detail, bool allowed,
		       const char *reason)
{
	if (ic->ops.request)
		ic->ops.request(ic->ops.opaque, &ic->flow,
				detail && detail[0] ? detail : NULL, allowed,
				reason);
}

/*
 * The policy, now, on the name the guest gave. The decision holds the
 * fields' values (secrets): the caller wipes it.
 */
void intercept__decide(struct intercept *ic, const char *host,
		       struct net_http_decision *d)
{
	*d = (struct net_http_decision){ .verdict = NET_VERDICT_DENY,
					 .hook_flow = ic->hook_flow,
					 .hook_flow_each =
						 ic->hook_each_request };

	snprintf(d->hook_host, sizeof(d->hook_host), "%s", ic->hook_host);
	ic->ops.decide(ic->ops.decide_opaque, &ic->flow, host, ic->verified, d);
	d->reason[sizeof(d->reason) - 1] = '\0';
	if (!d->reason[0])
		snprintf(d->reason, sizeof(d->reason), "%s", "refused");
}

/* ---- the hook, request by request ------------------------------------ */

static struct ic_ask *ask_find(struct intercept *ic, uint64_t index)
{
	for (unsigned int i = 0; i < IC_MAX_ASKS; i++)
		if (ic->asks[i].used && ic->asks[i].index == index)
			return &ic->asks[i];
	return NULL;
}

void intercept__ask_free(struct intercept *ic, struct ic_ask *a)
{
	if (a->used && !a->answered && ic->ops.cancel)
		ic->ops.cancel(ic->ops.opaque, a->id);
	if (a->ans)
		explicit_bzero(a->ans, sizeof(*a->ans));
	free(a->ans);
	*a = (struct ic_ask){ 0 };
}

static void refuse_with(struct net_http_decision *d, const char *reason)
{
	d->verdict = NET_VERDICT_DENY;
	d->status = HTTP_STATUS_FORBIDDEN;
	snprintf(d->reason, sizeof(d->reason), "%s", reason);
}

/* The request as the hook's question sees it. */
static void question(const struct intercept *ic, const struct http_request *rq,
		     const struct net_http_decision *d,
		     struct hook_http_question *q)
{
	struct tls_conn *g = ic->side[INTERCEPT_GUEST].tls;

	*q = (struct hook_http_question){
		.socket = d->hook_socket,
		.timeout_ms = d->hook_timeout_ms,
		.grant = d->grant,
		.flow = ic->hook_flow,
		.host = rq->hostname,
		.port = rq->port,
		.tls = g,
		/* Requests must name the SNI's host: it is rq->hostname. */
		.sni = g ? ic->host : NULL,
		.alpn = g ? tls_conn__alpn(g) : NULL,
		.protocol = ic->h2	      ? "h2" :
			    rq->version_minor ? "HTTP/1.1" :
						"HTTP/1.0",
		.method = rq->method,
		.path = rq->path,
		.path_len = rq->path_len,
		.fields = rq->headers,
		.nr_fields = rq->nr_headers,
		.grant_fields = d,
	};
}

/*
 * A request whose grant asks the hook (d: NET_VERDICT_ASK): its answer
 * if it came (*ans; d stays ASK), else the question out and
 * HTTP_PENDING, else d refused. 0 when decided.
 */
static int hook_decision(struct intercept *ic, const struct http_request *rq,
			 struct net_http_decision *d,
			 const struct net_http_decision **ans)
{
	uint64_t index = d->ask_each_request ? rq->index : IC_CONNECTION;
	struct ic_ask *a = ask_find(ic, index);
	struct hook_http_question q;
	int ret;

	*ans = NULL;
	if (a && a->answered) {
		a->taken = true;
		if (!a->ans)
			refuse_with(d, HOOK_ERROR); /* no memory for it */
		*ans = a->ans;
		return 0;
	}
	if (a)
		return HTTP_PENDING; /* its question is out */
	for (unsigned int i = 0; !a && i < IC_MAX_ASKS; i++)
		if (!ic->asks[i].used)
			a = &ic->asks[i];
	if (!a) {
		refuse_with(d, HOOK_BUSY);
		return 0;
	}
	question(ic, rq, d, &q);
	ret = ic->ops.ask ? ic->ops.ask(ic->ops.opaque, ic->owner, &ic->flow,
					&q, &a->id) :
			    -ENOTCONN;
	if (ret) {
		refuse_with(d, hook__failure(ret));
		return 0;
	}
	a->used = true;
	a->index = index;
	return HTTP_PENDING;
}

/* The fields the grant gives the hook include name. */
static bool hook_field(const struct net_http_decision *d, const char *name)
{
	for (unsigned int i = 0; i < d->nr_headers && i < NET_HTTP_MAX_HEADERS;
	     i++)
		if (d->headers[i].hook && d->headers[i].name < sizeof(d->buf) &&
		    !strcasecmp(d->buf + d->headers[i].name, name))
			return true;
	return false;
}

/* The value the answer sets for name, or NULL. */
static const char *hook_value(const struct net_http_decision *ans,
			      const char *name)
{
	for (unsigned int i = 0;
	     ans && i < ans->nr_headers && i < NET_HTTP_MAX_HEADERS; i++)
		if (!ans->headers[i].remove &&
		    ans->headers[i].name < sizeof(ans->buf) &&
		    ans->headers[i].value < sizeof(ans->buf) &&
		    !strcasecmp(ans->buf + ans->headers[i].name, name))
			return ans->buf + ans->headers[i].value;
	return NULL;
}

/*
 * The edits of an allowed request: the hook's first (removals, and
 * fields the grant does not name), then the grant's fields (a later
 * edit of a name wins, so the grant's own values stand), those it gives
 * the hook with the answer's values, or removed when it set none: the
 * guest never supplies a field the host brokers. With strip (a TRACE the
 * grant lets through) every field is removed and none set. The answer's
 * names are ones a grant could set (hook-msg.c checked). 0, or the
 * refusal's reason.
 */
static const char *edits_apply(const struct net_http_decision *d,
			       const struct net_http_decision *ans, bool strip,
			       struct http_edits *e)
{
	for (unsigned int i = 0;
	     ans && i < ans->nr_headers && i < NET_HTTP_MAX_HEADERS; i++) {
		const char *name = ans->buf + ans->headers[i].name;
		int ret;

		if (ans->headers[i].name >= sizeof(ans->buf) ||
		    ans->headers[i].value >= sizeof(ans->buf))
			return "http header edit failed";
		if (ans->headers[i].remove || strip)
			ret = http_edits__remove(e, name);
		else if (hook_field(d, name))
			ret = 0; /* set below, in the grant's order */
		else
			ret = http_edits__set(e, name,
					      ans->buf + ans->headers[i].value);
		if (ret)
			return "http header edit failed";
	}
	for (unsigned int i = 0; i < d->nr_headers && i < NET_HTTP_MAX_HEADERS;
	     i++) {
		const char *name, *value;

		/* The policy checked both; a failure here is a bug. */
		if (d->headers[i].name >= sizeof(d->buf) ||
		    d->headers[i].value >= sizeof(d->buf))
			return "http header edit failed";
		name = d->buf + d->headers[i].name;
		value = strip		   ? NULL :
			d->headers[i].hook ? hook_value(ans, name) :
					     d->buf + d->headers[i].value;
		if (value ? http_edits__set(e, name, value) :
			    http_edits__remove(e, name))
			return "http header edit failed";
	}
	return NULL;
}

/*
 * Each request, by the policy as it is now (and the hook, when its
 * grant says so). The decision is wiped before it goes out of scope,
 * whichever way it went.
 */
static int on_request(void *opaque, const struct http_request *rq,
		      struct http_edits *e)
{
	struct intercept *ic = opaque;
	const struct net_http_decision *ans = NULL;
	bool trace = http__echoes_request(rq->method);
	bool clear = !ic->side[INTERCEPT_GUEST].tls;
	struct net_http_decision d;
	const char *failed;
	int ret = HTTP_ALLOW;

	/* Refused here rather than by the rewriter, so it counts once. */
	if (rq->upgrade) {
		d = (struct net_http_decision){
			.reason = "http upgrade not allowed"
		};
		ret = http_edits__refuse(e, HTTP_STATUS_FORBIDDEN, d.reason);
		goto out_report;
	}
	intercept__decide(ic, rq->hostname, &d);
	/*
	 * Its response would echo the fields set on it (RFC 9110 9.3.8):
	 * only a grant's "trace" lets it through, with none of them.
	 */
	if (trace && d.verdict != NET_VERDICT_DENY && !d.trace) {
		refuse_with(&d, HTTP_ECHO_REFUSED);
		d.status = HTTP_STATUS_METHOD_NOT_ALLOWED;
	}
	if (d.verdict == NET_VERDICT_ASK) {
		ret = hook_decision(ic, rq, &d, &ans);
		if (ret == HTTP_PENDING) {
			/* Reported once decided. */
			explicit_bzero(&d, sizeof(d));
			return ret;
		}
		if (ans && ans->verdict != NET_VERDICT_ALLOW) {
			d.verdict = NET_VERDICT_DENY;
			d.status = ans->status ? ans->status :
						 HTTP_STATUS_FORBIDDEN;
			snprintf(d.reason, sizeof(d.reason), "%s", ans->reason);
		} else if (d.verdict == NET_VERDICT_ASK) {
			d.verdict = NET_VERDICT_ALLOW;
			if (ans)
				snprintf(d.reason, sizeof(d.reason), "%s",
					 ans->reason);
		}
	}
	if (d.verdict != NET_VERDICT_ALLOW) {
		ret = http_edits__refuse(e, d.status, d.reason);
		goto out_report;
	}
	failed = edits_apply(&d, ans, trace, e);
	/*
	 * A value in clear text only where the policy's grant or the hook's
	 * answer says "clearText": one written for TLS must not leak on 80.
	 */
	if (!failed && clear && !d.clear_text && !(ans && ans->clear_text) &&
	    http_edits__sets(e))
		failed = HTTP_CLEAR_TEXT_REFUSED;
	if (failed) {
		snprintf(d.reason, sizeof(d.reason), "%s", failed);
		ret = http_edits__refuse(
			e,
			strcmp(failed, "http header edit failed") ?
				HTTP_STATUS_FORBIDDEN :
				HTTP_STATUS_INTERNAL,
			d.reason);
		goto out_report;
	}
	ic->verified = true;
	snprintf(ic->host, sizeof(ic->host), "%s", rq->hostname);
	ic->want_up = true;
	if (d.response_ms)
		ic->response_ms = d.response_ms;
out_report:
	ic->counted = ret != HTTP_ALLOW;
	intercept__report(ic, rq->hostname, ret == HTTP_ALLOW, d.reason);
	explicit_bzero(&d, sizeof(d));
	return ret;
}

/* ---- the rewriters ---------------------------------------------------- */

int intercept__make_http1(struct intercept *ic, const char *hostname, bool tls)
{
	struct http1_params hp = {
		.hostname = hostname,
		.port = ntohs(ic->flow.dst.sin_port),
		.tls = tls,
		.on_request = on_request,
		.opaque = ic,
	};
	int ret;

	ret = http1_req__create(&ic->req, &hp);
	return ret ? ret : http1_resp__create(&ic->resp, ic->req);
}

/* h2: a stream refused by the module's own checks, for the log. */
static void h2_refused(void *opaque, unsigned int status, const char *reason)
{
	struct intercept *ic = opaque;

	intercept__report(ic, ic->host, false, reason);
}

int intercept__make_h2(struct intercept *ic)
{
	struct h2_params hp = {
		.hostname = ic->host,
		.port = ntohs(ic->flow.dst.sin_port),
		.on_request = on_request,
		.on_refused = h2_refused,
		.opaque = ic,
		.budget = ic->budget,
	};

	ic->up_in = malloc(INTERCEPT_BUF);
	if (!ic->up_in)
		return -ENOMEM;
	return h2__create(&ic->h2, &hp);
}

/* ---- the hook's answers ----------------------------------------------- */

/*
 * Answers came: the requests that wait are decided again (each takes
 * its answer); answers no request took are for requests gone (an h2
 * stream reset meanwhile): freed. A connection's answer stays.
 */
int intercept__apply_answers(struct intercept *ic)
{
	ssize_t ret = 0;

	if (!ic->answers_new)
		return 0;
	ic->answers_new = false;
	if (ic->h2)
		ret = h2__resume(ic->h2);
	else if (ic->req && ic->state == IC_RELAY)
		ret = http1_req__resume(ic->req);
	for (unsigned int i = 0; i < IC_MAX_ASKS; i++) {
		struct ic_ask *a = &ic->asks[i];

		if (a->used && a->answered && a->index != IC_CONNECTION)
			intercept__ask_free(ic, a);
		a->taken = false;
	}
	if (ret < 0 && !ic->h2)
		return intercept__refused(ic, ret);
	return ret;
}

void intercept__hook_answer(struct intercept *ic, uint64_t id,
			    const struct net_http_decision *d)
{
	for (unsigned int i = 0; i < IC_MAX_ASKS; i++) {
		struct ic_ask *a = &ic->asks[i];

		if (!a->used || a->answered || a->id != id)
			continue;
		a->answered = true;
		/* Failed, its request is refused (hook_decision). */
		a->ans = malloc(sizeof(*a->ans));
		if (a->ans)
			memcpy(a->ans, d, sizeof(*d));
		ic->answers_new = true;
		return;
	}
}

bool intercept__has_answers(const struct intercept *ic)
{
	return ic->answers_new;
}
